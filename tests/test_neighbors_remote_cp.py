"""Neighbor writes against a long-lived control plane that is not the worker's (``control_plane``).

    .venv/bin/python -m pytest tests/test_neighbors_remote_cp.py -v

The chart's two-machine topology (workers.neighbors.controlPlane, docs/cluster.md) on one
machine: one control plane server started here, the run's agent and writer reach it by address
over gRPC, from a worker process as in the chart (the embedded run of transport grpc:
test_run_e2e.py). Checked: every window exact (the datapath
recounted from outside by bpftool), the store empty again after each window (the next one lists
only its own entries), the agent's round trip to it measured and reported, and the options that
cannot go together refused by name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import load_report, only_run_dir, run_cli
from neighbors_util import check_neighbor_points, check_recount, control_plane, needs_root, run_with_recount

from swarmscope.v1 import neighbors_pb2 as pb

pytestmark = [needs_root, pytest.mark.bpf]

MODES = ("list_program", "write_watch_program")


@pytest.mark.slow
def test_windows_on_a_long_lived_control_plane_are_exact(tmp_path: Path) -> None:
    out, recount = tmp_path / "out", str(tmp_path / "recount.json")
    with control_plane(str(tmp_path / "cp.db")) as (_, addr, stub):
        p = run_with_recount(
            recount, "scenarios/neighbor_writes.yaml", "--set", "neighbors=300,700",
            "--set", "modes=list_program,write_watch_program", "--set", "transport=grpc",
            "--set", f"control_plane={addr}", "--set", "batch_size=100", "--set", "page_size=1000",
            "--set", "verify_packets=4", "--set", "plot=false", "--set", "mode=distributed",
            "--set", "workers=1", "--out", str(out),
        )  # fmt: skip
        assert p.returncode == 0, p.stderr[-3000:]
        st = stub.Status(pb.StatusRequest())
    rep = load_report(only_run_dir(out))
    check_recount(recount, rep)  # bpftool's dump of the map, not the code's "verified"
    pts = check_neighbor_points(rep, [300, 700], workers=1, page=1000, batch=100, modes=MODES)
    # Each window wrote its entries and deleted them after: 4 windows, nothing left behind.
    assert st.entries == 0
    for x in pts:
        assert x["control_plane"] == addr
        assert 0 < x["rtt_tcp_us"] and 0 < x["rtt_grpc_p50_us"]
    rows = rep["neighbors"]["summary"]
    assert [r["control_plane"] for r in rows] == [addr] * 4


@pytest.mark.slow  # 9.6 s at load average 30 (the CLI's imports)
def test_a_control_plane_elsewhere_needs_grpc() -> None:
    p = run_cli("run", "scenarios/neighbor_writes.yaml", "--set", "control_plane=10.0.0.1:7443", "--explain")
    assert p.returncode == 2
    assert "control_plane" in p.stderr and "set transport grpc" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
