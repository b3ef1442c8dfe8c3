"""The ingress write-up's grid through Traefik on real nodes: backend replicas x concurrency steps.

    sudo .venv/bin/python bench/cluster_ingress.py                          # replicas 1,2,4; -c 100..1000
    sudo .venv/bin/python bench/cluster_ingress.py --steps 50,100 --requests 2000 --replicas 1,2

Starts a control plane and 3 real nodes (tests/realcluster.py), installs the chart once with
target.controller=traefik (tests/realtraefik.py: Traefik and the one worker on node 0, the backends
where the scheduler puts them), then per replica count a `helm upgrade` that changes only
target.backends and one headless run of every step (boom's -c users, -n requests each), checked
exact: requests asked == answered, no failure, Traefik's access log grew by exactly the run's
requests, every backend pod named in it. Last, kill-pod on Traefik's pod (30 s grace). Prints
per replica count and step: req/s, p50/p75/p99, failures, Traefik's %CPU and RSS (median of its
per-second rows; the largest %CPU second too) and the requests each backend served, beside the
write-up's figures read from docs/seeds.md's table; the time each replica count cost; the
downtime beside the write-up's ~30 s.

Caveats: the three nodes, the worker and Traefik share this machine's 2 cores, so req/s is this
machine's ceiling, not Traefik's; one Locust worker holds the write-up's boom -c as users.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

P75_MS = 100  # docs/seeds.md: "75 % of requests under 0.1 s up to 1000 concurrent connections"


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replicas", type=ints, default=[1, 2, 4], help="backend replica counts, in order")
    ap.add_argument("--steps", type=ints, default=[100, 250, 500, 1000], help="users per step (boom's -c)")
    ap.add_argument("--requests", type=ints, default=[4000], help="-n per step (one for all, or one a step)")
    ap.add_argument("--no-kill", action="store_true", help="skip kill-pod on Traefik's pod")
    a = ap.parse_args()
    from cluster import Cluster, find_tools
    from imagebuild import find_swarmscope_image
    from realcluster import RealCluster
    from realnode import find_node_tools
    from realrelease import IMAGE_REPO, Release
    from realtraefik import TRAEFIK_REPO, find_traefik_image, kill_run, steps_run, traefik_pod, traefik_values
    from test_seed_figures import TABLE

    counts = a.requests * len(a.steps) if len(a.requests) == 1 else a.requests
    runs: dict[int, dict[str, Any] | str] = {}
    kill: dict[str, Any] | str = "not run"
    with tempfile.TemporaryDirectory(prefix="cluster-ingress-") as d:
        t = time.monotonic()
        with (
            Cluster.start(find_tools(), Path(d), nodes=0, endpoint_reconciler="none") as c,
            RealCluster.start(c, find_node_tools(), 3) as rc,
        ):
            print(f"control plane and 3 nodes up in {time.monotonic() - t:.1f} s", flush=True)
            t = time.monotonic()
            rc.import_image(find_swarmscope_image(), IMAGE_REPO)
            rc.import_image(find_traefik_image(), TRAEFIK_REPO)
            print(f"images in every node in {time.monotonic() - t:.1f} s", flush=True)
            values, n_pods = traefik_values(rc, a.steps, counts, a.replicas[0])
            rel = Release(rc, "bench-ingress", "bi")
            with rel.installed(values, n_pods) as pods:
                traefik = traefik_pod(pods)
                for r in a.replicas:
                    # The cheapest change that keeps the runs apart: only the backends'
                    # Deployment scales; Traefik, its log and the worker stay.
                    values["target"]["backends"] = r
                    try:
                        runs[r] = steps_run(rel, values, traefik, n_pods - a.replicas[0] + r)
                    except AssertionError as e:
                        runs[r] = f"not exact: {str(e)[:300]}"
                    print(f"backends {r}: {runs[r] if isinstance(runs[r], str) else 'exact'}", flush=True)
                if not a.no_kill:
                    try:
                        kill = kill_run(rel, values, traefik, n_pods - a.replicas[0] + a.replicas[-1])
                    except AssertionError as e:
                        kill = f"not as expected: {str(e)[:300]}"
            print(f"\nper node (start-up, memory of containerd + kubelet + kube-proxy):\n{rc.budget_table()}")
    print(grid_table(runs, TABLE))
    print(kill_line(kill, TABLE["ingress.kill_lb_s"][0]), flush=True)
    exact = all(isinstance(v, dict) for v in runs.values())
    return 0 if exact and (a.no_kill or isinstance(kill, dict)) else 1


def grid_table(runs: dict[int, dict[str, Any] | str], table: dict[str, tuple[float, ...]]) -> str:
    head = (f"{'backends':>8} {'users':>5} {'-n':>5} {'req/s':>6} {'p50 ms':>7} {'p75 ms':>7} {'p99 ms':>7} "
            f"{'fail':>4} {'%CPU med':>8} {'%CPU max':>8} {'RSS MiB':>7}  per backend")  # fmt: skip
    out = ["\ningress grid through Traefik (every step exact: requests == -n == Traefik's log lines):", head]
    for r, rep in runs.items():
        if isinstance(rep, str):
            out.append(f"{r:>8} {rep}")
            continue
        for s in rep["steps"]:
            lat, rows = s["latency_ms"], s["proxy_per_second"]
            cpu, rss = [x["%CPU"] for x in rows], statistics.median(x["RSS"] for x in rows) / 1024
            out.append(f"{r:>8} {s['users']:>5} {s['request_count']:>5} {s['rps']:>6.0f} "
                       f"{lat['p50']:>7.1f} {lat['p75']:>7.1f} {lat['p99']:>7.1f} {s['failures']:>4} "
                       f"{statistics.median(cpu):>8.1f} {max(cpu):>8.1f} {rss:>7.1f}")  # fmt: skip
        out[-1] += "  " + " ".join(str(n) for n in sorted(rep["served_by"].values()))
        took = f"helm upgrade + run + report in {rep['run_s']:.1f} s"
        out.append(f"{'':>8} ({len(rep['steps'])} steps: {took})")
    (n,) = table["ingress.boom_n_plot"]
    c = ", ".join(f"{x:.0f}" for x in table["ingress.boom_c"])
    out.append(f"write-up (nginx ingress, 2 workers, replicas 1/2/4 alike): -c {c}; -n {n:.0f} (its plot); "
               f"p75 < {P75_MS} ms up to -c 1000; %CPU peak {table['ingress.cpu_pct_peak'][0]:.0f} "
               f"(a worker's pidstat second)")  # fmt: skip
    return "\n".join(out)


def kill_line(f: dict[str, Any] | str, seed_s: float) -> str:
    if isinstance(f, str):
        return f"kill-pod on Traefik's pod: {f}"
    return (f"kill-pod on Traefik's pod (grace {f['detail']['grace_period_s']} s): downtime "
            f"{f['downtime_s']:.1f} s ({f['failed_requests']} failed requests; last success "
            f"{f['last_s']:.1f} s, first {f['first_s']:.1f} s after the fault); "
            f"write-up: ~{seed_s:.0f} s")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
