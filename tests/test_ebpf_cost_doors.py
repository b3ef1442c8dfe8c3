"""``ebpf_cost`` through the doors besides ``swarmscope run``: ``locust -f`` and ``swarmscope
controller`` with a hand-started worker and probe, each over real BPF statistics and bpftrace.

    .venv/bin/python -m pytest tests/test_ebpf_cost_doors.py -v

Free-running (``locust -f``, the controller without --sweep): CostUser users loop in the node
and the window is one busy phase; the sweep (``swarmscope controller --sweep``): busy then idle,
as ``swarmscope run``. Each window: the loop's execs counted by the shell == the probe's exec
count for the node, and the tools' programs in the table. The chart refuses the kind
(``not_in_cluster``, tests/test_chart_flows.py).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
from typing import Any

import pytest
import yaml
from helpers import BIN, ROOT, chart_commands, load_report, locust_distributed, only_run_dir

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.slow]

TOOLS = "seccomp,open"  # bpftrace only: ig has its own test (tests/test_ebpf_cost.py)
PROGRAMS = 5  # seccomp: sys_enter; open: sys_{enter,exit}_open{,at}


def _busy(it: dict[str, Any]) -> dict[str, Any]:
    """The busy window's loop node: exact, and the tools' programs listed."""
    assert it["flags"] == []
    (n,) = it["per_node"]
    assert n["generated"] == n["kernel"] > 1
    phase = it["extra"]["ebpf_cost"]
    assert phase["phase"] == "busy" and phase["loop"]["execs"] == n["kernel"]
    assert len(phase["programs"]) == PROGRAMS
    return dict(n)


def test_locust_f_ebpf_cost_headless(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    cmd = [
        str(BIN / "locust"), "-f", "scenarios/ebpf_cost.py", "--headless", "-u", "1", "-r", "1", "-t", "8s",
        "--ss-tools", TOOLS, "--ss-duration-s", "1", "--ss-out", str(out),
    ]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "CUMULRUNCOUNT" in p.stderr
    rep = load_report(only_run_dir(out))
    assert rep["status"] == "ok", rep["flags"]
    (pt,) = rep["points"]
    (it,) = pt["iterations"]
    n = _busy(it)
    row = it["extra"]["ebpf_cost"]
    assert row["loop"]["syscalls"] > n["kernel"]


@pytest.mark.parametrize("sweep", [True, False], ids=["sweep", "free-running"])
def test_controller_and_a_worker_run_ebpf_cost(tmp_path: pathlib.Path, sweep: bool) -> None:
    """The chart's commands on one machine (as tests/test_cluster_mode.py): controller, probe
    and worker processes talking over the network only."""
    sfile = tmp_path / "scenario.yaml"
    sfile.write_text(
        yaml.safe_dump(
            {"scenario": "ebpf_cost", "tools": TOOLS.split(","), "duration_s": 1, "pause_s": 0,
             "out": str(tmp_path / "results"), "probe_timeout_s": 120, "worker_timeout_s": 120}
        )
    )  # fmt: skip
    env = {**os.environ, "SWARMSCOPE_TOKEN": "ebpf-cost-token"}
    mode = ["--sweep", "--workers", "1"] if sweep else ["--", "--headless", "-u", "1", "-r", "1", "-t", "12s",
                                                       "--expect-workers", "1"]  # fmt: skip
    with chart_commands(
        tmp_path, sfile, "ebpf_cost", "cost-node-1", env, ["--no-web-login", *mode],
        probe_args=("--programs", "bpf_stats,syscall_count,exec_count"),
    ) as cc:  # fmt: skip
        rc = cc.controller.wait(240)
    assert rc == 0, cc.log("controller")[-3000:]
    rep = load_report(only_run_dir(tmp_path / "results"))
    assert rep["status"] == "ok", rep["flags"]
    if sweep:
        busy, idle = (pt["iterations"][0] for pt in rep["points"])
        _busy(busy)
        (n,) = idle["per_node"]
        assert n["generated"] == n["kernel"] == 0 and idle["extra"]["ebpf_cost"]["phase"] == "idle"
    else:
        (pt,) = rep["points"]
        _busy(pt["iterations"][0])


def test_web_ui(tmp_path: pathlib.Path) -> None:
    """Started and stopped through Locust's HTTP API, as the UI's buttons do; quit by SIGTERM."""
    from test_webui import Locust, get

    out = tmp_path / "results"
    with Locust("scenarios/ebpf_cost.py", out, "--ss-tools", TOOLS, "--ss-duration-s", "1") as loc:
        assert get(loc.base + "/swarm", {"user_count": 1, "spawn_rate": 1})["success"] is True
        loc.wait_requests(2, timeout=120)  # two loops done (the tools start at the swarm's start)
        get(loc.base + "/stop", {})
        loc.wait_windows(1)
        rep = loc.quit_report(out)
    assert rep["status"] == "ok", rep["flags"]
    (pt,) = rep["points"]
    _busy(pt["iterations"][0])


def _master_workers(tmp_path: pathlib.Path, workers: int) -> tuple[int, str, pathlib.Path]:
    out = tmp_path / "results"
    opts = ["-u", "1", "-r", "1", "-t", "8s", "--ss-tools", TOOLS, "--ss-duration-s", "1"]
    opts += ["--ss-out", str(out)]
    return (*locust_distributed("scenarios/ebpf_cost.py", workers, *opts), out)


def test_locust_master_and_one_worker(tmp_path: pathlib.Path) -> None:
    rc, err, out = _master_workers(tmp_path, 1)
    assert rc == 0, err[-3000:]
    rep = load_report(only_run_dir(out))
    assert rep["status"] == "ok", rep["flags"]
    (pt,) = rep["points"]
    _busy(pt["iterations"][0])


def test_locust_master_refuses_a_second_worker_at_start(tmp_path: pathlib.Path) -> None:
    rc, err, out = _master_workers(tmp_path, 2)
    why = "2 connected: ebpf_cost measures one machine with one set of tools"
    assert rc == 2 and why in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    rep = load_report(only_run_dir(out))
    assert rep["status"] == "failed" and rep["points"] == [], rep
