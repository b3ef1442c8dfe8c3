"""The exec-scaling write-up's node sweep on real nodes here: 1, 2, 3 nodes from one helm install.

    sudo .venv/bin/python bench/cluster_sweep.py                        # 3 nodes x 30 iterations
    sudo .venv/bin/python bench/cluster_sweep.py --iterations 5 --burst 1.0
    sudo .venv/bin/python bench/cluster_sweep.py --set tracer=ig-cluster   # IG in the cluster reports

Starts a control plane and N real nodes (tests/realcluster.py), installs the chart once with a
worker and a probe per node and the controller in sweep mode (tests/realsweep.py), and prints,
per node count, the p99 over iterations of generated, kernel and reported, and loss_vs_reported,
with the write-up's published rows (Inspektor Gadget on AKS, 2 and 17 nodes) under it, then the
nodes' start-up time and memory. `--set` adds the exec storm's chart values (scenario.exec_storm.
<key>): the tracer under test and its options; without one, reported is "-". With
`tracer=ig-cluster`, Inspektor Gadget's DaemonSet is deployed first (tests/igcluster.py) and the
controller's kubectl-gadget streams every node's execs: REPORTED is what IG reported.

Caveats: the nodes share this machine's 2 cores, so more nodes split the same CPUs (the
write-up's nodes were machines of their own): generated per node falls as nodes are added.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=3, help="real nodes; the sweep is 1..N")
    ap.add_argument("--iterations", type=int, default=30, help="windows per node count (the write-up: 30)")
    ap.add_argument("--burst", type=float, default=1.0, help="burst_s of each window")
    ap.add_argument("--report", type=Path, help="write the sweep's report.json here too")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="scenario.exec_storm value"
    )
    a = ap.parse_args()
    from cluster import Cluster, find_tools
    from igcluster import deploy_ig
    from realcluster import RealCluster
    from realnode import find_node_tools
    from realsweep import node_table, run_sweep, sweep_table

    tracer = {"tracer": "none"}
    for kv in a.set:
        k, _, v = kv.partition("=")
        tracer[k] = yaml.safe_load(v)
    with tempfile.TemporaryDirectory(prefix="cluster-sweep-") as d:
        t = time.monotonic()
        with (
            Cluster.start(find_tools(), Path(d), nodes=0, endpoint_reconciler="none") as c,
            RealCluster.start(c, find_node_tools(), a.nodes) as rc,
        ):
            print(f"control plane and {a.nodes} nodes up in {time.monotonic() - t:.1f} s", flush=True)
            with contextlib.ExitStack() as stack:
                sets = []
                if tracer["tracer"] == "ig-cluster":
                    ig = stack.enter_context(deploy_ig(rc))
                    sets.append(f"inspektorGadget.image={ig.image}")
                rep, _ = run_sweep(rc, "bench-sweep", "bs", list(range(1, a.nodes + 1)), a.iterations,
                                   a.burst, tracer, 3600.0, sets)  # fmt: skip
            print(f"\nexec storm node sweep, burst {a.burst} s, tracer {tracer['tracer']}, "
                  f"exit code {rep['exit_code']}, trace {rep.get('trace_id')}:")  # fmt: skip
            if a.report:
                a.report.write_text(json.dumps(rep, indent=1))
            print(sweep_table(rep))
            print(f"\nper node count and node, summed over the iterations:\n{node_table(rep)}")
            print("\nper node (start-up, memory of containerd + kubelet + kube-proxy):")
            print(rc.budget_table(), flush=True)
    return 0 if rep["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
