"""The trace waterfall in report.html, drawn by a real headless Chromium (Debian's chromium).

A real run (exec storm, embedded probe process, 2 nodes, 2 windows) writes trace.json and
report.html; Chromium loads the page from disk (nothing from the network: the page has no URL
but its own), its DOM must hold one bar per span of trace.json and one mark per kernel event, and
its screenshot must show the bars in each service's colour and the red kernel marks.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest
from trace_helpers import read_spans, run_without_otlp

from swarmscope.controller.waterfall import COLOURS, LABEL_W, waterfall_section

CHROMIUM = shutil.which("chromium")


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM, "chromium is not installed (tools/setup.sh installs it)"
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_trace_json_no_section(tmp_path: pathlib.Path) -> None:
    assert waterfall_section(str(tmp_path)) is None
    (tmp_path / "trace.json").write_text('{"trace_id": "x", "spans": []}')  # the old format
    assert waterfall_section(str(tmp_path)) is None


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_waterfall_drawn_in_chromium(tmp_path: pathlib.Path) -> None:
    run_dir = run_without_otlp(
        "run", "scenarios/exec_storm.yaml", "--set", "nodes=2", "--set", "iterations=2",
        "--set", "burst_s=0.3", "--set", "pause_s=0", "--out", str(tmp_path / "results"),
    )  # fmt: skip
    spans = read_spans(run_dir)
    page = (run_dir / "report.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), (
        "the page loads something from the network"
    )
    url = (run_dir / "report.html").as_uri()

    dom = chromium("--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    bars = re.findall(r'<rect class="wf-bar" data-service="([^"]+)" data-span="([0-9a-f]{16})"', dom.stdout)
    assert sorted(b[1] for b in bars) == sorted(s["id"] for s in spans)
    assert {b[0] for b in bars} == {"swarmscope", "swarmscope-worker", "swarmscope-probe"}
    events = sum(len(s["events"]) for s in spans)
    names = sorted(e["name"] for s in spans for e in s["events"])
    # per probe window (2) and node (2): the reading, and the window's first..last exec
    assert names == ["exec.window"] * 4 + ["reading"] * 4
    assert dom.stdout.count('class="wf-mark"') == events

    shot = tmp_path / "waterfall.png"
    r = chromium("--window-size=1300,5000", f"--screenshot={shot}", url)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    from PIL import Image

    im = Image.open(shot).convert("RGB")
    px = im.load()
    w, h = im.size
    found: dict[tuple[int, int, int], int] = {}
    wanted = {tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in [*COLOURS.values(), "#d62728"]}
    for y in range(h):
        for x in range(LABEL_W, w, 3):
            c = px[x, y]
            if c in wanted:
                found[c] = found.get(c, 0) + 1
    # Every service's bars and the kernel marks (#d62728, anti-aliased but with solid pixels) are
    # on screen; a bar 13 px high spans many sampled pixels.
    assert set(found) == wanted, found
    assert min(found.values()) >= 10, found
