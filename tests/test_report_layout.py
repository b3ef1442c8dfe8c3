"""report.html as a reader sees it at 1280 px, measured in a real headless Chromium (Debian's).

The summary table of a realistic sweep (3 points, 5-digit means, flags) must fit the page: no
horizontal page scroll, the table's right edge (the loss and flags columns) inside the window,
and nothing hidden inside its scroll box. The page is a copy of report.html with a small script
that writes the measurements into the DOM, read back with ``--dump-dom``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _results_data import fire_run, make_run
from matplotlib.figure import Figure

from swarmscope.controller.plots import loss_vs_nodes_plot, percent_axis
from swarmscope.controller.report import write_report
from swarmscope.controller.store import ResultStore, run_dir_for
from swarmscope.core.events import RunEvents

CHROMIUM = shutil.which("chromium")
RUN_ID = "run-20261122-1"
WIDTH = 1280

MEASURE = """<script>
const t = document.querySelector('table.summary'), box = t.parentElement;
const loss = [...t.querySelectorAll('th')].find(th => th.textContent === 'loss %');
document.body.setAttribute('data-layout', JSON.stringify({
  view: window.innerWidth, page: document.documentElement.scrollWidth,
  table_right: Math.ceil(t.getBoundingClientRect().right),
  loss_right: Math.ceil(loss.getBoundingClientRect().right),
  box_scroll: box.scrollWidth, box_client: box.clientWidth}));
</script></body>"""


@pytest.mark.slow
def test_summary_table_fits_1280(tmp_path: Path) -> None:
    assert CHROMIUM, "chromium is not installed (tools/setup.sh installs it)"
    events = RunEvents()
    with ResultStore(tmp_path / "s.sqlite") as s:
        s.attach(events)
        fire_run(events, make_run(run_dir=run_dir_for(tmp_path, RUN_ID)))
        write_report(s, RUN_ID, tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text()
    probe = tmp_path / "measure.html"
    probe.write_text(page.replace("</body>", MEASURE))
    r = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={WIDTH},900", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"data-layout=\"([^\"]+)\"", r.stdout)
    assert m, r.stdout[:2000]
    lay = json.loads(m.group(1).replace("&quot;", '"'))
    assert lay["view"] == WIDTH
    assert lay["page"] == WIDTH, lay  # the page does not scroll sideways
    assert lay["table_right"] <= WIDTH, lay
    assert lay["loss_right"] <= lay["table_right"], lay
    assert lay["box_scroll"] == lay["box_client"], lay  # no column hidden in the scroll box
    # The plot for one node count is not drawn; for three it is.
    assert "loss_vs_nodes.png" in {p.name for p in (tmp_path / "out").glob("*.png")}


def test_loss_plot_needs_two_node_counts() -> None:
    one = {"nodes": 1, "summary": {"loss_ratio": {"n": 2, "mean": 0.0, "min": 0.0, "max": 0.0}}}
    assert loss_vs_nodes_plot([one]) is None
    assert loss_vs_nodes_plot([one, {**one, "index": 1}]) is None  # same node count twice
    assert loss_vs_nodes_plot([one, {**one, "nodes": 2}]) is not None


def test_percent_axis_labels() -> None:
    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([1, 2], [0.0, 0.0])
    percent_axis(ax, 0.0)  # a loss-free sweep: 0..1 %, not 0..0.05
    fig.canvas.draw()
    assert ax.get_ylim() == (0.0, 1.0)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["0.00%", "0.20%", "0.40%", "0.60%", "0.80%", "1.00%"]
    percent_axis(ax, 40.0)
    assert ax.get_ylim() == (0.0, 42.0)
