"""A worker and a probe killed mid-run: their nodes are marked missing, the run goes on, and
every other reading is kept.

Two "hosts" on one machine (tests/twohost.py; SWARMSCOPE_NODE_HOST / --node): worker A + probe
A measure node hA's sim node, worker B + probe B node hB's. Everything talks over the network:
the Locust master (ZMQ) and the probe fleet (gRPC) in `swarmscope run --set mode=distributed`.
"""

from __future__ import annotations

import pathlib
import signal

import pytest
from helpers import load_report, only_run_dir
from twohost import launch, stop_all, wait_iterations

pytestmark = [
    pytest.mark.root,
    pytest.mark.bpf,
]


@pytest.mark.slow
def test_killed_worker_and_probe_are_missing_and_the_rest_is_kept(tmp_path: pathlib.Path) -> None:
    # Three windows before the kills, one in flight at them, two after: each after the kills
    # waits out window_timeout_s for what is missing, so two is what the asserts need.
    run, procs, out = launch(tmp_path, iterations=6, window_timeout_s=5)
    lines: list[str] = []
    try:
        # Kill worker B and probe A once three iterations are reconciled.
        wait_iterations(run, 3, lines)
        procs["worker-hB"].send_signal(signal.SIGKILL)
        procs["probe-hA"].send_signal(signal.SIGKILL)
        _, rest = run.communicate(timeout=240)
        assert run.returncode == 0, ("".join(lines) + rest)[-4000:]
    finally:
        stop_all(run, procs)
    rep = load_report(only_run_dir(out))
    its = rep["points"][0]["iterations"]
    assert len(its) == 6, "every iteration is kept, including the ones after the kills"
    node_a = next(n["node"] for n in its[0]["per_node"] if n["node"].startswith("w"))  # names are w<index>-n1
    by_host: dict[str, str] = {}
    for n in its[0]["per_node"]:
        by_host.setdefault("a" if n["node"] == node_a else "b", n["node"])
    # Before the kills: both nodes complete and exact.
    for it in its[:3]:
        for n in it["per_node"]:
            assert n["missing"] == [] and n["generated"] == n["kernel"] > 0, n
    # After the kills (allow one iteration in flight at the kill): worker B's node has no
    # generated count, probe A's node has no kernel count; what is still measured is kept.
    late = its[4:]
    assert late
    missing_worker = [n for it in late for n in it["per_node"] if "worker" in n["missing"]]
    missing_probe = [n for it in late for n in it["per_node"] if "probe" in n["missing"]]
    assert len(missing_worker) == len(late) and len(missing_probe) == len(late), late
    assert {n["node"] for n in missing_worker}.isdisjoint({n["node"] for n in missing_probe})
    for n in missing_probe:
        assert n["generated"] is not None and n["generated"] > 0  # worker A still counted its load
    for n in missing_worker:
        assert n["kernel"] == 0  # probe B still read node B: nothing ran there any more
    assert "missing" in {f["flag"] for f in rep["points"][0]["flags"]}
