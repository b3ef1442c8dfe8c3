"""Ingress flood, boom's request counts beyond ``swarmscope run``'s Locust path: the real k6
(shared-iterations), ``locust -f`` (count steps and backend replicas), and the network baseline
(iperf3 between the host and the target's namespace).

Real nginx in our own netns, the real k6 binary, Locust as a subprocess (gevent stays out of
the suite's process).
"""

from __future__ import annotations

import pathlib

import prebuilt
import pytest
from test_ingress import assert_exact_per_step, flood, locust_f, windows

needs_root = pytest.mark.root  # conftest skips it with "not root" (CI is root)


@pytest.fixture(scope="session")
def k6() -> str:
    from swarmscope.workers.k6 import k6_binary

    return prebuilt.found(lambda: k6_binary(build=False))


@pytest.mark.slow
@needs_root
def test_k6_request_count_steps_send_exactly_n(tmp_path: pathlib.Path, k6: str) -> None:
    """engine=k6 with requests=: k6's shared-iterations sends exactly N per step, and nginx
    logs exactly N for it (fewer requests than VUs included: 3 requests over 5 VUs)."""
    r = flood(tmp_path, "engine=k6", "steps=20,5", "requests=1001,3", "step_duration=30")
    assert [s["request_count"] for s in r["steps"]] == [1001, 3]
    assert [s["requests"] for s in r["steps"]] == [1001, 3]
    for w, s in zip(windows(r), r["steps"], strict=True):
        assert s["failures"] == 0 and w["server_requests"] == w["successes"] == s["request_count"]
        assert 0 < s["elapsed_s"] < 30 and s["rps"] == s["requests"] / s["elapsed_s"]
    assert_exact_per_step(r)
    assert r["ingress"]["engine"] == "k6" and r["ingress"]["server_requests"] == 1004


@pytest.mark.slow
@needs_root
def test_network_baseline_iperf3_beside_the_http_figures(tmp_path: pathlib.Path) -> None:
    """iperf3 both ways between the host and the target's namespace, once before the first step:
    in report.json's ingress summary (with the HTTP peak beside it) and in report.html; the
    load's counts are not touched by it (nginx's log still equals the successes)."""
    r = flood(tmp_path, "steps=5,10", "step_duration=2", "network_baseline_s=1")
    b = r["ingress"]["network_baseline"]
    assert b["tool"] == "iperf3" and b["seconds"] == 1 and "error" not in b
    for way in ("to_target", "from_target"):
        d = b[way]
        # At least 10 Mbit/s over a veth (it is many Gbit/s), over about the second asked.
        assert d["gbit_s"] > 0.01 and d["bytes"] > 1_000_000 and 0.9 < d["seconds"] < 2.0
        assert d["bytes"] <= d["sent_bytes"]  # what arrived was sent
    assert b["to_target"]["mean_rtt_us"] > 0  # the sender's kernel RTT (TCP_INFO)
    top = max(r["steps"], key=lambda s: s["rps"])
    assert b["http_peak"]["rps"] == top["rps"] and b["http_peak"]["users"] == top["users"]
    assert_exact_per_step(r)  # iperf3's traffic is not HTTP: not in the access log
    assert r["ingress"]["server_requests"] == r["ingress"]["successes"]
    html = (r["run_dir"] / "report.html").read_text()
    assert "Network baseline" in html and "Gbit/s" in html and "iperf3" in html
    # Only in the first window: measured once per run.
    assert ["network_baseline" in w for w in windows(r)] == [True, False]


@pytest.mark.slow
@needs_root
@pytest.mark.parametrize("workers", [0, 2])
def test_locustfile_request_counts_and_backends_per_step(tmp_path: pathlib.Path, workers: int) -> None:
    """locust -f with --ss-requests and --ss-backends (alone, and a master with 2 workers): each
    step sends exactly its count, nginx logs exactly that many lines for it (counted at the
    step's end, before the next starts), on the step's replicas; an odd count splits 501/500."""
    r = locust_f(tmp_path, "--ss-steps", "5,20", "--ss-requests", "300,1001", "--ss-backends", "1,2",
                 "--ss-step-duration", "30", workers=workers)  # fmt: skip
    (w,) = windows(r)  # one test start/stop: one window holding both steps
    steps = r["steps"]
    assert [s["users"] for s in steps] == [5, 20]
    assert [s["request_count"] for s in steps] == [300, 1001]
    assert [s["requests"] for s in steps] == [300, 1001]
    assert [s["server_requests"] for s in steps] == [300, 1001]
    assert [s["backends"] for s in steps] == [1, 2]
    for s in steps:
        assert s["failures"] == 0 and 0 < s["elapsed_s"] < 30 and s["rps"] == s["requests"] / s["elapsed_s"]
        assert len(s["generator_cpu_pct"]) == max(1, workers)
    assert w["server_requests"] == w["successes"] == 1301 and r["ingress"]["exact"] is True
    assert not [f for f in r["points"][0]["iterations"][0]["flags"] if f.startswith("count-incomplete")]
    if workers:
        blobs = w["recorders"]
        assert sorted(blobs) == ["w1-n1", "w2-n1"]
        assert sorted(b["steps"]["1"]["requests"] for b in blobs.values()) == [500, 501]


@pytest.mark.slow
@needs_root
def test_locustfile_timed_steps_reload_onto_each_steps_backends(tmp_path: pathlib.Path) -> None:
    """locust -f with timed steps and --ss-backends 2,1: the target's worker reloads the LB at
    the step boundary; the replicas in each row are the ones the LB was reloaded onto."""
    r = locust_f(tmp_path, "--ss-steps", "5,5", "--ss-backends", "2,1", "--ss-step-duration", "2")
    assert [s["backends"] for s in r["steps"]] == [2, 1]
    assert all(s["requests"] > 50 and s["failures"] == 0 for s in r["steps"])
    (w,) = windows(r)
    assert w["server_requests"] == w["successes"]


