"""HTTP bench: does swarmscope's orchestration cost throughput? Same nginx, same concurrency.

    .venv/bin/python bench/http_flood.py --users 50 --duration 5 [--out results/bench_http.json]

Against one local target (targets.ingress.local, nginx LB + 2 backends in our netns), one after
the other: swarmscope's Locust path (``swarmscope run``: a worker driver's FloodUsers) vs plain Locust
(``locust --headless`` with a bare FastHttpUser), swarmscope's k6 path (the driver runs k6 with
per-request JSON output) vs plain k6 (``k6 run --vus``), and wrk as the ceiling. Prints req/s
and the ratios swarmscope/plain (goal ≥ 0.95).

Caveats: 2 shared cores — numbers are noisy, compare within one run only; every tool here
runs one process (Locust uses one core). Needs root (netns).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from swarmscope.targets.ingress.local import LocalIngress  # noqa: E402
from swarmscope.workers.k6 import k6_binary  # noqa: E402

PLAIN_LOCUSTFILE = """
from locust import FastHttpUser, constant, task

class Plain(FastHttpUser):
    wait_time = constant(0)

    @task
    def get(self):
        self.client.get("/")
"""

PLAIN_K6 = """
import http from 'k6/http';
export const options = { discardResponseBodies: true };
export default function () { http.get(__ENV.TARGET); }
"""


def swarmscope_flood(url: str, users: int, duration: float, engine: str, tmp: Path) -> float:
    """req/s of one step through ``swarmscope run`` (the pipeline: probe window, worker driver)."""
    out = tmp / f"ss-{engine}"
    cmd = [sys.executable, "-m", "swarmscope.cli", "run", str(ROOT / "scenarios" / "ingress_flood.yaml"),
           "--out", str(out), "--set", f"host={url}", "--set", f"steps={users}",
           "--set", f"step_duration={duration}", "--set", f"engine={engine}"]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    run_dir = max((d for d in out.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
    rep = json.loads((run_dir / "report.json").read_text())
    return float(rep["steps"][0]["rps"])


def plain_locust(url: str, users: int, duration: float, tmp: Path) -> float:
    f = tmp / "plain_locustfile.py"
    f.write_text(PLAIN_LOCUSTFILE)
    cmd = [str(Path(sys.executable).parent / "locust"), "-f", str(f), "--headless", "-u", str(users),
           "-r", str(users), "-t", f"{int(duration)}s", "--host", url.rstrip("/"),
           "--csv", str(tmp / "plain"), "--only-summary", "--stop-timeout", "10"]  # fmt: skip
    subprocess.run(cmd, capture_output=True, cwd=tmp)
    with open(tmp / "plain_stats.csv", encoding="utf-8") as fh:
        rows = {r["Name"]: r for r in csv.DictReader(fh)}
    agg = rows["Aggregated"]
    return float(agg["Request Count"]) / duration


def plain_k6(url: str, users: int, duration: float, tmp: Path) -> float:
    s = tmp / "plain.js"
    s.write_text(PLAIN_K6)
    summ = tmp / "plain-k6-summary.json"
    cmd = [k6_binary(), "run", "--quiet", "--no-usage-report", "--vus", str(users), "--duration",
           f"{int(duration)}s", "-e", f"TARGET={url}", "--summary-export", str(summ), str(s)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    return float(json.loads(summ.read_text())["metrics"]["http_reqs"]["rate"])


def wrk(url: str, users: int, duration: float) -> float:
    out = subprocess.run(["wrk", "-t2", f"-c{users}", f"-d{int(duration)}s", url],
                         check=True, capture_output=True, text=True).stdout  # fmt: skip
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return float(m.group(1)) if m else 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3, help="rounds, interleaved; medians are reported")
    ap.add_argument("--out", default="results/bench_http.json")
    args = ap.parse_args()
    runs: dict[str, list[float]] = {}
    with LocalIngress(lb_workers=2) as t, tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        u, n, s = t.url, args.users, args.duration
        # Interleaved rounds: the machine is shared, so each pair sees similar background load.
        for _ in range(args.repeat):
            for name, fn in (
                ("locust_plain", lambda: plain_locust(u, n, s, tmp)),
                ("locust_swarmscope", lambda: swarmscope_flood(u, n, s, "locust", tmp)),
                ("k6_plain", lambda: plain_k6(u, n, s, tmp)),
                ("k6_swarmscope", lambda: swarmscope_flood(u, n, s, "k6", tmp)),
                ("wrk", lambda: wrk(u, n, s)),
            ):
                runs.setdefault(name, []).append(fn())
    res = {k: statistics.median(v) for k, v in runs.items()}
    res["ratio_locust"] = res["locust_swarmscope"] / res["locust_plain"]
    res["ratio_k6"] = res["k6_swarmscope"] / res["k6_plain"]
    out = {
        "users": args.users,
        "duration_s": args.duration,
        "when": time.time(),
        "req_per_s": res,
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    for k, v in res.items():
        print(f"{k:<20} {v:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
