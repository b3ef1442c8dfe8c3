"""The exec storm's node-count sweep over 1, 2, 3 real nodes from one `helm install`.

    .venv/bin/python -m pytest tests/test_realcluster_sweep.py -v -s   # -s: pods, rows, p99 table

On the session's three real nodes (the `real_cluster` fixture): the chart with one worker and
one probe per node and its controller in sweep mode (tests/realsweep.py). Checked: one run, exit
code 0, points 1, 2, 3 in that order, each with every iteration; point k's windows on exactly k
distinct nodes, the same ones in every window, each point's nodes within the next one's and the
last on all three; every row generated == kernel > 0, named by the worker pod on its node;
reported null (the chart's tracer, `none`: TRACER is the seam for an in-cluster tracer's column).
"""

from __future__ import annotations

from typing import Any

import pytest
from realcluster import RealCluster
from realsweep import component, node_table, run_sweep, sweep_table

pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(3600)]

NODES = [1, 2, 3]
ITERATIONS = 3  # the write-up ran 30: bench/cluster_sweep.py
# The exec storm's tracer under test, as chart values (scenario.exec_storm.*). With an in-cluster
# tracer's name and options here, its exact rule replaces the `reported is None` checks below.
TRACER: dict[str, Any] = {"tracer": "none"}


def test_node_sweep_from_one_install(real_cluster: RealCluster) -> None:
    ns = "rc-sweep"
    names = sorted(n.name for n in real_cluster.nodes)
    rep, pods = run_sweep(real_cluster, ns, "rs", NODES, ITERATIONS, tracer=TRACER)
    worker = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in pods if component(p) == "workers"}
    assert sorted(worker) == sorted(p["spec"]["nodeName"] for p in pods if component(p) == "probes") == names
    for p in rep["points"]:
        for it in p["iterations"]:
            for r in sorted(it["per_node"], key=lambda r: r["node"]):
                where = f"{p['params']['nodes']} node(s), window {it['iteration']}: {r['node']} {r['pod']}"
                print(f"  {where} generated {r['generated']} kernel {r['kernel']} reported {r['reported']}")
    print(sweep_table(rep), node_table(rep), sep="\n", flush=True)

    assert (rep["exit_code"], rep["status"], rep["flags"]) == (0, "ok", [])
    assert [p["params"]["nodes"] for p in rep["points"]] == NODES
    before: set[str] = set()
    for p in rep["points"]:
        its = p["iterations"]
        assert [it["iteration"] for it in its] == list(range(1, ITERATIONS + 1))
        used = {r["node"] for r in its[0]["per_node"]}
        assert len(used) == p["params"]["nodes"] and before <= used <= set(names), (before, used)
        for it in its:
            assert sorted(r["node"] for r in it["per_node"]) == sorted(used)
            for r in it["per_node"]:
                assert r["generated"] == r["kernel"] > 0, r
                assert r["pod"] == f"{ns}/{worker[r['node']]}/worker", r
                assert r["reported"] is None, r
            assert it["generated"] == it["kernel"] == sum(r["kernel"] for r in it["per_node"])
        assert p["p99_comparison"]["generated_p99"] == p["summary"]["kernel"]["p99"]
        assert p["p99_comparison"]["reported_p99"] is None
        before = used
    assert before == set(names)