def test_network_baseline_takes_whole_seconds_only() -> None:
    """iperf3 reads -t 0.5 as 0, "until killed": refused before anything starts."""
    from swarmscope.core.errors import ConfigError, SetupError
    from swarmscope.kinds.ingress_flood import KIND
    from swarmscope.targets.ingress.netbase import network_baseline

    with pytest.raises(ConfigError, match="network_baseline_s"):
        KIND.schema.load(env={}, sets=["network_baseline_s=0.5"])
    assert KIND.schema.load(env={}, sets=["network_baseline_s=0"]).network_baseline_s == 0
    with pytest.raises(SetupError, match="whole number"):
        network_baseline("ss-none", "127.0.0.1", seconds=0.5)  # type: ignore[arg-type]


@needs_root
@pytest.mark.slow
def test_locustfile_request_counts_against_a_host_it_did_not_start(tmp_path: pathlib.Path) -> None:
    """locust -f with a host (the chart's case: the target runs elsewhere, so no worker has its
    access log) and count steps: every step sends exactly its count, and no step waits for a
    log count no worker can give. Before, the target worker announced itself as the log's
    owner for any URL and the master waited END_WAIT_S (20 s) at the end of every step."""
    from swarmscope.targets.ingress.local import LocalIngress
    from swarmscope.workers.step_sync import END_WAIT_S

    with LocalIngress() as target:  # started here: to the worker, a host like any other
        before = target.access_log_count()
        r = locust_f(tmp_path, "--ss-host", target.url, "--ss-steps", "1,2", "--ss-requests", "50,80",
                     "--ss-step-duration", "60")  # fmt: skip
        served = target.access_log_count() - before
    assert [s["requests"] for s in r["steps"]] == [50, 80]
    assert r["ingress"]["server_requests"] is None  # not the worker's log to count
    assert served == 130 + r["ingress"]["preflight_requests"] == 131
    # The window holds both steps: a few seconds (the shape ticks), where the two waits alone
    # took 40 s.
    it = r["points"][0]["iterations"][0]
    assert (it["ended_ns"] - it["started_ns"]) / 1e9 < END_WAIT_S


@pytest.mark.slow
def test_iperf3_without_totals_is_retried_then_a_setup_error(tmp_path: pathlib.Path, monkeypatch) -> None:
    """Under load iperf3 has printed an "end" without sum_sent/sum_received (exit 0); the run
    used to die on a KeyError. Each try is made again, then the run gets our SetupError."""
    import subprocess

    from swarmscope.core.errors import SetupError
    from swarmscope.targets.ingress import netbase

    calls = tmp_path / "calls"
    fake = tmp_path / "iperf3"
    fake.write_text(f'#!/bin/sh\necho x >> {calls}\necho \'{{"end": {{"streams": []}}}}\'\n')
    fake.chmod(0o755)
    monkeypatch.setattr(netbase, "IPERF3", str(fake))
    server = subprocess.Popen(["sleep", "30"], stderr=subprocess.PIPE)
    try:
        with pytest.raises(SetupError, match="no totals"):
            netbase._client("127.0.0.1", 5201, 1, False, server)
    finally:
        server.kill()
        server.wait()
    assert len(calls.read_text().split()) == netbase.CONNECT_TRIES


def test_a_kill_cut_log_is_named_only_within_the_in_flight_bound() -> None:
    """nginx logs after replying: a SIGKILL may cut the lines of requests in flight (≤ 1 per
    user). Within that bound, in a kill-lb-local window, the shortfall is named; beyond it, or
    with no kill, or with more lines than successes, it stays a server-mismatch."""
    from types import SimpleNamespace

    from swarmscope.controller.model import PointInfo
    from swarmscope.kinds.ingress_flood.results import _cut_by_kill

    closed = SimpleNamespace(model="closed", steps=[10.0, 30.0], open_users=50)
    opened = SimpleNamespace(model="open", steps=[100.0], open_users=50)
    pt = PointInfo(index=0, params={"users": 10}, iterations=1)
    kill = ["kill-lb-local"]  # the faults that struck in the window, by name
    assert _cut_by_kill(closed, pt, kill, 5284, 5283, 1) == 1  # type: ignore[arg-type]
    assert _cut_by_kill(closed, pt, kill, 5293, 5283, 1) == 10  # type: ignore[arg-type]
    assert _cut_by_kill(closed, pt, kill, 5294, 5283, 1) == 0  # type: ignore[arg-type]
    assert _cut_by_kill(closed, pt, kill, 5283, 5284, 1) == 0  # type: ignore[arg-type]
    assert _cut_by_kill(closed, pt, ["kill-pod"], 5284, 5283, 1) == 0  # type: ignore[arg-type]
    assert _cut_by_kill(closed, pt, kill, 5284, None, 1) == 0  # type: ignore[arg-type]
    free = PointInfo(index=0, params={}, iterations=1)  # locust -f: one window, every step
    assert _cut_by_kill(closed, free, kill, 130, 100, 1) == 30  # type: ignore[arg-type]
    assert _cut_by_kill(opened, free, kill, 200, 100, 2) == 100  # type: ignore[arg-type]
    assert _cut_by_kill(opened, free, kill, 201, 100, 2) == 0  # type: ignore[arg-type]
