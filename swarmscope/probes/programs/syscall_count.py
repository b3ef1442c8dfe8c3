"""System calls counted in the kernel per cgroup v2 id and syscall (``bpf/syscall_count.bpf.c``).

    prog = SyscallCount()                           # every syscall
    prog = SyscallCount(["getppid", "openat"])      # only these (names or numbers)
    prog.load()
    prog.snapshot()   # {cgroup_id: {"sys.getppid": n, "sys.openat": m, ...}} cumulative
    prog.configure({"syscall_count.syscalls": ["execve"]})   # this window's filter ({} = start-up)
    prog.close()

The registry entry ``syscall_count`` reads its filter (param ``syscall_count.syscalls``) from
$SWARMSCOPE_SYSCALLS (comma list; unset = all). Per window, a new filter set is written into the
kernel's filter array without a reload; switching between filtered and unfiltered needs the
other build, so ``configure`` reloads the program (through the loader, as at start): its
counters restart from zero and a window still open across the reload gets a "went down" error at
close. Counter names are ``sys.<name>`` where the x86_64 table (``asm/unistd_64.h``, linux-libc-
dev) names the number, else ``sys.<nr>``. Caveats: raw_syscalls:sys_enter fires on every syscall
of the host, so an unfiltered counter costs a hash update per syscall (see bench/probes.py for
ns/run); the map holds at most SS_MAX_KEYS (cgroup, nr) pairs.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from swarmscope.core.config import Field, list_of
from swarmscope.core.errors import ProbeError
from swarmscope.probes import pinned
from swarmscope.probes.programs.base import Snapshot
from swarmscope.probes.programs.params import startup_values

UNISTD = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"
ENV_FILTER = "SWARMSCOPE_SYSCALLS"
MAX_SYSCALL = 1024  # SS_MAX_SYSCALL in the C file
_KEY = struct.Struct("<QQ")  # struct sc_key {cgroup, nr} in syscall_count.bpf.c
_U64, _U32 = struct.Struct("<Q"), struct.Struct("<I")


@functools.cache
def syscall_table() -> dict[int, str]:
    """{nr: name} from the x86_64 unistd header; empty when the header is not installed."""
    try:
        with open(UNISTD, encoding="ascii") as fh:
            text = fh.read()
    except OSError:
        return {}
    return {int(nr): name for name, nr in re.findall(r"#define __NR_(\w+)\s+(\d+)", text)}


def syscall_nr(spec: str | int) -> int:
    """A syscall number from a number or a name (``getppid``)."""
    if isinstance(spec, int) or str(spec).isdigit():
        nr = int(spec)
    else:
        by_name = {v: k for k, v in syscall_table().items()}
        if spec not in by_name:
            raise ProbeError(
                f"syscall_count: unknown syscall {spec!r} (give a name from {UNISTD} or a number)"
            )
        nr = by_name[spec]
    if not 0 <= nr < MAX_SYSCALL:
        raise ProbeError(f"syscall_count: syscall number {nr} out of range 0..{MAX_SYSCALL - 1}")
    return nr


def counter_name(nr: int) -> str:
    return f"sys.{syscall_table().get(nr, str(nr))}"


def _check_syscalls(specs: list[str]) -> str | None:
    for s in specs:
        try:
            syscall_nr(s)
        except ProbeError as e:
            return str(e)
    return None


PARAMS = [
    Field(
        "syscall_count.syscalls",
        list_of(str),
        None,
        "count only these syscalls (names or numbers, comma list); unset = every syscall",
        ENV_FILTER,
        nullable=True,
        check=_check_syscalls,
    ),
]
WINDOW_PARAMS = frozenset({"syscall_count.syscalls"})


class SyscallCount:
    name: str = "syscall_count"

    def __init__(self, syscalls: Iterable[str | int] | None = None) -> None:
        self._bpf: pinned.PinnedObject | None = None
        self.filter: list[int] | None = None
        self.counters: tuple[str, ...] = ()
        self._set_filter(None if syscalls is None else sorted({syscall_nr(s) for s in syscalls}))
        self._startup = self.filter

    def _set_filter(self, nrs: list[int] | None) -> None:
        self.filter = nrs
        # With a filter every counter is known up front (explicit zeros); without, it is dynamic.
        self.counters = tuple(counter_name(n) for n in nrs or ())

    @classmethod
    def from_env(cls) -> SyscallCount:
        return cls(startup_values("syscall_count", PARAMS)["syscall_count.syscalls"])

    def configure(self, options: Mapping[str, Any]) -> None:
        unknown = set(options) - WINDOW_PARAMS
        if unknown:
            raise ProbeError(f"syscall_count: not per-window options: {', '.join(sorted(unknown))}")
        key = "syscall_count.syscalls"
        if key in options:  # given as None (blank text): every syscall
            want = None if options[key] is None else sorted({syscall_nr(s) for s in options[key]})
        else:
            want = self._startup
        if want == self.filter:
            return
        if self._bpf is None or (want is None) != (self.filter is None):
            # Not loaded, or the other build (filtered <-> not): (re)load with the new filter.
            loaded = self._bpf is not None
            self.close()
            self._set_filter(want)
            if loaded:
                self.load()
            return
        for nr in set(want or ()) - set(self.filter or ()):
            self._filter_slot(nr, True)
        for nr in set(self.filter or ()) - set(want or ()):
            self._filter_slot(nr, False)
        self._set_filter(want)

    def _filter_slot(self, nr: int, on: bool) -> None:
        """Count syscall ``nr`` (or stop counting it) in the loaded filtered build."""
        assert self._bpf is not None
        self._bpf.maps["syscall_filter"].update(_U32.pack(nr), bytes([int(on)]))

    def load(self) -> None:
        if self._bpf is not None:
            return
        cflags = ["-DSS_FILTER_SYSCALLS=1"] if self.filter is not None else []
        layouts = {"syscall_count": (_KEY.size, _U64.size)}
        if self.filter is not None:  # the unfiltered build has no filter map
            layouts["syscall_filter"] = (_U32.size, 1)
        self._bpf = pinned.load(self.name, cflags, layouts=layouts)
        # The program is already attached: until the filter is filled it counts nothing,
        # which only delays the start (never counts unwanted syscalls).
        for nr in self.filter or ():
            self._filter_slot(nr, True)

    def snapshot(self) -> Snapshot:
        if self._bpf is None:
            raise ProbeError("syscall_count: snapshot before load()")
        out: Snapshot = {}
        try:
            for k, cpus in self._bpf.maps["syscall_count"].percpu_items():
                cgroup, nr = _KEY.unpack(k)
                cg = out.setdefault(cgroup, {})
                name = counter_name(nr)
                cg[name] = cg.get(name, 0) + sum(_U64.unpack(v)[0] for v in cpus)
        except ProbeError as e:
            raise ProbeError(f"syscall_count: reading the map failed: {e}") from e
        return out

    def close(self) -> None:
        if self._bpf is not None:
            bpf, self._bpf = self._bpf, None
            bpf.cleanup()
