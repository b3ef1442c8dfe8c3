"""The SWARMSCOPE tab during a free-running swarm (issue 28): readings so far, live.

A real exec storm under Locust's web UI (real BPF, the probe in its own process, the fleet in
the Locust controller's child process): started as the UI's button does, the window stays open
while the controller reads every probe so far each ``--ss-live-interval-s``. The series must
grow, never pass the closed window's exact kernel count, and leave that close exact (generated
== kernel on every node). Chromium screenshots of the tab and of the /swarmscope/ page
mid-swarm are kept (copied to $SWARMSCOPE_SCREENSHOTS when set) to be looked at.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from itertools import pairwise
from typing import Any

import pytest
from test_webui import Locust, chromium, get, shot, table_rows

pytestmark = [pytest.mark.root, pytest.mark.bpf]


@pytest.mark.slow
def test_free_running_swarm_reads_so_far_and_the_close_stays_exact(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    with Locust("scenarios/exec_storm.py", out, "--ss-burst-s", "0.3", "--ss-live-interval-s", "1") as loc:
        assert get(loc.base + "/swarm", {"user_count": 2, "spawn_rate": 2})["success"] is True
        mid = loc.wait_live(lambda d: len(d["so_far"]["points"]) >= 5, timeout=120)
        tab_png = shot(tmp_path, loc.base + "/?tab=swarmscope", "webui-live-mid.png")
        keep = os.environ.get("SWARMSCOPE_SCREENSHOTS")
        if keep:  # the page's picture for the docs (docs/webui-live.png); nothing asserts on it
            page_png = tmp_path / "webui-live-page-mid.png"  # the page reloads itself: no time budget
            chromium(loc.base + "/swarmscope/", f"--screenshot={page_png}", budget_ms=0)
            shutil.copy(page_png, keep)
        tab = table_rows(chromium(loc.base + "/?tab=swarmscope", "--dump-dom"))
        page = chromium(loc.base + "/swarmscope/", "--dump-dom", budget_ms=0)
        last: dict[str, Any] = get(loc.base + "/swarmscope/live.json")  # the whole series so far
        assert last["open_window"] == mid["open_window"] and last["windows"] == 0
        seen = len(last["so_far"]["points"])  # one more read: the series keeps going until the stop
        last = loc.wait_live(lambda d: len(d["so_far"]["points"]) > seen)
        get(loc.base + "/stop", {})
        loc.wait_windows(1)
        rep = loc.quit_report(out)
    points = last["so_far"]["points"]
    kernel = [p["kernel"] for p in points]
    generated = [p["generated"] for p in points]
    assert len(points) >= 6
    assert all(b > a for a, b in pairwise(kernel)), kernel  # the load runs on
    assert all(b >= a for a, b in pairwise(generated)), generated
    assert [p["missing"] for p in points] == [[]] * len(points)
    assert [p["reported"] for p in points] == [None] * len(points)  # no tracer under test
    (it,) = rep["points"][0]["iterations"]
    final_kernel = sum(n["kernel"] for n in it["per_node"])
    final_generated = sum(n["generated"] for n in it["per_node"])
    assert max(kernel) <= final_kernel  # a read so far never passes the exact total
    assert max(generated) <= final_generated
    assert [(n["generated"], n["harness_ok"]) for n in it["per_node"]] == [
        (n["kernel"], True) for n in it["per_node"]
    ]  # the closed window is still exact
    # The tab (as Chromium renders it) showed the live rows: totals, rates with the sparkline, note.
    head, *rows = tab
    assert head[:4] == ["Window", "Node", "Generated", "Kernel"], tab_png
    live, rate, note = rows
    assert live[0].startswith("0.1 open, ") and live[1] == "all 2" and live[-1] == "at close", tab_png
    assert int(live[3].replace(",", "")) > 0 and rate[0] == "rate so far" and rate[3].endswith("/s")
    assert note[0] == "note" and note[1].startswith("so far, not one instant"), tab_png
    assert '<svg id="so-far"' in page or "<svg id='so-far'" in page, page_png


def test_so_far_rows_say_totals_rates_and_the_caveat_as_the_cli_prints_numbers() -> None:
    from swarmscope.app.webui_live import SO_FAR_NOTE, chart_svg, so_far_rows, sparkline

    keys = ("window", "node", "generated", "kernel", "reported", "loss", "harness")
    pts = [
        {"t": 1.0, "generated": 1000, "kernel": 1200, "reported": 1100, "loss": 1 - 1100 / 1200,
         "nodes": 2, "missing": []},
        {"t": 3.0, "generated": 5000, "kernel": 5200, "reported": 5000, "loss": 1 - 5000 / 5200,
         "nodes": 2, "missing": ["p1@n1"]},
        {"t": 4.0, "generated": 5000, "kernel": 5200, "reported": 5100, "loss": 1 - 5100 / 5200,
         "nodes": 2, "missing": []},
    ]  # fmt: skip
    assert sparkline(pts) == "█▁"  # 2,000/s, then 0/s
    totals, rates, note = so_far_rows("0.1 open", pts, keys)
    assert totals == {"window": "0.1 open, 4.0 s", "node": "all 2", "generated": "5,000", "kernel": "5,200",
                      "reported": "5,100", "loss": "1.9231", "harness": "at close"}  # fmt: skip
    assert rates == {"window": "rate so far", "node": "█▁", "generated": "0/s", "kernel": "0/s",
                     "reported": "100/s", "loss": "", "harness": ""}  # fmt: skip
    assert note["node"] == SO_FAR_NOTE
    assert so_far_rows("0.1 open", pts[1:2], keys)[0]["node"] == "all 2, 1 probe(s) silent"
    assert so_far_rows("0.1 open", [], keys) == []  # before the first reading: the plain open row
    assert so_far_rows("0.1 open", pts, ("step", "rps")) == []  # a kind with other columns
    svg = chart_svg(pts)
    assert svg.count("<polyline") == 3 and "5,200" in svg and "4.0 s" in svg
