"""Every write-up figure the code carries equals the write-ups' table in docs/seeds.md, exactly.

The table (section "The write-ups' published figures") is the one place the published values
live; Arion's figures, the exec test's p99 rows, NetObserv's references in the benches, the
sweeps' shapes and the ingress defaults are each read here and compared with it. Derived
figures are recomputed from the table. Bench files are read with ``ast`` (not imported: they
import the probe and start nothing here).
"""

from __future__ import annotations

import ast
import pathlib
import re
from typing import Any

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
NUM = r"\d+(?:\.\d+)?"
ROW = re.compile(rf"^\| `([a-z0-9_.]+)` \|[^|]*\|[^|]*\| ({NUM}(?:, {NUM})*) \|$")


def seed_table() -> dict[str, tuple[float, ...]]:
    text = (ROOT / "docs/seeds.md").read_text()
    start = text.index("## The write-ups' published figures")
    section = text[start : text.index("\n## ", start + 1)]
    table: dict[str, tuple[float, ...]] = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            m = ROW.match(line)
            assert m, f"unparsable row: {line}"
            assert m[1] not in table, f"duplicate id {m[1]}"
            table[m[1]] = tuple(float(v) for v in m[2].split(","))
    return table


TABLE = seed_table()


def one(key: str) -> float:
    (v,) = TABLE[key]
    return v


def bench_constants(path: str) -> dict[str, Any]:
    """The module-level literal assignments of a bench script."""
    out: dict[str, Any] = {}
    for node in ast.parse((ROOT / path).read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def scenario(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "scenarios" / name).read_text()))


def test_table_parses_with_every_family() -> None:
    families = {k.split(".")[0] for k in TABLE}
    assert families == {"exec", "topebpf", "netobserv", "ingress", "arion"}
    assert len(TABLE) == 72


def test_arion_figures_are_the_table_and_the_table_is_all_of_them() -> None:
    from swarmscope.kinds.neighbor_writes.arion import (
        ARION_DERIVED_US,
        ARION_MASTER_US,
        ARION_TOTAL_MS,
        ARION_US,
    )

    carried: dict[str, float] = {}
    for mode, by_n in ARION_US.items():
        carried |= {f"arion.{mode}.us.{n}": v for n, v in by_n.items()}
    for mode, by_n in ARION_TOTAL_MS.items():
        carried |= {f"arion.{mode}.ms.{n}": v for n, v in by_n.items()}
    carried |= {f"arion.master.{k}": v for k, v in ARION_MASTER_US.items()}
    published = {k: one(k) for k in TABLE if k.startswith("arion.")}
    assert carried == published
    # derived, labelled so: watch only per neighbor = 380 ms / 100,000
    assert ARION_DERIVED_US == {"watch_only": {100000: one("arion.watch_only.ms.100000") * 1000 / 100000}}


def test_neighbor_summary_labels_derived_and_compares_like_for_like_only() -> None:
    from swarmscope.kinds.neighbor_writes.summary import summarize

    def pt(mode: str, n: int, us: float, batch: int | None) -> dict[str, Any]:
        return {"mode": mode, "neighbors": n, "per_neighbor_us": us, "total_ms": us * n / 1000,
                "batch_size": batch, "verified": True}  # fmt: skip

    rows = {
        (r["mode"], r["neighbors"], r["batch_size"]): r
        for pts in (
            [pt("write_watch_program", 1000000, 1.0, 5000), pt("watch_only", 100000, 1.0, None)],
            [pt("write_watch_program", 100, 100.0, 1), pt("list_program", 1, 20.0, None)],
        )
        for r in summarize(pts)
    }
    batched = rows[("write_watch_program", 1000000, 5000)]
    assert batched["arion_total_ms"] == 0.9  # as published, never 39 µs × N
    assert "inconsistent" in batched["arion_note"]
    assert (batched["like_for_like"], batched["beats_arion"]) == (False, None)
    assert batched["workload"] == "batched writes, 5000 per commit (ours)"
    assert batched["arion_over_ours"] == 39.0
    watch = rows[("watch_only", 100000, None)]
    assert (watch["arion_per_neighbor_us"], watch["arion_per_neighbor_source"]) == (3.8, "derived")
    assert (watch["arion_total_ms"], watch["beats_arion"]) == (380, True)
    single = rows[("write_watch_program", 100, 1)]
    assert (single["like_for_like"], single["beats_arion"], single["arion_total_ms"]) == (True, True, 15)
    assert single["workload"] == "per-neighbor writes (Arion's)"
    listed = rows[("list_program", 1, None)]
    assert (listed["arion_per_neighbor_source"], listed["beats_arion"]) == ("published", False)
    unverified = pt("write_watch_program", 1000, 1.0, 1) | {"verified": False}
    (row,) = summarize([unverified])
    assert (row["like_for_like"], row["verified"], row["beats_arion"]) == (True, False, None)


