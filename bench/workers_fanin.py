"""Workers' fan-in: N simulated Locust workers on one real master, windows merged exactly.

    .venv/bin/python bench/workers_fanin.py                        # 100, 300 and 1,000 workers
    .venv/bin/python bench/workers_fanin.py --workers 1000 --stall 0.1   # 10 % hang mid-window
    .venv/bin/python bench/workers_fanin.py --workers 5 --windows 1      # the smoke test's form

The master is the real one: ``swarmscope run scenarios/exec_storm.yaml --set mode=distributed
--set spawn_workers=false`` with a worker token (CURVE), one node per worker, probes external.
The workers are bench/simworkers.py's (the real protocol: Locust's client_ready, heartbeats,
stats; swarmscope's setup/nodes/run/result with spans), the probes bench/simprobes.py's (one
per ``--probe-hosts`` host; they read the count the workers report, so every node reconciles
exact). Liveness runs as in a real run: Locust's heartbeats both ways.

One line per N: ``workers=N windows=W results=R lost=L close_p50_ms=… close_p99_ms=…
master_cpu_s_per_window=… master_rss_mib=…`` and the load average. ``results``: per-node
results merged with the exact count; ``lost`` = expected − merged (a hung worker's windows are
not expected, they must show as missing ``worker``); close: from the end of a window's load (the
last worker's ``due``) to the master printing the reconciled window (results merged, probes
read, reconciled, stored). CPU per window: the master's user+sys between its first and last
window line, over the windows between. Goal at 1,000 workers: lost=0, close p99 < 1 s. With
``--stall F`` a second line names the hung workers and checks they were reported missing by
name, their nodes kept (in every window, missing ``worker``). Caveat: the simulated workers and
probes share the 2 cores with the master; the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import psutil  # noqa: E402
from simprobes import SimProbes  # noqa: E402
from simworkers import COUNT, SimWorkers  # noqa: E402


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


class Master:
    """``swarmscope run`` as the Locust master, its stderr read with arrival times."""

    def __init__(self, tmp: pathlib.Path, n: int, windows: int, burst_s: float, probe_hosts: int, token: str):
        self.grpc_port, self.locust_port = _free_port(), _free_port()
        self.token_file = tmp / "probe-token"
        self.token_file.write_text("workers-fanin-bench\n")
        self.out = tmp / "results"
        cmd = [
            sys.executable, "-m", "swarmscope", "run", "scenarios/exec_storm.yaml",
            "--set", "mode=distributed", "--set", "spawn_workers=false", "--set", f"workers={n}",
            "--set", "probe=external", "--set", f"expect_probes={probe_hosts}",
            "--set", f"token_file={self.token_file}", "--set", f"grpc_bind=127.0.0.1:{self.grpc_port}",
            "--set", f"master_bind=127.0.0.1:{self.locust_port}", "--set", f"nodes={n}",
            "--set", f"iterations={windows}", "--set", f"burst_s={burst_s}", "--set", "pause_s=0.2",
            "--set", "window_timeout_s=20", "--set", "worker_timeout_s=300", "--out", str(self.out),
        ]  # fmt: skip
        # The master's own key pair (issue 27): its secret in a file only the master reads, the
        # public half for the workers.
        from swarmscope.app import workerauth

        key = tmp / "master.key"
        self.master_public, secret = workerauth.new_master_key()
        key.write_bytes(secret)
        key.chmod(0o600)
        env = {**os.environ, "SWARMSCOPE_WORKER_TOKEN": token, workerauth.ENV_MASTER_KEY_FILE: str(key)}
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.ps = psutil.Process(self.proc.pid)
        self.lines: list[tuple[float, str]] = []
        self.marks: list[tuple[float, float, int]] = []  # (time, cpu s, rss) at each window line
        self.ready_cpu = 0.0  # the master's CPU s when every worker was acked
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            t = time.time()
            self.lines.append((t, line))
            if line.startswith("[nodes=") and "iter " in line:
                try:
                    c = self.ps.cpu_times()
                    self.marks.append((t, c.user + c.system, self.ps.memory_info().rss))
                except psutil.Error:
                    pass

    def report(self) -> dict[str, Any]:
        dirs = [d for d in self.out.iterdir() if d.is_dir()]
        return json.loads((dirs[0] / "report.json").read_text())

    def tail(self) -> str:
        return "".join(line for _, line in self.lines[-40:])


def _wait(master: Master, wait: Any, timeout_s: float) -> None:
    """``wait(t)`` in short steps, failing at once (with its output) if the master exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        if master.proc.poll() is not None:
            raise RuntimeError(f"the master exited {master.proc.returncode}:\n{master.tail()}")
        try:
            return wait(2.0)
        except TimeoutError:
            if time.monotonic() > deadline:
                raise


def run_one(
    n: int, windows: int, burst_s: float, stall: float, probe_hosts: int, per_process: int
) -> dict[str, Any]:
    from swarmscope.core import auth

    token = auth.new_token()
    with tempfile.TemporaryDirectory(prefix="workers-fanin-") as d:
        tmp = pathlib.Path(d)
        master = Master(tmp, n, windows, burst_s, probe_hosts, token)
        probes = workers = None
        try:
            time.sleep(1.5)  # the fleet listens once the run has loaded its config
            probes = SimProbes.spawn(
                f"127.0.0.1:{master.grpc_port}",
                master.token_file.read_text().strip(),
                [f"simhost{k}" for k in range(probe_hosts)],
            )
            _wait(master, lambda t: probes.wait_registered(timeout_s=t), 120)
            workers = SimWorkers.spawn(
                f"127.0.0.1:{master.locust_port}",
                token,
                master.master_public,
                n,
                per_process=per_process,
                stall=stall,
            )
            _wait(master, lambda t: workers.wait_ready(timeout_s=t), 300)
            c = master.ps.cpu_times()
            master.ready_cpu = c.user + c.system
            rc = master.proc.wait(timeout=120 + windows * (burst_s + 30))
            if rc != 0:
                raise RuntimeError(f"the master exited {rc}:\n{master.tail()}")
            master.reader.join(10)
            rep = master.report()
        except BaseException:
            if master.proc.poll() is None:
                master.proc.send_signal(signal.SIGTERM)
                master.proc.wait(30)
            print(master.tail(), file=sys.stderr)
            raise
        finally:
            if workers is not None:
                workers.stop()
            if probes is not None:
                probes.stop()
        return figures(n, rep, master, workers)


