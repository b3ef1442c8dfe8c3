"""report.json keys and values, real PNG plots, the HTML table, section renderers, console."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from _results_data import LOSS_BY_NODES, T0, expected_iteration_json, fire_run, make_run, sweep

from swarmscope.controller.plots import Plot
from swarmscope.controller.report import attach_report_writer, build_report, render_console, write_report
from swarmscope.controller.sections import SectionHTML, register_section
from swarmscope.controller.store import ResultStore, run_dir_for
from swarmscope.core.events import RunEvents

RUN_ID = "run-20261122-1"


@pytest.fixture
def store(tmp_path: Path):
    events = RunEvents()
    with ResultStore(tmp_path / "swarmscope.sqlite") as s:
        s.attach(events)
        fire_run(events, make_run(run_dir=run_dir_for(tmp_path, RUN_ID)))
        yield s


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def test_report_json(store: ResultStore) -> None:
    r = build_report(store, RUN_ID)
    assert r["schema"] == "swarmscope.report/v1"
    assert (r["run_id"], r["scenario"], r["metric"], r["status"]) == (RUN_ID, "exec_storm", "exec", "ok")
    assert r["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert r["started_ns"] == T0 and r["started"] == "2026-09-21T14:13:20.000Z"
    assert r["finished"].endswith("Z") and r["duration_s"] > 0
    assert r["config"]["nodes"] == [2, 5, 11]
    assert [p["nodes"] for p in r["points"]] == [2, 5, 11]
    # What the store fixture fired, regenerated from the same seed.
    fired = {
        pt.index: [w[3] for w in ws] for pt, ws in sweep(make_run(run_dir=run_dir_for(Path("/x"), RUN_ID)))
    }
    for p in r["points"]:
        assert p["iterations"] == [expected_iteration_json(x) for x in fired[p["index"]]]
        assert p["planned_iterations"] == 4 and len(p["iterations"]) == 4
        gens = sorted(it["generated"] for it in p["iterations"])
        assert p["summary"]["generated"]["mean"] == sum(gens) / 4
        assert p["summary"]["generated"]["p50"] == (gens[1] + gens[2]) / 2
        assert p["summary"]["generated"]["min"] == gens[0] and p["summary"]["generated"]["max"] == gens[3]
        assert p["totals"]["kernel"] == sum(it["kernel"] for it in p["iterations"])
        assert len(p["per_node"]) == p["nodes"]
        # the tracer's loss grows with the node count as the fixture made it
        assert p["summary"]["loss_ratio"]["mean"] == pytest.approx(LOSS_BY_NODES[p["nodes"]], abs=0.03)
    it0 = r["points"][0]["iterations"][0]
    assert set(it0) >= {"generated", "kernel", "reported", "loss_ratio", "per_node"}
    assert set(it0["per_node"][0]) >= {"node", "generated", "kernel", "reported", "loss_ratio"}
    p0, p1, p2 = ({f["flag"] for f in p["flags"]} for p in r["points"])
    assert p0 == set() and p1 == {"harness-mismatch"} and p2 == {"missing", "generator-saturated"}
    where = r["points"][1]["flags"][0]["where"]
    assert [(w["iteration"], w["node"], w["kernel"] - w["generated"]) for w in where] == [(2, "node-3", 7)]
    assert {f["flag"]: f["points"] for f in r["flags"]} == {
        "harness-mismatch": [1],
        "missing": [2],
        "generator-saturated": [2],
    }
    assert r["sections"] == {}
    json.dumps(r, allow_nan=False)  # strict JSON: no NaN/inf anywhere


@pytest.mark.slow
def test_written_files(store: ResultStore, tmp_path: Path) -> None:
    run_dir = tmp_path / RUN_ID
    r = write_report(store, RUN_ID, run_dir)
    assert json.loads((run_dir / "report.json").read_text()) == r
    pngs = sorted(p.name for p in run_dir.glob("*.png"))
    assert pngs == sorted(
        ["loss_vs_nodes.png"]
        + [f"point{i}_counts.png" for i in range(3)]
        + [f"point{i}_per_node.png" for i in range(3)]
    )
    for name in pngs:
        w, h = _png_size(run_dir / name)
        assert w >= 500 and h >= 300
        assert (run_dir / name).stat().st_size > 10_000, name  # drawn, not an empty canvas
    page = (run_dir / "report.html").read_text()
    assert page.startswith("<!doctype html>") and page.count("data:image/png;base64,") == len(pngs)
    assert '<table class="summary">' in page and "<th>p99</th>" in page
    summary = page.split('<table class="summary">')[1].split("</table>")[0]
    assert summary.count("<tr>") == 2 + 3  # two header rows, one per point
    assert 'class="flag">harness-mismatch' in page  # flags in red
    assert '<td class="flag">1</td>' in page  # node-3's mismatched iteration, in red
    assert "src=" in page and "http" not in page.split("<body>")[1]  # self-contained
    assert not list(run_dir.glob("*.tmp"))
    # the exec-storm write-up's table: one row per point, its p99 figures from report.json
    p99 = page.split('<table class="p99">')[1].split("</table>")[0]
    assert p99.count("<tr>") == 1 + 3
    c = r["points"][0]["p99_comparison"]
    want = [f"{c['generated_p99']:,.1f}", f"{c['reported_p99']:,.1f}", f"{c['loss_vs_reported'] * 100:.2f}"]
    assert all(f"<td>{v}</td>" in p99 for v in want), (want, p99)


@pytest.mark.slow
def test_no_tracer_no_loss_plot(tmp_path: Path) -> None:
    events = RunEvents()
    with ResultStore(tmp_path / "s.sqlite") as s:
        s.attach(events)
        run = make_run(tracer=False)
        fire_run(events, run, tracer=False, status="interrupted")
        r = write_report(s, run.run_id, tmp_path / "out")
    assert all(p["summary"]["reported"]["n"] == 0 for p in r["points"])
    assert r["points"][0]["iterations"][0]["reported"] is None
    assert r["status"] == "interrupted" and r["flags"][0]["flag"] == "run-interrupted"
    assert not (tmp_path / "out" / "loss_vs_nodes.png").exists()
    assert (tmp_path / "out" / "point0_counts.png").exists()


def render_steps(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
    from matplotlib.figure import Figure

    from swarmscope.controller.plots import figure_png

    fig = Figure(figsize=(4, 3))
    fig.add_subplot().plot([s["users"] for s in data], [s["p99_ms"] for s in data])
    rows = "".join(f"<li>{s['users']} users: p99 {s['p99_ms']} ms</li>" for s in data)
    return SectionHTML(
        f"<ul id='steps'>{rows}</ul>{{plot:steps_p99.png}}", [Plot("steps_p99.png", "p99", figure_png(fig))]
    )


@pytest.mark.slow
def test_sections(store: ResultStore, tmp_path: Path) -> None:
    steps = [{"users": 100, "p99_ms": 3.5}, {"users": 1000, "p99_ms": 41.0}]
    register_section("steps")(render_steps)  # the code's registry, as a kind registers its own
    store.add_section(RUN_ID, "steps", steps)
    # a name no kind registers a renderer for (kinds register theirs process-wide)
    store.add_section(RUN_ID, "nested", {"points": [{"n": 1000, "p50_us": 12}], "map": "xdp_neigh"})
    store.add_section(RUN_ID, "plain", {"entries": 1000000, "map_bytes": 85_000_000})
    r = write_report(store, RUN_ID, tmp_path / "out")
    assert r["steps"] == steps and r["sections"]["steps"] == steps  # merged at the top level
    assert r["nested"]["points"][0]["n"] == 1000 and r["points"][0]["index"] == 0
    page = (tmp_path / "out" / "report.html").read_text()
    # the registered renderer drew it and its plot was inlined where it asked
    assert "<ul id='steps'><li>100 users: p99 3.5 ms</li>" in page and "{plot:" not in page
    assert (tmp_path / "out" / "steps_p99.png").stat().st_size > 1000
    assert '<td class="l">map_bytes</td><td>85000000</td>' in page
    assert "&quot;xdp_neigh&quot;" in page  # nested dict falls back to escaped JSON


@pytest.mark.slow
def test_registered_renderer_wins_and_failures_fall_back(store: ResultStore, tmp_path: Path) -> None:
    store.add_section(RUN_ID, "custom", {"a": 1})
    store.add_section(RUN_ID, "broken", {"b": 2})

    @register_section("custom")
    def _custom(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
        return SectionHTML(f"<p id='custom'>{data['a']} for {report['run_id']}</p>")

    @register_section("broken")
    def _broken(name: str, data: Any, report: dict[str, Any]) -> SectionHTML:
        raise RuntimeError("boom")

    write_report(store, RUN_ID, tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text()
    assert f"<p id='custom'>1 for {RUN_ID}</p>" in page
    assert '<td class="l">b</td><td>2</td>' in page


def test_console_table(store: ResultStore) -> None:
    r = build_report(store, RUN_ID)
    text = render_console(r)
    lines = text.splitlines()
    assert lines[0] == f"swarmscope run {RUN_ID}  scenario=exec_storm  metric=exec  status=ok"
    assert sum(1 for ln in lines if ln.startswith("point ")) == 3
    n3 = next(ln for ln in lines if ln.split()[:1] == ["node-3"] and "MISMATCH" in ln)
    pn = next(n for n in r["points"][1]["per_node"] if n["node"] == "node-3")
    assert f"{pn['generated']:,}" in n3 and f"{pn['kernel']:,}" in n3 and "MISMATCH x1" in n3
    assert "missing x1" in text and "! harness-mismatch:" in text
    total = next(ln for ln in lines if ln.strip().startswith("total"))
    assert f"{r['points'][0]['totals']['kernel']:,}" in total


@pytest.mark.slow
def test_report_writer_listener(tmp_path: Path) -> None:
    events = RunEvents()
    printed: list[str] = []
    run_dir = run_dir_for(tmp_path, RUN_ID)
    with ResultStore(tmp_path / "swarmscope.sqlite") as s:
        s.attach(events)
        attach_report_writer(events, s, echo=printed.append)
        fire_run(events, make_run(run_dir=run_dir))
    r = json.loads((Path(run_dir) / "report.json").read_text())
    assert r["status"] == "ok" and r["finished"]  # the store saw run_finished first
    assert printed and printed[0].startswith(f"swarmscope run {RUN_ID}")


def test_per_node_plot_many_nodes() -> None:
    from swarmscope.controller.plots import per_node_plot

    nodes = [{"node": f"node-{i}", "generated": 100, "kernel": 100, "reported": None} for i in range(40)]
    plot = per_node_plot({"index": 3, "params": {"nodes": 40}, "per_node": nodes}, "exec")
    assert plot is not None and plot.filename == "point3_per_node.png"
    assert plot.png[:8] == b"\x89PNG\r\n\x1a\n" and len(plot.png) > 10_000
    assert per_node_plot({"index": 0, "params": {}, "per_node": nodes[:1]}, "exec") is None


def test_matplotlib_is_loaded_by_the_first_figure_not_by_the_report() -> None:
    """One window on one node draws no figure, so the report never imports matplotlib (~0.5 s
    of every short run); two windows draw the counts plot and load it."""
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from swarmscope.controller.plots import core_plots\n"
        "its = [{'generated': 7, 'kernel': 7}] * int(sys.argv[1])\n"
        "point = {'index': 0, 'params': {}, 'iterations': its, 'per_node': [{'node': 'n1', 'kernel': 7}]}\n"
        "plots = core_plots({'metric': 'exec', 'points': [point]})\n"
        "print(json.dumps([sorted(plots), 'matplotlib' in sys.modules]))\n"
    )
    for windows, want in ((1, [[], False]), (2, [["point0_counts.png"], True])):
        r = subprocess.run(
            [sys.executable, "-c", code, str(windows)], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == want