def test_exec_storm_figures() -> None:
    from swarmscope.kinds.exec_storm import WRITEUP_ITERATIONS, WRITEUP_NODES, WRITEUP_P99

    assert WRITEUP_NODES == TABLE["exec.nodes"]
    assert WRITEUP_ITERATIONS == one("exec.iterations")
    assert sorted(WRITEUP_P99) == [2, 17]
    for n, row in WRITEUP_P99.items():
        assert row["generated_p99"] == one(f"exec.p99.{n}.generated")
        assert row["reported_p99"] == one(f"exec.p99.{n}.reported")
        assert row["difference"] == one(f"exec.p99.{n}.difference")
        assert row["loss_vs_reported_pct"] == one(f"exec.p99.{n}.loss_pct")
        # the write-up's own arithmetic holds on its own figures
        assert round(row["generated_p99"] - row["reported_p99"], 2) == row["difference"]
        assert round(row["difference"] / row["reported_p99"] * 100, 1) == row["loss_vs_reported_pct"]
    sweep = scenario("exec_storm_sweep.yaml")
    assert tuple(sweep["nodes"]) == TABLE["exec.nodes"]
    assert sweep["iterations"] == one("exec.iterations")
    assert sweep["burst_s"] == one("exec.burst_s")
    assert sweep["concurrency"] == one("exec.cpus_per_node")


def test_netobserv_figures() -> None:
    from swarmscope.kinds.flow_storm.plots import RATIO_LINE
    from swarmscope.kinds.flow_storm.results import WRITE_UP_CPU

    fs = bench_constants("bench/flow_storm.py")
    assert fs["REF_MEM_MB"] == {n: one(f"netobserv.mem_mb.{n}") for n in (100000, 50000)}
    assert fs["RATIO_LINE"] == RATIO_LINE == one("netobserv.ratio_line")
    assert [(a, b, pct) for _, a, b, pct in WRITE_UP_CPU] == [
        ((2000, one("netobserv.cache_timeout_s")), (10000, one("netobserv.cache_timeout_s")),
         one("netobserv.cpu_pct.2k_vs_10k")),
        (None, (10000, one("netobserv.cache_timeout_s")), one("netobserv.cpu_pct.runaway_vs_10k")),
        (None, (2000, 1.0), one("netobserv.cpu_pct.runaway_vs_2k_1s")),
    ]  # fmt: skip
    seq = scenario("flow_storm_writeup.yaml")
    assert seq["cache_max_flows"][:4] == list(TABLE["netobserv.cache_max_flows"])
    assert seq["cache_timeout_s"][:4] == [one("netobserv.cache_timeout_s")] * 4
    assert (seq["cache_max_flows"][4:], seq["cache_timeout_s"][4:]) == ([2000, 500], [1, 1])  # 500: ours
    fp = bench_constants("bench/probe_footprint.py")
    assert fp["NETOBSERV"] == {
        "nodes": one("netobserv.nodes"),
        "cpu_cores": one("netobserv.cpu_cores"),
        "mem_mb": one("netobserv.mem_mb"),
        "mem_mb_100k": one("netobserv.mem_mb.100000"),
        "mem_mb_50k": one("netobserv.mem_mb.50000"),
    }
    # the sweep's sizes are the write-up's, then 500 (ours: the runaway)
    sizes = scenario("flow_storm.yaml")["cache_max_flows"]
    assert tuple(sizes[:4]) == TABLE["netobserv.cache_max_flows"] and sizes[4:] == [500]


