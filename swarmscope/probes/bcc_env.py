"""Load BPF programs from bpf/ with BCC, after checking the machine can.

    from swarmscope.probes.bcc_env import load_program
    b = load_program("exec_count", cflags=["-DSS_FILTER_CGROUP=1"])

Programs are loaded by path from the installed package (``swarmscope/bpf/<name>.bpf.c``) and
configured only with cflags: a probe never compiles C it was sent. ``check()`` turns the usual
set-up gaps (not root, no BCC, no kernel headers, no tracefs) into one :class:`SetupError`
saying what to run, instead of a traceback from deep inside BCC.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import subprocess
from typing import Any

from swarmscope.core.errors import ProbeError, SetupError
from swarmscope.core.paths import BPF as BPF_DIR

HEADER_TREES = [pathlib.Path("/var/lib/swarmscope/kernel-headers/current")]
FIX = "run `make setup` (or tools/setup.sh) as root"


def bpf_source(name: str) -> pathlib.Path:
    """``bpf/probe/<name>.bpf.c`` (the probe's programs) or ``bpf/targets/<name>.bpf.c`` (those of
    the systems under test that ship with swarmscope); names are unique across both."""
    for part in ("probe", "targets"):
        path = BPF_DIR / part / f"{name}.bpf.c"
        if path.is_file():
            return path
    raise ProbeError(f"no BPF program {name!r}: not in {BPF_DIR}/probe or {BPF_DIR}/targets")


def _kernel_source() -> str | None:
    env = os.environ.get("BCC_KERNEL_SOURCE")
    if env and pathlib.Path(env, "include").is_dir():
        return env
    build = pathlib.Path("/lib/modules", os.uname().release, "build")
    if (build / "include").is_dir():
        return None  # BCC finds it itself
    for tree in HEADER_TREES:
        if (tree / "include").is_dir():
            return str(tree.resolve())
    return ""


def ensure_mounts() -> None:
    """Mount tracefs, debugfs and bpffs where missing (they are, on a fresh VM)."""
    for fstype, target in (
        ("tracefs", "/sys/kernel/tracing"),
        ("debugfs", "/sys/kernel/debug"),
        ("bpf", "/sys/fs/bpf"),
    ):
        if os.path.ismount(target):
            continue
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ["mount", "-t", fstype, fstype, target],
                check=False,
                capture_output=True,
                timeout=10,
            )


def check(import_bcc: bool = True, tracing: bool = True) -> None:
    """Raise SetupError naming every missing piece; return quietly when BCC can load programs.

    ``import_bcc=False`` only finds BCC's module without importing it (the probe, whose
    loader child imports it): BCC and LLVM must not stay mapped in the caller. ``tracing=False``
    (an XDP program, e.g. the neighbor worker's) needs no tracefs, so nothing is mounted: in a
    pod none is, and the mount attempt is a subprocess, which gevent refuses in the native
    thread the worker compiles in ("child watchers are only available on the default loop")."""
    missing: list[str] = []
    from swarmscope.core.sys.caps import HOW, missing_bpf_caps

    if os.geteuid() != 0:
        missing.append("root (or CAP_BPF + CAP_PERFMON + CAP_SYS_RESOURCE): run as root")
    elif missing_bpf_caps(tracing):  # uid 0 without them: EPERM, which BCC says "Failed to compile"
        missing.append(f"the capabilities {' + '.join(missing_bpf_caps(tracing))}: {HOW}")
    try:
        if import_bcc:
            import bcc  # noqa: F401
        elif importlib.util.find_spec("bcc") is None:
            raise ImportError("bcc")
    except ImportError:
        missing.append("BCC's Python module (Debian package python3-bpfcc, not PyPI's 'bcc')")
    src = _kernel_source()
    if src == "":
        missing.append(
            "kernel headers for BCC (linux-headers-amd64 merged into "
            "/var/lib/swarmscope/kernel-headers/current, or BCC_KERNEL_SOURCE)"
        )
    if tracing and os.geteuid() == 0:
        ensure_mounts()
        if not os.path.isdir("/sys/kernel/tracing/events"):
            missing.append("tracefs at /sys/kernel/tracing")
    if missing:
        raise SetupError("cannot load BPF programs; missing: " + "; ".join(missing) + f". Fix: {FIX}.")


def load_program(name: str, cflags: list[str] | None = None, tracing: bool = True, **kw: Any) -> Any:
    """Compile and load ``bpf/<name>.bpf.c``; TRACEPOINT_PROBEs attach automatically.
    ``tracing=False``: a program with no tracepoints (XDP), see :func:`check`."""
    check(tracing=tracing)
    src = _kernel_source()
    if src:
        os.environ["BCC_KERNEL_SOURCE"] = src
    import bcc

    path = bpf_source(name)
    flags = [f"-I{BPF_DIR}", "-Wno-macro-redefined", *(cflags or [])]
    try:
        return bcc.BPF(src_file=str(path).encode(), cflags=flags, **kw)
    except Exception as e:  # BCC raises bare Exception on compile/load/attach failure
        raise ProbeError(f"loading {path.name} failed: {e}") from e


def percpu_sum(table: Any, field: str | None = None) -> dict[int, int]:
    """Sum a BPF_PERCPU_HASH/ARRAY of u64 (or of structs: their ``field``) into {key: total}."""
    out: dict[int, int] = {}
    for k, v in table.items():
        key = k.value if hasattr(k, "value") else int(k)
        out[key] = int(sum(v) if field is None else sum(getattr(x, field) for x in v))
    return out
