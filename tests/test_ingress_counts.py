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
from test_ingress import assert_exact_per_step, flood, k6_bin, windows  # noqa: F401  (k6_bin: fixture)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, veth)")


@needs_root
@pytest.mark.timeout(1800)  # k6_bin builds k6 on a fresh machine
def test_k6_request_count_steps_send_exactly_n(tmp_path: pathlib.Path, k6_bin: str) -> None:
    """engine=k6 with requests=: k6's shared-iterations sends exactly N per step, and nginx
    logs exactly N for it (fewer requests than VUs included: 3 requests over 5 VUs)."""
    r = flood(tmp_path, "engine=k6", "steps=5,20,5", "requests=300,1001,3", "step_duration=30")
    assert [s["request_count"] for s in r["steps"]] == [300, 1001, 3]
    assert [s["requests"] for s in r["steps"]] == [300, 1001, 3]
    for w, s in zip(windows(r), r["steps"], strict=True):
        assert s["failures"] == 0 and w["server_requests"] == w["successes"] == s["request_count"]
        assert 0 < s["elapsed_s"] < 30 and s["rps"] == s["requests"] / s["elapsed_s"]
    assert_exact_per_step(r)
    assert r["ingress"]["engine"] == "k6" and r["ingress"]["server_requests"] == 1304