def test_top_ebpf_and_ingress_figures() -> None:
    from swarmscope.kinds.ingress_flood.config import INGRESS_FIELDS

    assert scenario("ebpf_cost.yaml")["duration_s"] == one("topebpf.window_s")
    (lb,) = [f for f in INGRESS_FIELDS if f.key == "lb_workers"]
    assert lb.default == one("ingress.lb_workers")
    boom = scenario("ingress_boom.yaml")
    assert boom["lb_workers"] == one("ingress.lb_workers")
    assert tuple(sorted(set(boom["steps"]))) == TABLE["ingress.boom_c"]
    assert boom["requests"] == [one("ingress.boom_n_plot")]


@pytest.mark.parametrize("bad", ["| `x.y` | w | said | 1 2 |", "| `x.y` | w | said | twelve |"])
def test_a_malformed_row_is_refused(bad: str) -> None:
    assert ROW.match(bad) is None


def test_exec_storm_says_the_stream_tracer_is_a_model(tmp_path: pathlib.Path) -> None:
    from swarmscope.kinds import get_kind

    kind = get_kind("exec_storm")
    for tracer, model in (("stream", True), ("bpftrace", False)):
        cfg = kind.schema.load(env={}, sets=[f"tracer={tracer}", "tracer_stream_collector_rate=700"])
        sec = kind.sections(cfg, [], str(tmp_path))["exec_storm"]
        assert [r["nodes"] for r in sec["write_up_p99"]] == [2, 17]
        assert ("tracer_model" in sec) is model
        text = kind.console_summary({"sections": {"exec_storm": sec}})
        assert "17 nodes: generated 65,014.75, reported 47,986.23, difference 17,028.52" in text
        assert ("not Inspektor Gadget" in text) is model
    assert sec["write_up_p99"][0]["loss_vs_reported_pct"] == one("exec.p99.2.loss_pct")


def test_top_ebpf_table_says_what_is_ours_and_what_is_left_out() -> None:
    from swarmscope.kinds.ebpf_cost.table import CAVEAT

    assert "seccomp is ours" in CAVEAT and "Falco and Cilium" in CAVEAT and "tail calls" in CAVEAT


def test_flow_storm_cpu_comparisons_as_the_write_up_computed_them() -> None:
    from swarmscope.kinds.flow_storm.results import cpu_comparisons

    def pt(cache: int, timeout: float, cpu: float) -> dict[str, Any]:
        return {"cache_max_flows": cache, "cache_timeout_s": timeout, "agent_cpu_pct": cpu}

    pts = [pt(10000, 5.0, 20.0), pt(10000, 5.0, 30.0), pt(2000, 5.0, 35.0), pt(2000, 1.0, 50.0),
           pt(500, 1.0, 125.0), pt(2000, 1.0, None)]  # fmt: skip
    got = {c["comparison"]: (c["ours_pct"], c["write_up_pct"], c["runaway"]) for c in cpu_comparisons(pts)}
    assert got == {
        "2K vs 10K at 5 s": (40.0, 40, (500, 1.0)),  # 35 / mean(20, 30) - 1
        "runaway vs 10K at 5 s": (400.0, 457, (500, 1.0)),  # 125 / 25 - 1
        "runaway vs 2K at 1 s": (150.0, 143, (500, 1.0)),
    }
    # without the write-up's points (every size at 1 s), no comparison is made up
    assert [c["ours_pct"] for c in cpu_comparisons([pt(10000, 1.0, 9.0), pt(2000, 1.0, 9.0)])] == [None] * 3


