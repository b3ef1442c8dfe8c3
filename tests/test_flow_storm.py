"""The flow storm end to end: real namespaces, real generator, real XDP flow counts per 5-tuple.

`swarmscope run scenarios/flow_storm.yaml` (embedded, and distributed over two workers) must
give, for every node and window, generated == kernel exactly for packets, bytes and flows, and
the kernel's packets-per-flow histogram equal to what was sent to each flow, also when max_s
stops the generator mid-round. The reconcile rule itself is also checked on made-up readings
(a mismatch, a full kernel table).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from helpers import free_port, load_report, only_run_dir, run_cli

from swarmscope.controller.model import PointInfo, ProbeReading, WindowInfo, WindowOutcome
from swarmscope.kinds import load_scenario
from swarmscope.kinds.base import shares
from swarmscope.kinds.flow_storm.perflow import sent_digest
from swarmscope.kinds.flow_storm.results import expected_hist, reconcile
from swarmscope.probes.flowdigest import flow_digest
from swarmscope.workers.flow_gen import flow_key


def root(fn: Any) -> Any:
    """Real BPF and namespaces: CI is root."""
    marks = (
        pytest.mark.root,
        pytest.mark.bpf,
    )
    for m in marks:
        fn = m(fn)
    return fn


def _exact(rep: dict, flows: list[int], ppf: int, frame: int) -> list[dict]:
    """Every window's per-node rows, checked exactly; the rows."""
    assert rep["scenario"] == "flow_storm" and rep["status"] == "ok", rep["flags"]
    assert [p["params"]["flows"] for p in rep["points"]] == flows
    rows = []
    for p in rep["points"]:
        total = 0
        for it in p["iterations"]:
            assert it["flags"] == [], it["flags"]
            for n in it["per_node"]:
                row = it["extra"]["flows"][n["node"]]
                assert n["generated"] == n["kernel"] == row["kernel"]["packets"] == row["generated"]
                assert row["kernel"]["bytes"] == row["bytes"] == frame * row["generated"]
                assert row["kernel"]["flows"] == row["kernel"]["seen"] == row["flows"]
                assert row["kernel"]["drops"] == 0 and row["problems"] == []
                assert row["kernel"]["digest"] == row["digest"] > 0  # flow by flow (probes/flowdigest.py)
                want = {str(k): v for k, v in expected_hist(row).items()}
                assert row["kernel"]["hist"] == want
                total += row["flows"]
                rows.append(row)
        assert total == p["params"]["flows"]
    for sp in rep["flow_storm"]["points"]:
        assert sp["per_flow_ok"] is True and sp["generated"] == sp["kernel"] == sp["flows"] * ppf
    return rows


