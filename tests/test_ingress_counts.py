"""Ingress flood, boom's request counts beyond ``swarmscope run``'s Locust path: the real k6
(shared-iterations), ``locust -f`` (count steps and backend replicas), and the network baseline
(iperf3 between the host and the target's namespace).

Real nginx in our own netns, the real k6 binary, Locust as a subprocess (gevent stays out of
the suite's process).
"""

from __future__ import annotations

import os
import pathlib

import pytest
from test_ingress import assert_exact_per_step, flood, windows

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, veth)")


@pytest.fixture(scope="session")
def k6() -> str:
    from swarmscope.workers.k6 import k6_binary

    return k6_binary(build=True)  # builds via tools/build_k6.sh on a fresh machine


@needs_root
@pytest.mark.timeout(1800)  # the fixture builds k6 on a fresh machine
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


@needs_root
def test_network_baseline_iperf3_beside_the_http_figures(tmp_path: pathlib.Path) -> None:
    """iperf3 both ways between the host and the target's namespace, once before the first step:
    in report.json's ingress summary (with the HTTP peak beside it) and in report.html; the
    load's counts are not touched by it (nginx's log still equals the successes)."""
    r = flood(tmp_path, "steps=5,10", "step_duration=2", "network_baseline_s=1")
    b = r["ingress"]["network_baseline"]
    assert b["tool"] == "iperf3" and b["seconds"] == 1.0 and "error" not in b
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