def test_flow_storm_timeouts_are_one_or_one_per_size() -> None:
    from swarmscope.core.errors import ConfigError
    from swarmscope.kinds import get_kind

    kind = get_kind("flow_storm")
    sizes = "cache_max_flows=10000,2000,500"
    cfg = kind.schema.load(env={}, sets=["flows=20000", sizes, "cache_timeout_s=5,1,1"])
    assert [p.params for p in kind.points(cfg)] == [
        {"flows": 20000, "cache_max_flows": 10000, "cache_timeout_s": 5.0},
        {"flows": 20000, "cache_max_flows": 2000, "cache_timeout_s": 1.0},
        {"flows": 20000, "cache_max_flows": 500, "cache_timeout_s": 1.0},
    ]
    with pytest.raises(ConfigError, match="one value, or one per cache_max_flows"):
        kind.schema.load(env={}, sets=["cache_max_flows=10000,2000,500", "cache_timeout_s=5,1"])


def test_neighbor_writes_are_per_neighbor_by_default() -> None:
    """Arion's users wrote one neighbor per write: the kind's and the scenario's default, so the
    write + watch + program rows are like for like unless a run asks for batches (ours). The
    probe then has room for one update call per neighbor and one revision write after each."""
    from swarmscope.kinds import load_scenario
    from swarmscope.kinds.neighbor_writes.arion import like_for_like

    kind, cfg = load_scenario(None, ["scenario=neighbor_writes"], env={})
    assert cfg.batch_size == 1 and like_for_like("write_watch_program", cfg.batch_size) is True
    assert kind.programs(cfg, {"pids": [7]}) == {"map_update": {"pids": "7", "max_samples": "2001000"}}
    kind, cfg = load_scenario("scenarios/neighbor_writes.yaml", [], env={})
    assert cfg.batch_size == 1
    kind, cfg = load_scenario("scenarios/neighbor_writes.yaml", ["batch_size=5000"], env={})
    assert like_for_like("write_watch_program", cfg.batch_size) is False
    assert kind.programs(cfg, {"pids": [7]}) == {"map_update": {"pids": "7"}}  # 401 calls at most


def test_neighbor_spans_are_bounded_per_window(monkeypatch: Any) -> None:
    """One write per neighbor is N writes: past MAX_BATCH_SPANS a span covers consecutive
    writes (first send to last commit), the entries and writes adding up to the window's."""
    from swarmscope.kinds.neighbor_writes import driver

    got: list[tuple[str, int, int, dict[str, Any]]] = []
    monkeypatch.setattr(
        driver.spans, "record", lambda _w, name, t0, t1, attrs: got.append((name, t0, t1, attrs))
    )
    monkeypatch.setattr(driver.spans, "wall_ns", lambda t: t)
    n = 2 * driver.MAX_BATCH_SPANS + 1  # 2001 writes of one neighbor: 3 per span, 667 spans
    res = {"starts": [[i + 1, 10 * i] for i in range(n)], "commits": [[i + 1, 10 * i + 5] for i in range(n)]}
    driver._batch_spans("w", "n1", "write_watch_program", res)
    assert len(got) == 667 and got[0][0] == "batch n1 #1-3" and got[-1][0] == "batch n1 #1999-2001"
    assert [a["swarmscope.writes"] for *_, a in got] == [3] * 667
    assert sum(a["swarmscope.entries"] for *_, a in got) == n
    assert (got[0][1], got[0][2], got[-1][2]) == (0, 25, 10 * (n - 1) + 5)
    got.clear()
    driver._batch_spans("w", "n1", "write_watch_program", {"starts": [[5000, 1]], "commits": [[5000, 9]]})
    assert got == [("batch n1 #1", 1, 9, got[0][3])] and got[0][3]["swarmscope.writes"] == 1


def test_flow_storm_table_heads_the_buffers_with_the_write_ups_names() -> None:
    """report.json keeps hashmap_unique / hashmap_total; report.html heads them as the
    write-up's dashboard names them."""
    from swarmscope.kinds.flow_storm.results import render

    point = {"flows": 100, "cache_max_flows": 2000, "hashmap_unique": 5, "hashmap_total": 6}
    page = render("flow_storm", {"points": [point]}, {}).html
    assert "hashmap-unique" in page and "hashmap-total" in page
    assert "hashmap_unique" not in page and "hashmap_total" not in page
