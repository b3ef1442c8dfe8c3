"""Programs loaded by the short-lived loader and read from their bpffs pins: no BCC in this process.

    obj = pinned.load("exec_count")               # runs `python -m swarmscope.probes.loader`
    m = obj.maps["exec_count"]                    # PinnedMap: fd, key_size, value_size, ...
    for key, per_cpu in m.percpu_items(): ...     # raw bytes, one value per possible CPU
    obj.maps["exec_open"].update(key_bytes, value_bytes)
    obj.funcs                                     # {b"tracepoint__sched__...": fn with .fd}
    obj.cleanup()                                 # unpin: links detach, maps and programs go
    pinned.sweep_stale()                          # pins of probes that died unclean

The pin directory is ``/sys/fs/bpf/ss-probe-<pid>-<program>-<hex>``, claimed (kind ``pindir``,
swarmscope.core.sys.owners) by this process *before* the loader makes it, so the sweep at a later
run's start removes it if this process dies without ``cleanup`` (a pinned link keeps its
program attached and counting until then). The loader dies with this process
(PR_SET_PDEATHSIG) and is bounded by ``timeout_s``.

``funcs`` has the shape of BCC's (name -> object with ``fd``), so the probe's self-metrics read
run counts and map fill of a pinned program exactly as of a BCC one. Caveats: keys and values
are raw bytes in the kernel's layout; each program module decodes its own (``struct``) and
checks the sizes against the kernel's at open, so a C struct changed without its reader fails
loudly instead of reading garbage.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from swarmscope.core.errors import ProbeError
from swarmscope.core.sys import bpf, owners

PIN_ROOT = "/sys/fs/bpf"
_PERCPU_TYPES = {5, 6, 10}  # BPF_MAP_TYPE_PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH
# A page of a batched read: small, so a snapshot does not grow the probe's memory.
_CHUNK = 1024


@dataclass
class PinnedFunc:
    fd: int


@dataclass
class PinnedMap:
    name: str
    fd: int
    type: int
    key_size: int
    value_size: int
    max_entries: int

    def check(self, key_size: int, value_size: int) -> PinnedMap:
        """Self, after checking the kernel's layout is the one the reader decodes."""
        if (self.key_size, self.value_size) != (key_size, value_size):
            raise ProbeError(
                f"map {self.name}: kernel layout key {self.key_size} / value {self.value_size} bytes, "
                f"reader expects {key_size} / {value_size} (bpf/ source and reader out of step)"
            )
        return self

    def items(self) -> Iterable[tuple[bytes, bytes]]:
        """Every (key, value) as raw bytes; per-CPU maps give every CPU's value concatenated."""
        size = self.value_size
        if self.type in _PERCPU_TYPES:
            size = (self.value_size + 7) // 8 * 8 * bpf.possible_cpus()
        chunk = max(1, min(_CHUNK, self.max_entries))
        for keys, vals in bpf.map_lookup_batches(self.fd, self.key_size, size, chunk):
            for i in range(len(keys) // self.key_size):
                yield keys[i * self.key_size : (i + 1) * self.key_size], vals[i * size : (i + 1) * size]

    def percpu_items(self) -> Iterable[tuple[bytes, list[bytes]]]:
        """Every (key, [value of CPU 0, CPU 1, ...]) of a per-CPU map."""
        stride = (self.value_size + 7) // 8 * 8
        for k, v in self.items():
            yield k, [v[i : i + self.value_size] for i in range(0, len(v), stride)]

    def update(self, key: bytes, value: bytes) -> None:
        bpf.map_update_elem(self.fd, key, value)

    def delete(self, key: bytes) -> bool:
        """Remove ``key``; False when it was absent."""
        return bpf.map_delete_elem(self.fd, key)

    def drain(self) -> Iterable[tuple[bytes, bytes]]:
        """Every (key, value) of a (not per-CPU) map, removed from it as it is read, in batches."""
        chunk = max(1, min(_CHUNK, self.max_entries))
        pages = bpf.map_lookup_batches(self.fd, self.key_size, self.value_size, chunk, delete=True)
        for keys, vals in pages:
            ks, vs = self.key_size, self.value_size
            for i in range(len(keys) // ks):
                yield keys[i * ks : (i + 1) * ks], vals[i * vs : (i + 1) * vs]


class PinnedObject:
    """One loaded program's pins, opened: what ``load`` returns."""

    def __init__(self, claim: str, path: str) -> None:
        self.claim, self.path = claim, path
        self.funcs: dict[bytes, PinnedFunc] = {}
        self.maps: dict[str, PinnedMap] = {}

    def _open(self) -> None:
        for entry in sorted(os.listdir(self.path)):
            kind, _, name = entry.partition("_")  # bpffs refuses "." in names
            if kind == "prog":
                self.funcs[name.encode()] = PinnedFunc(bpf.obj_get(f"{self.path}/{entry}"))
            elif kind == "map":
                fd = bpf.obj_get(f"{self.path}/{entry}")
                info = bpf.map_info(fd)
                self.maps[name] = PinnedMap(
                    name, fd, info.type, info.key_size, info.value_size, info.max_entries
                )

    def cleanup(self) -> None:
        """Close our fds and remove the pins: links detach, maps and programs are freed."""
        for fd in [f.fd for f in self.funcs.values()] + [m.fd for m in self.maps.values()]:
            os.close(fd)
        self.funcs.clear()
        self.maps.clear()
        shutil.rmtree(self.path, ignore_errors=True)
        owners.release("pindir", self.claim)


def sweep_stale() -> list[str]:
    """Remove the pin directories of probes that died without ``cleanup`` (SIGKILL, OOM):
    their programs are still attached and counting. The same as a run's start-up sweep does,
    for probes that start where no run has since."""
    swept = []
    for name, data in owners.stale("pindir"):
        path = str(data.get("path", ""))
        if name.startswith("probe-") and path.startswith(f"{PIN_ROOT}/ss-probe-"):
            shutil.rmtree(path, ignore_errors=True)
            owners.release("pindir", name)
            swept.append(name)
    return swept


def load(
    program: str,
    cflags: Iterable[str] = (),
    timeout_s: float = 180.0,
    loader_args: Iterable[str] = (),
    layouts: dict[str, tuple[int, int]] | None = None,
) -> PinnedObject:
    """Compile, load and pin ``bpf/<program>.bpf.c`` in a loader process; open its pins here.

    ``loader_args`` go to the loader before the program (``--xdp FUNC --ifaces ...``);
    ``layouts`` is {map: (key size, value size)} as the caller decodes them, checked against
    the kernel's (ProbeError on a mismatch)."""
    from swarmscope.probes.bcc_env import ensure_mounts

    ensure_mounts()
    claim = f"probe-{os.getpid()}-{program}-{secrets.token_hex(3)}"
    obj = PinnedObject(claim, f"{PIN_ROOT}/ss-{claim}")
    try:
        owners.claim("pindir", claim, path=obj.path)  # before the loader makes it
    except OSError as e:
        raise ProbeError(
            f"loading {program}: cannot claim its pin directory ({owners.OWNERS_DIR}): {e}"
        ) from e
    cmd = [sys.executable, "-m", "swarmscope.probes.loader", *loader_args, program, obj.path, "--", *cflags]
    try:
        try:
            p = subprocess.run(owners.dying_with_us(cmd), capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise ProbeError(f"loading {program}: the loader took over {timeout_s:.0f} s") from e
        if p.returncode != 0:
            tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-8:])
            raise ProbeError(f"loading {program}: the loader exited {p.returncode}: {tail}")
        manifest = json.loads(p.stdout.strip().splitlines()[-1])
        obj._open()
        missing = set(manifest["maps"]) - set(obj.maps)
        if missing or set(manifest["funcs"]) != {f.decode() for f in obj.funcs}:
            raise ProbeError(f"loading {program}: pins missing under {obj.path} ({sorted(missing)})")
        for name, (key_size, value_size) in (layouts or {}).items():
            obj.maps[name].check(key_size, value_size)
    except BaseException:
        obj.cleanup()
        raise
    return obj
