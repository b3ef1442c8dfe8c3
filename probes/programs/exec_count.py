"""exec() counted in the kernel per cgroup v2 id (``bpf/exec_count.bpf.c``).

    prog = ExecCount(); prog.load()
    prog.snapshot()   # {cgroup_id: {"exec": cumulative execs since load}}
    prog.close()

Caveats: counts successful execs only (the sched:sched_process_exec tracepoint fires after the
new image is in place); the map holds at most SS_MAX_KEYS cgroups, execs in further new
cgroups are not counted (lookup_or_try_init fails), which a host with that many cgroups would
notice as a harness mismatch.
"""

from __future__ import annotations

from typing import Any

from swarmscope.errors import ProbeError
from swarmscope.probes import bcc_env
from swarmscope.probes.programs.base import Snapshot


class ExecCount:
    name: str = "exec_count"
    counters: tuple[str, ...] = ("exec",)

    def __init__(self) -> None:
        self._bpf: Any = None

    def load(self) -> None:
        if self._bpf is None:
            self._bpf = bcc_env.load_program(self.name)

    def snapshot(self) -> Snapshot:
        if self._bpf is None:
            raise ProbeError("exec_count: snapshot before load()")
        try:
            sums = bcc_env.percpu_sum(self._bpf[b"exec_count"])
        except Exception as e:  # BCC map reads raise bare Exception / OSError
            raise ProbeError(f"exec_count: reading the map failed: {e}") from e
        return {cg: {"exec": n} for cg, n in sums.items()}

    def close(self) -> None:
        if self._bpf is not None:
            bpf, self._bpf = self._bpf, None
            bpf.cleanup()
