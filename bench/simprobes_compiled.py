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

import sys
from pathlib import Path
from typing import Any

from simprobes import SimProbes, SimProcesses

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


class GoSimProbes(SimProcesses):
    """Processes of compiled simulated probes; ``registered.value`` counts those whose Session is up."""

    @classmethod
    def command(cls) -> tuple[list[str], dict[str, str]]:
        return [build()], {"GOMAXPROCS": "1"}
