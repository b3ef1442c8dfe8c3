"""Compiled simulated probes (bench/simprobes_go, Go): bench/simprobes.py's probes at a fraction of its CPU.

    sims = GoSimProbes.spawn(address, token, names, per_process=2500, cpus={1})
    sims.wait_registered(timeout_s=120); ...; sims.stop()
    cls = sim_probes(pick_sim("auto"))   # GoSimProbes if the Go build works, else SimProbes

The same wire behaviour as SimProbes (the reference: simprobes.py's docstring) and the same
interface the benches use: ``spawn`` with the same arguments, ``procs`` (one OS process per
``per_process`` probes, with ``.pid`` and ``.kill()``), ``registered.value``, ``wait_registered``,
``stop``, ``stop_event.set()``. The binary is built by tools/go_build.sh (cached by source
hash: the first call after an edit takes a few seconds, a cold module cache a minute). Each
process gets its slice as one JSON line on stdin and stops when stdin ends; it prints
"registered N" on stdout as its count changes. Caveat: each process runs with GOMAXPROCS=1, as
each Python one is one event loop, so their CPU figures compare.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from simprobes import Registering, SimProbes

from swarmscope.core.errors import SetupError
from swarmscope.core.sys.gobuild import go_binary

BUILD = Path(__file__).resolve().parent.parent / "tools" / "go_build.sh"
SIMS = ("go", "python")
_built: list[str] = []  # the binary's path, once built in this process


def build() -> str:
    """The binary's path (built and cached by tools/go_build.sh on first use)."""
    if not _built:
        _built.append(go_binary(BUILD, "Go simulated probes"))
    return _built[0]


def pick_sim(choice: str) -> str:
    """``auto``: "go" when the Go simulated probes build, else "python" (said on stderr)."""
    if choice != "auto":
        return choice
    try:
        build()
    except SetupError as e:
        print(f"simulated probes: Go build failed, using Python ones: {e}", file=sys.stderr)
        return "python"
    return "go"


def sim_probes(kind: str) -> Any:
    """The class of simulated probes called ``kind`` ("go" or "python")."""
    return {"go": GoSimProbes, "python": SimProbes}[kind]


class _Count:
    """``registered.value``: the probes whose first Session is up, over every process."""

    def __init__(self, n: int):
        self.per_proc = [0] * n

    @property
    def value(self) -> int:
        return sum(self.per_proc)


class _Stop:
    """``stop_event.set()``: the processes' stdin closed, so each one exits."""

    def __init__(self, procs: list[subprocess.Popen[str]]):
        self.procs = procs

    def set(self) -> None:
        for p in self.procs:
            try:
                if p.stdin is not None:
                    p.stdin.close()
            except OSError:
                pass  # already gone: its pipe is broken


class GoSimProbes(Registering):
    """Processes of compiled simulated probes; ``registered.value`` counts those whose Session is up."""

    def __init__(self, procs: list[subprocess.Popen[str]], n: int):
        self.procs, self.n = procs, n
        self.registered = _Count(len(procs))
        self.stop_event = _Stop(procs)
        self._readers = [
            threading.Thread(target=self._read, args=(i,), daemon=True) for i, _ in enumerate(procs)
        ]
        for t in self._readers:
            t.start()

    def _read(self, i: int) -> None:
        out = self.procs[i].stdout
        assert out is not None
        for line in out:
            if line.startswith("registered "):
                self.registered.per_proc[i] = int(line.split()[1])

    @classmethod
    def spawn(
        cls,
        address: str | list[str],
        token: str,
        names: list[str],
        per_process: int = 2500,
        per_channel: int = 50,
        cpus: set[int] | None = None,
        spread: int = 1,
    ) -> GoSimProbes:
        """As SimProbes.spawn: probe i starts at upstream ``i % spread`` of the first ``spread``."""
        binary = build()
        upstreams = [address] if isinstance(address, str) else list(address)
        env = dict(os.environ, SWARMSCOPE_TOKEN=token, GOMAXPROCS="1")  # the token never in argv
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        procs = []
        for i in range(0, len(names), per_process):
            part = {
                "upstreams": upstreams,
                "spread": spread,
                "first": i,
                "names": names[i : i + per_process],
                "per_channel": per_channel,
            }
            p = subprocess.Popen(
                [binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, preexec_fn=pin
            )
            assert p.stdin is not None
            p.stdin.write(json.dumps(part) + "\n")
            p.stdin.flush()  # and kept open: its end is the stop
            procs.append(p)
        return cls(procs, len(names))

    def stop(self, grace_s: float = 5.0) -> None:
        """Close every process's stdin (each exits), kill what is left after ``grace_s``."""
        self.stop_event.set()
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        for t in self._readers:
            t.join(5)  # they end at their pipe's end, now the processes have
