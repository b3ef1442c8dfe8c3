"""Two "hosts" on one machine for whole-run liveness tests: a distributed `swarmscope run`
with external probes, worker A + probe A on host hA, worker B + probe B on hB.

    run, procs, out = launch(tmp_path, iterations=8, window_timeout_s=5)
    lines = wait_iterations(run, 3)        # once three iterations are reconciled
    procs["probe-hA"].send_signal(signal.SIGKILL)
    ...
    stop_all(run, procs)

Everything talks over the network: the Locust master (ZMQ) and the probe fleet (gRPC). Node
names are w<index>-n1 (one node per worker), in the order the workers joined.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import time

from helpers import BIN, ROOT, free_port, stop_procs

HOSTS = ("hA", "hB")


def start(cmd: list[str], env: dict[str, str], log: pathlib.Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as fh:
        return subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env}, stdout=fh, stderr=subprocess.STDOUT)


def launch(
    tmp_path: pathlib.Path, iterations: int, window_timeout_s: float
) -> tuple[subprocess.Popen[str], dict[str, subprocess.Popen[bytes]], pathlib.Path]:
    token = tmp_path / "token"
    token.write_text("liveness-test-token\n")
    grpc_port, locust_port = free_port(), free_port()
    out = tmp_path / "results"
    swarmscope = str(BIN / "swarmscope")
    run = subprocess.Popen(
        [
            swarmscope, "run", "scenarios/exec_storm.yaml",
            "--set", "mode=distributed", "--set", "spawn_workers=false", "--set", "workers=2",
            "--set", "probe=external", "--set", "expect_probes=2", "--set", f"token_file={token}",
            "--set", f"grpc_bind=127.0.0.1:{grpc_port}", "--set", f"master_bind=127.0.0.1:{locust_port}",
            "--set", "nodes=2", "--set", f"iterations={iterations}", "--set", "burst_s=0.3",
            "--set", "pause_s=0.2", "--set", f"window_timeout_s={window_timeout_s}", "--out", str(out),
        ],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for h in HOSTS:
            procs[f"probe-{h}"] = start(
                [swarmscope, "probe", "--controller", f"127.0.0.1:{grpc_port}", "--token-file", str(token),
                 "--node", h],
                {},
                tmp_path / f"probe-{h}.log",
            )  # fmt: skip
        time.sleep(1.0)  # the fleet listens once the run has loaded its config
        for h in HOSTS:
            procs[f"worker-{h}"] = start(
                [swarmscope, "worker", "--controller", "127.0.0.1", "--locust-port", str(locust_port)],
                {"SWARMSCOPE_NODE_HOST": h},
                tmp_path / f"worker-{h}.log",
            )  # fmt: skip
    except BaseException:
        stop_all(run, procs)
        raise
    return run, procs, out


def wait_iterations(run: subprocess.Popen[str], n: int, lines: list[str], timeout_s: float = 180) -> None:
    """Read the run's stderr until ``n`` more iteration lines were printed (kept in ``lines``)."""
    assert run.stderr is not None
    seen = 0
    deadline = time.monotonic() + timeout_s
    while seen < n and time.monotonic() < deadline:
        line = run.stderr.readline()
        if not line:
            break
        lines.append(line)
        if "iter " in line and line.startswith("[nodes="):
            seen += 1
    assert seen == n, "".join(lines)[-3000:]


def stop_all(run: subprocess.Popen[str], procs: dict[str, subprocess.Popen[bytes]]) -> None:
    stop_procs(procs.values(), 20)
    if run.poll() is None:
        run.kill()
        run.wait(10)
