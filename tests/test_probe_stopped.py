"""A real probe that hangs but stays connected: SIGSTOP mid-run, its TCP connection open.

Two hosts on one machine (tests/twohost.py). Probe A is stopped once three iterations are
reconciled, so the kernel never closes its socket and no heartbeat says it is gone: each
window waits ``window_timeout_s`` for it, names it missing, and keeps what was measured
(worker A's generated count, all of host B). SIGCONT after three more iterations: it rejoins,
and the last windows are exact on both nodes again.
"""

from __future__ import annotations

import itertools
import pathlib
import signal
import time

import pytest
from helpers import load_report, only_run_dir
from twohost import launch, stop_all, wait_iterations

pytestmark = [
    pytest.mark.root,
    pytest.mark.bpf,
    pytest.mark.slow,
]

ITERATIONS, TIMEOUT_S = 12, 3.0


def test_stopped_probe_is_missing_while_stopped_and_rejoins(tmp_path: pathlib.Path) -> None:
    run, procs, out = launch(tmp_path, ITERATIONS, TIMEOUT_S)
    lines: list[str] = []
    probe_a = procs["probe-hA"]
    try:
        wait_iterations(run, 3, lines)
        probe_a.send_signal(signal.SIGSTOP)
        t_stop = time.monotonic()
        wait_iterations(run, 3, lines)
        stopped_for = time.monotonic() - t_stop
        probe_a.send_signal(signal.SIGCONT)
        assert probe_a.poll() is None  # stopped, never killed: its connection stayed open
        _, rest = run.communicate(timeout=240)
        assert run.returncode == 0, ("".join(lines) + rest)[-4000:]
    finally:
        if probe_a.poll() is None:
            probe_a.send_signal(signal.SIGCONT)
        stop_all(run, procs)
    rep = load_report(only_run_dir(out))
    its = rep["points"][0]["iterations"]
    assert len(its) == ITERATIONS, "every iteration is kept, the stopped ones and the later ones"
    # The hung probe costs each window at most its timeout: it waited for the probe's answer
    # (an open's ack or a close's reading) for window_timeout_s, or less once the fleet saw
    # the probe silent past its liveness; never a hang. Iterations otherwise start 0.5 s apart.
    starts = [it["started_ns"] / 1e9 for it in its]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    print(f"stopped for {stopped_for:.1f} s; gaps between windows {[round(g, 2) for g in gaps]}")
    assert TIMEOUT_S <= max(gaps) < TIMEOUT_S + 4, gaps

    def exact(it: dict) -> bool:
        return all(n["missing"] == [] and n["generated"] == n["kernel"] > 0 for n in it["per_node"])

    assert all(exact(it) for it in its[:3]), its[:3]
    # While stopped (the window in flight at each signal may go either way): probe A's node
    # has no kernel count and is flagged; its worker's generated count is kept; host B's
    # node is exact; the probe's host is named (the window's open went unacknowledged, or no
    # live probe was left to open it on).
    during = its[4:6]
    for it in during:
        (gone,) = [n for n in it["per_node"] if n["missing"]]
        assert gone["missing"] == ["probe"] and gone["kernel"] is None, it
        assert gone["generated"] is not None and gone["generated"] > 0, it
        (other,) = [n for n in it["per_node"] if n is not gone]
        assert other["generated"] == other["kernel"] > 0, it
        assert f"missing:{gone['node']}:probe" in it["flags"], it
        named = set(it["extra"].get("probe_problems", {}))
        named |= {p.rsplit("@", 1)[1] for p in it["extra"].get("missing_probes", [])}
        assert named == {"hA"}, it
    assert len({n["node"] for it in during for n in it["per_node"] if n["missing"]}) == 1
    # After SIGCONT it rejoined: every later window is exact on both nodes.
    assert all(exact(it) for it in its[7:]), its[7:]
