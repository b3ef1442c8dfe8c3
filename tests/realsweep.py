"""The exec storm's node-count sweep from one `helm install` on real nodes (tests/realcluster.py).

    rep, pods = run_sweep(rc, "rc-sweep", "rs", nodes=[1, 2, 3], iterations=3)
    print(sweep_table(rep))   # per node count: generated / kernel / reported p99, the write-up's rows
    print(node_table(rep))    # per node count and node: the sums, IG's loss records by node

The chart runs with one worker and one probe per node (workers.mode=daemonset) and its
controller in sweep mode (controller.sweep, controller.sweepWorkers = the node count): one run,
one report, one trace; point k's windows run on k of the nodes (the sweep's order: the first k
workers), the other workers wait. `tracer` is the exec storm's tracer under test as chart values
(`{"tracer": "none"}`: reported is null; an in-cluster tracer's name and options fill it).
tests/test_realcluster_sweep.py checks it; bench/cluster_sweep.py runs the write-up's 30
iterations and prints the table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from imagebuild import find_swarmscope_image
from realcluster import RealCluster, all_ready, pods_in, pods_wide, table
from realnode import wait_for

from swarmscope.kinds.exec_storm import WRITEUP_P99

ROOT = Path(__file__).resolve().parent.parent
IMAGE_REPO = "ghcr.io/swarmscope/swarmscope"
JAEGER_REPO = "docker.io/jaegertracing/jaeger"
RUNNING_TIMEOUT = 300.0


def run_sweep(
    rc: RealCluster,
    ns: str,
    release: str,
    nodes: list[int],
    iterations: int,
    burst_s: float = 0.3,
    tracer: Mapping[str, Any] | None = None,
    timeout_s: float = 600.0,
    sets: Sequence[str] = (),
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Install the chart once (`sets`: more `--set KEY=VALUE`), wait for the sweep's end (the
    run-once claim's exit code), return its report.json (with "exit_code" added) and the
    release's pods; uninstalls in every case."""
    c, api, n = rc.cluster, rc.cluster.api, len(rc.nodes)
    t = time.monotonic()
    rc.import_image(find_swarmscope_image(), IMAGE_REPO)
    rc.import_image(rc.nodes[0].tools.jaeger_tar, JAEGER_REPO)
    print(f"images in every node after {time.monotonic() - t:.1f} s", flush=True)
    exec_storm = {
        "nodes": nodes,
        "iterations": iterations,
        "burst_s": burst_s,
        **(tracer or {"tracer": "none"}),
    }
    t = time.monotonic()
    c.helm(
        "install", release, str(ROOT / "charts" / "swarmscope"), "-n", ns, "--create-namespace",
        "--set", "workers.mode=daemonset", "--set", "controller.sweep=true",
        "--set", f"controller.sweepWorkers={n}", "--set", f"scenario.config.expect_probes={n}",
        "--set-json", f"scenario.exec_storm={json.dumps(exec_storm)}",
        *(x for kv in sets for x in ("--set", kv)),
    )  # fmt: skip
    try:
        pods = wait_for(
            f"{2 * n + 2} pods Running and ready", lambda: all_ready(api, ns, 2 * n + 2), RUNNING_TIMEOUT
        )
        print(f"helm install -> all Running in {time.monotonic() - t:.1f} s", flush=True)
        print(pods_wide(pods), flush=True)
        (ctrl,) = [p for p in pods if component(p) == "controller"]
        (home,) = [x for x in rc.nodes if x.name == ctrl["spec"]["nodeName"]]
        results = home.dir / "kubelet" / "pods" / ctrl["metadata"]["uid"] / "volumes"
        results = results / "kubernetes.io~empty-dir" / "results"
        claim = results / f".run-once-{release}-r1.json"

        def ended() -> dict[str, Any] | None:
            rec = json.loads(claim.read_text()) if claim.is_file() else {}
            if "exit_code" in rec:
                return rec
            (st,) = api.get(f"/api/v1/namespaces/{ns}/pods/{ctrl['metadata']['name']}")["status"][
                "containerStatuses"
            ]
            if st["restartCount"]:  # a restarted run-once controller idles: the sweep will not end
                raise AssertionError(f"the controller restarted during the sweep: {st.get('lastState')}")
            return None

        rec = wait_for("the sweep's end (exit code in its run-once claim)", ended, timeout_s, every=2.0)
        (path,) = sorted(results.glob("*/report.json"))
        rep: dict[str, Any] = json.loads(path.read_text())
        rep["exit_code"] = rec["exit_code"]
        print(f"sweep done {time.monotonic() - t:.1f} s after helm install: exit code {rec['exit_code']}, "
              f"status {rep['status']}, flags {rep['flags']}", flush=True)  # fmt: skip
        return rep, pods
    finally:
        c.helm("uninstall", release, "-n", ns, "--wait", "--timeout", "120s")
        api.request("DELETE", f"/api/v1/namespaces/{ns}")
        wait_for(f"the pods of {ns} gone", lambda: not pods_in(api, ns), 120.0)


def sweep_table(rep: dict[str, Any]) -> str:
    """The write-up's p99 table (30 iterations there): per node count the p99 over iterations of
    generated, kernel and reported (each summed over the nodes), generated - reported and that
    relative to reported (loss_vs_reported); the write-up's published rows under it."""

    def f(v: float | None, fmt: str = ",.2f") -> str:
        return "-" if v is None else format(v, fmt)

    head = ("NODES", "ITERATIONS", "GENERATED P99", "KERNEL P99", "REPORTED P99", "DIFFERENCE")
    rows = [(*head, "LOSS VS REPORTED")]
    for p in rep["points"]:
        c, s = p["p99_comparison"], p["summary"]
        loss = "-" if c["loss_vs_reported"] is None else f"{100 * c['loss_vs_reported']:.1f} %"
        rows.append((str(p["params"]["nodes"]), str(len(p["iterations"])), f(c["generated_p99"]),
                     f(s["kernel"]["p99"]), f(c["reported_p99"]), f(c["difference"]), loss))  # fmt: skip
    for nodes, w in WRITEUP_P99.items():
        rows.append((f"{nodes} (write-up)", "30", f(w["generated_p99"]), "-", f(w["reported_p99"]),
                     f(w["difference"]), f"{w['loss_vs_reported_pct']:g} %"))  # fmt: skip
    return table(rows)


def node_table(rep: dict[str, Any]) -> str:
    """Per node count and node, summed over the iterations: generated, kernel, reported and what
    the tracer's loss records named that node for (reported_lost; "-" when they name none)."""

    def total(rows: list[dict[str, Any]], key: str) -> str:
        vals = [r[key] for r in rows]
        return "-" if any(v is None for v in vals) else f"{sum(vals):,}"

    rows = [("NODES", "NODE", "POD", "GENERATED", "KERNEL", "REPORTED", "REPORTED LOST")]
    for p in rep["points"]:
        by: dict[str, list[dict[str, Any]]] = {}
        for it in p["iterations"]:
            for r in it["per_node"]:
                by.setdefault(r["node"], []).append(r)
        for node, rs in sorted(by.items()):
            pod = rs[0]["pod"].split("/")[1] if rs[0]["pod"] else "-"
            rows.append((str(p["params"]["nodes"]), node, pod, *(total(rs, k) for k in
                         ("generated", "kernel", "reported", "reported_lost"))))  # fmt: skip
    return table(rows)


def component(p: dict[str, Any]) -> str:
    return str(p["metadata"]["labels"]["app.kubernetes.io/component"])