def figures(n: int, rep: dict[str, Any], master: Master, workers: SimWorkers) -> dict[str, Any]:
    its = rep["points"][0]["iterations"]
    stalled = {e["worker"]: e["nodes"] for e in workers.of("stalled")}
    stalled_nodes = {node for nodes in stalled.values() for node in nodes}
    due: dict[str, float] = {}
    for e in workers.of("sent"):
        due[e["window"]] = max(due.get(e["window"], 0.0), e["due"])
    results = expected = 0
    kept_missing = 0
    named: set[str] = set()
    for k, it in enumerate(its):
        for node in it["per_node"]:
            # A hung worker's node: expected from the window it hung in on (stall_window 2 = its 2nd).
            if node["node"] in stalled_nodes and k >= 1:
                kept_missing += node["missing"] == ["worker"]
                continue
            expected += 1
            results += node["generated"] == COUNT and node["kernel"] == COUNT and node["missing"] == []
        named |= {w for w in it["extra"].get("silent_workers", [])}
    expected = max(expected, n * len(its) - len(stalled_nodes) * max(len(its) - 1, 0))
    closes = []
    by_window = {it["window_id"]: k for k, it in enumerate(its)}
    line_times = [t for t, line in master.lines if line.startswith("[nodes=") and "iter " in line]
    for wid, k in by_window.items():
        if wid in due and k < len(line_times):
            closes.append((line_times[k] - due[wid]) * 1000.0)
    marks = master.marks
    if len(marks) > 1:
        cpu = (marks[-1][1] - marks[0][1]) / (len(marks) - 1)
    else:  # one window: from all workers acked (their set-up included) to its line
        cpu = marks[0][1] - master.ready_cpu if marks else float("nan")
    rss = max((m[2] for m in marks), default=0) / 2**20
    return {
        "workers": n,
        "windows": len(its),
        "results": results,
        "lost": expected - results,
        "close_p50_ms": _pct(closes, 0.5),
        "close_p99_ms": _pct(closes, 0.99),
        "master_cpu_s_per_window": cpu,
        "master_rss_mib": rss,
        "stalled": sorted(stalled),
        "stalled_nodes": sorted(stalled_nodes),
        "named": sorted(named),
        "stalled_nodes_kept_missing": kept_missing,
        "stalled_node_windows": len(stalled_nodes) * max(len(its) - 1, 0),
        "report": rep,
        "master_log": "".join(line for _, line in master.lines),
    }


def line(f: dict[str, Any]) -> str:
    return (
        f"workers={f['workers']} windows={f['windows']} results={f['results']} lost={f['lost']} "
        f"close_p50_ms={f['close_p50_ms']:.0f} close_p99_ms={f['close_p99_ms']:.0f} "
        f"master_cpu_s_per_window={f['master_cpu_s_per_window']:.3f} master_rss_mib={f['master_rss_mib']:.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="100,300,1000", help="comma-separated worker counts")
    ap.add_argument("--windows", type=int, default=10)
    ap.add_argument("--burst-s", type=float, default=1.0, help="each window's load, seconds")
    ap.add_argument("--stall", type=float, default=0.0, help="fraction of workers that hang in window 2")
    ap.add_argument("--probe-hosts", type=int, default=1, help="simulated probes the nodes spread over")
    ap.add_argument("--per-process", type=int, default=500, help="simulated workers per process")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.stall and args.windows < 2:
        ap.error("--stall needs --windows 2 or more (workers hang in window 2)")
    failed = 0
    for n in (int(x) for x in args.workers.split(",")):
        load0 = os.getloadavg()[0]
        try:
            f = run_one(n, args.windows, args.burst_s, args.stall, args.probe_hosts, args.per_process)
        except RuntimeError as e:  # the master failed: say why in one line, go on with the next N
            why = [ln for ln in str(e).splitlines() if ln.startswith("swarmscope:")][-1:] or [str(e)]
            print(f"workers={n} FAILED: {why[0]}  (load {load0:.1f}→{os.getloadavg()[0]:.1f})", flush=True)
            failed += 1
            continue
        f["load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
        print(
            line(f) + f"  (goal at 1,000: lost=0, close p99 < 1000 ms; load {load0:.1f}→{f['load'][1]:.1f})"
        )
        if args.stall:
            ok = (
                set(f["named"]) == set(f["stalled"])
                and f["stalled_nodes_kept_missing"] == f["stalled_node_windows"]
            )
            more = " …" if len(f["named"]) > 5 else ""
            print(
                f"  stalled={len(f['stalled'])} named_missing={len(f['named'])} "
                f"nodes_kept_missing={f['stalled_nodes_kept_missing']}/{f['stalled_node_windows']} "
                f"{'ok' if ok else 'NOT OK'}: {', '.join(f['named'][:5])}{more}"
            )
        if args.json:
            print(json.dumps({k: v for k, v in f.items() if k not in ("report", "master_log")}))
        sys.stdout.flush()
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