@pytest.mark.slow
@root
def test_flow_storm_through_swarmscope_run(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    p = run_cli(
        "run", "scenarios/flow_storm.yaml", "--set", "flows=1000,30000", "--set", "agent=none",
        "--set", "packets_per_flow=2", "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    run_dir = only_run_dir(out)
    rep = load_report(run_dir)
    rows = _exact(rep, [1000, 30000], 2, 128)
    assert all(r["rounds"] == 2 and r["partial"] == 0 and not r["stopped"] for r in rows)
    assert "Flow storm: generated against the kernel" in (run_dir / "report.html").read_text()


@pytest.mark.slow
@root
def test_flow_storm_stopped_by_max_s_is_still_exact_per_flow(tmp_path: pathlib.Path) -> None:
    """60000 flows x 3 rounds at 20000 packets/s cannot finish in 1 s: the generator stops in
    round 0 and the flows it reached got one packet, the others none; the kernel agrees."""
    out = tmp_path / "results"
    p = run_cli(
        "run", "scenarios/flow_storm.yaml", "--set", "flows=60000", "--set", "packets_per_flow=3",
        "--set", "rate_pps=20000", "--set", "max_s=1", "--set", "frame_bytes=200", "--set", "agent=none",
        "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    rep = load_report(only_run_dir(out))
    assert rep["status"] == "ok", rep["flags"]
    row = rep["points"][0]["iterations"][0]["extra"]["flows"]["n1"]
    assert row["stopped"] is True and row["rounds"] == 0 and 0 < row["partial"] < 60000
    assert row["generated"] == row["partial"] == row["flows"] == row["kernel"]["packets"]
    assert row["kernel"]["bytes"] == 200 * row["generated"]
    assert row["kernel"]["hist"] == {"1": row["partial"]} and row["problems"] == []


@pytest.mark.slow
@root
def test_flow_storm_distributed(tmp_path: pathlib.Path) -> None:
    """Two worker processes, each its own namespace pair; the probe counts each interface apart
    (the workers share a cgroup on this machine)."""
    out = tmp_path / "results"
    p = run_cli(
        "run", "scenarios/flow_storm.yaml", "--set", "flows=1001,5000", "--set", "mode=distributed",
        "--set", "workers=2", "--set", f"master_bind=127.0.0.1:{free_port()}",
        "--set", "cache_max_flows=100000", "--set", "packets_per_flow=2", "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    rep = load_report(only_run_dir(out))
    _exact(rep, [1001, 5000], 2, 128)
    it = rep["points"][0]["iterations"][0]
    assert sorted((n["node"], n["generated"]) for n in it["per_node"]) == [("w1-n1", 1002), ("w2-n1", 1000)]
    assert len({it["extra"]["flows"][n]["dev"] for n in ("w1-n1", "w2-n1")}) == 2
    # Each worker runs its own agent on its own interface; a map that holds every flow.
    assert all(it["extra"]["flows"][n]["agent"]["dropped_flows"] == 0 for n in ("w1-n1", "w2-n1"))


def _window(nodes: list[str]) -> WindowInfo:
    return WindowInfo(run_id="r", window_id="w", point=0, iteration=1, nodes=nodes, opened_ns=1, closed_ns=2)


def _reading(
    node: str,
    dev: str,
    packets: int,
    nbytes: int,
    flows: int,
    drops: int,
    hist: dict[int, int],
    digest: int = 0,
) -> ProbeReading:
    c = {"packets": packets, "bytes": nbytes, "flows": flows, "drops": drops, "other": 0}
    counters = {**{f"flow.{k}": v for k, v in c.items()}, **{f"flow.dev.{dev}.{k}": v for k, v in c.items()}}
    gauges = {f"flow.dev.{dev}.seen": float(sum(hist.values())), f"flow.dev.{dev}.digest": float(digest)}
    gauges.update({f"flow.dev.{dev}.hist.{k}": float(v) for k, v in hist.items()})
    return ProbeReading(probe_id="p", node=node, counters=counters, gauges=gauges)


def test_reconcile_rule() -> None:
    _kind, cfg = load_scenario("scenarios/flow_storm.yaml", [], env={})
    point = PointInfo(0, {"flows": 10}, 1)
    gen = {"generated": 25, "bytes": 25 * 128, "flows": 10, "flows_asked": 10, "rounds": 2, "partial": 5,
           "dev": "d1", "rate": 1.0, "elapsed_s": 1.0}  # fmt: skip
    assert expected_hist(gen) == {3: 5, 2: 5}
    gen["digest"] = d = sent_digest(gen, 0, 10, 128)
    sent = [(flow_key(i), 3 if i < 5 else 2, (3 if i < 5 else 2) * 128) for i in range(10)]
    assert d == flow_digest(sent) and 0 < d < 2**52
    ok = reconcile(
        cfg,
        WindowOutcome(
            _window(["n1"]), point, {"n1": gen}, [_reading("n1", "d1", 25, 3200, 10, 0, {3: 5, 2: 5}, d)], []
        ),
    )
    assert ok.flags == [] and ok.per_node[0].kernel == 25 and ok.extra["flows"]["n1"]["problems"] == []
    # Same totals and the same histogram, but flows 0 and 9 swapped counts: only the per-flow
    # digest tells.
    swapped = [(k, 5 - p, (5 - p) * 128) if i in (0, 9) else (k, p, b) for i, (k, p, b) in enumerate(sent)]
    sw = flow_digest(swapped)
    bad_flow = reconcile(
        cfg,
        WindowOutcome(
            _window(["n1"]), point, {"n1": gen}, [_reading("n1", "d1", 25, 3200, 10, 0, {3: 5, 2: 5}, sw)], []
        ),
    )
    assert bad_flow.flags == ["harness-mismatch:n1"]
    assert bad_flow.extra["flows"]["n1"]["problems"] == [f"per-flow digest: sent {d}, kernel {sw}"]
    # Same totals, but one flow got a packet of another: the histogram tells.
    bad = reconcile(
        cfg,
        WindowOutcome(
            _window(["n1"]),
            point,
            {"n1": gen},
            [_reading("n1", "d1", 25, 3200, 10, 0, {3: 6, 2: 3, 1: 1}, d)],
            [],
        ),
    )
    assert bad.flags == ["harness-mismatch:n1"]
    assert bad.extra["flows"]["n1"]["problems"] == [
        "packets per flow: sent {3: 5, 2: 5}, kernel {3: 6, 2: 3, 1: 1}"
    ]
    # A full kernel table: drops are a failure, and the flows it could not hold are missing.
    full = reconcile(
        cfg,
        WindowOutcome(
            _window(["n1"]), point, {"n1": gen}, [_reading("n1", "d1", 20, 2560, 8, 5, {3: 4, 2: 4}, d)], []
        ),
    )
    assert full.flags == ["kernel-drops:n1", "harness-mismatch:n1"]
    # Another interface's counts (a worker sharing the cgroup) are not this node's.
    other = reconcile(
        cfg,
        WindowOutcome(
            _window(["n1"]), point, {"n1": gen}, [_reading("n1", "d2", 25, 3200, 10, 0, {3: 5, 2: 5}, d)], []
        ),
    )
    assert other.per_node[0].kernel is None and other.flags == ["missing:n1:probe"]
    missing = reconcile(cfg, WindowOutcome(_window(["n1", "n2"]), point, {"n1": gen}, [], ["p"]))
    assert missing.flags == ["missing:n1:probe", "missing:n2:worker,probe"]
    assert shares(5, ["b", "a"]) == {"a": [0, 3], "b": [3, 2]}


@pytest.mark.slow
@root
def test_reference_agent_cache_sweep(tmp_path: pathlib.Path) -> None:
    """The write-up's experiment in small: a map that holds every flow needs no ring buffer;
    an undersized one is evicted early (full, not the timeout) and the ring buffer takes over
    (ratio above 0.05). Paced to 3 s windows so procstat (1 s ticks) samples. What the agent
    reports never exceeds the kernel's count, less the
    flows it said it dropped; the agent's CPU and RSS come from the probe's procstat."""
    out = tmp_path / "results"
    p = run_cli(
        "run", "scenarios/flow_storm.yaml", "--set", "flows=8000", "--set", "packets_per_flow=3",
        "--set", "cache_max_flows=50000,300", "--set", "rate_pps=8000", "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    rep = load_report(only_run_dir(out))
    _exact(rep, [8000, 8000], 3, 128)
    big, small = sorted(rep["flow_storm"]["points"], key=lambda q: -q["cache_max_flows"])
    assert (big["cache_max_flows"], small["cache_max_flows"]) == (50000, 300)
    assert big["ringbuf_flows"] == 0 and big["early_evictions"] == 0 and big["dropped_flows"] == 0
    assert big["reported_flows"] == 8000 and big["ringbuf_hashmap_ratio"] == 0
    assert small["early_evictions"] > 0 and small["ringbuf_hashmap_ratio"] > 0.05
    for q in (big, small):
        assert q["reported"] + q["dropped_flows"] <= q["kernel"] == 24000
        assert q["agent_rss_mib"] > 0 and q["agent_cpu_pct"] is not None
    rows = [it["extra"]["flows"]["n1"] for pt in rep["points"] for it in pt["iterations"]]
    assert all(r["agent_proc"]["ticks"] >= 1 for r in rows)  # 3 s windows, 1 s procstat ticks


@root  # makes network namespaces
def test_killed_flow_storm_leaves_namespaces_that_the_next_run_sweeps() -> None:
    """A worker SIGKILLed inside FlowNetns leaves both namespaces and their claims; the next
    run's sweep (lifecycle.sweep_stale) deletes exactly those two."""
    import signal
    import subprocess
    import sys

    from swarmscope.app import lifecycle

    code = (
        "import sys, time\n"
        "from swarmscope.workers.flow_netns import FlowNetns\n"
        "net = FlowNetns().__enter__()\n"
        "print(net.src, net.dst, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        src, dst = proc.stdout.readline().split()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert {src, dst} <= {line.split()[0] for line in listed.splitlines() if line.strip()}
    swept = lifecycle.sweep_stale()
    assert {src, dst} <= set(swept.get("netns", []))
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not {src, dst} & {line.split()[0] for line in listed.splitlines() if line.strip()}
