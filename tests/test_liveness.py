"""A worker and a probe killed mid-run: their nodes are marked missing, the run goes on, and
every other reading is kept.

Two "hosts" on one machine (SWARMSCOPE_NODE_HOST / --node): worker A + probe A measure node
hA's sim node, worker B + probe B node hB's. Everything talks over the network: the Locust
master (ZMQ) and the probe fleet (gRPC) in `swarmscope run --set mode=distributed`.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import time

import pytest
from helpers import BIN, ROOT, free_port, is_root, load_report, only_run_dir

pytestmark = [
    pytest.mark.root,
    pytest.mark.bpf,
    pytest.mark.skipif(not is_root(), reason="needs root (CI is root)"),
]


def start(cmd: list[str], env: dict[str, str], log: pathlib.Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as fh:
        return subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env}, stdout=fh, stderr=subprocess.STDOUT)


def test_killed_worker_and_probe_are_missing_and_the_rest_is_kept(tmp_path: pathlib.Path) -> None:
    token = tmp_path / "token"
    token.write_text("liveness-test-token\n")
    grpc_port, locust_port = free_port(), free_port()
    out = tmp_path / "results"
    run = subprocess.Popen(
        [
            str(BIN / "swarmscope"), "run", "scenarios/exec_storm.yaml",
            "--set", "mode=distributed", "--set", "spawn_workers=false", "--set", "workers=2",
            "--set", "probe=external", "--set", "expect_probes=2", "--set", f"token_file={token}",
            "--set", f"grpc_bind=127.0.0.1:{grpc_port}", "--set", f"master_bind=127.0.0.1:{locust_port}",
            "--set", "nodes=2", "--set", "iterations=8", "--set", "burst_s=0.3", "--set", "pause_s=0.2",
            "--set", "window_timeout_s=5", "--out", str(out),
        ],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    swarmscope = str(BIN / "swarmscope")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for h in ("hA", "hB"):
            procs[f"probe-{h}"] = start(
                [
                    swarmscope,
                    "probe",
                    "--controller",
                    f"127.0.0.1:{grpc_port}",
                    "--token-file",
                    str(token),
                    "--node",
                    h,
                ],
                {},
                tmp_path / f"probe-{h}.log",
            )
        time.sleep(1.0)  # the fleet listens once the run has loaded its config
        for h in ("hA", "hB"):
            procs[f"worker-{h}"] = start(
                [
                    swarmscope,
                    "worker",
                    "--controller",
                    "127.0.0.1",
                    "--locust-port",
                    str(locust_port),
                    "--",
                    "--ss-nodes",
                    "1",
                ],
                {"SWARMSCOPE_NODE_HOST": h},
                tmp_path / f"worker-{h}.log",
            )
        # Kill worker B and probe A once three iterations are reconciled.
        assert run.stderr is not None
        seen = 0
        lines = []
        deadline = time.monotonic() + 180
        while seen < 3 and time.monotonic() < deadline:
            line = run.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "iter " in line and line.startswith("[nodes="):
                seen += 1
        assert seen == 3, "".join(lines)[-3000:]
        procs["worker-hB"].send_signal(signal.SIGKILL)
        procs["probe-hA"].send_signal(signal.SIGKILL)
        _, rest = run.communicate(timeout=240)
        assert run.returncode == 0, ("".join(lines) + rest)[-4000:]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        if run.poll() is None:
            run.kill()
    rep = load_report(only_run_dir(out))
    its = rep["points"][0]["iterations"]
    assert len(its) == 8, "every iteration is kept, including the ones after the kills"
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
