"""report.html as a person reads it (issue: "report.html for every kind"): round time ticks on
the waterfall, the set-up named in the trace, no single-dot line plots, no heading over an empty
section and no heading twice. Unit tests; the pages of real runs are checked in Chromium by
tests/test_report_waterfall.py."""

from __future__ import annotations

import json
import pathlib

from _results_data import fire_run, make_run

from swarmscope.controller.otel import RunSpans
from swarmscope.controller.plots import counts_plot
from swarmscope.controller.report import render_html
from swarmscope.controller.sections import SectionHTML
from swarmscope.controller.waterfall import _ticks
from swarmscope.core.events import RunEvents


def test_waterfall_ticks_are_round_and_in_one_unit() -> None:
    assert [label for _, label in _ticks(4_501_872_000)] == ["0 s", "1 s", "2 s", "3 s", "4 s"]
    assert [t for t, _ in _ticks(900_000_000)] == [0, 200_000_000, 400_000_000, 600_000_000, 800_000_000]
    assert [label for _, label in _ticks(61_000_000_000)][-1] == "60 s"
    assert [label for _, label in _ticks(123_000)] == [
        "0 µs",
        "20 µs",
        "40 µs",
        "60 µs",
        "80 µs",
        "100 µs",
        "120 µs",
    ]


def test_one_window_draws_no_line_plot_two_do() -> None:
    it = {"generated": 5, "kernel": 5, "reported": None}
    assert counts_plot({"index": 0, "params": {}, "iterations": [it]}, "exec") is None
    plot = counts_plot({"index": 0, "params": {}, "iterations": [it, it]}, "exec")
    assert plot is not None and plot.filename == "point0_counts.png"


def test_sections_have_one_heading_and_empty_ones_none() -> None:
    report = {"run_id": "r", "scenario": "s", "metric": "m", "status": "ok", "started": "", "finished": "",
              "flags": [], "points": [], "config": {}}  # fmt: skip
    sections = [
        ("faults", SectionHTML("")),
        ("ingress", SectionHTML("<h2>Ingress flood</h2><p>target</p>")),
        ("custom", SectionHTML("<p>rows</p>")),
    ]
    page = render_html(report, {}, sections)
    assert "<h2>faults</h2>" not in page and "<h2>ingress</h2>" not in page
    assert page.count("<h2>Ingress flood</h2>") == 1 and page.count("<h2>custom</h2>") == 1


def test_the_trace_names_the_set_up_once(tmp_path: pathlib.Path) -> None:
    events = RunEvents()
    spans = RunSpans.attach(events)
    run = make_run()
    fire_run(events, run, tracer=False)  # three points
    spans.write_json(str(tmp_path / "trace.json"))
    doc = json.loads((tmp_path / "trace.json").read_text())
    names = [s["name"] for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert names.count("set up") == 1 and names.count("run exec_storm") == 1
