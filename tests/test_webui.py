"""The swarmscope tab in Locust's web UI, looked at in a real headless Chromium (Debian's).

Locust runs a real exec storm (or ingress flood) with its web UI; the test starts the swarm the
way the UI's button does (POST /swarm), reads the tab while the window is open (a live "open"
row), stops, then loads Locust's page in Chromium on the swarmscope tab: the numbers the browser
shows must equal report.json's once Locust has quit. Screenshots are kept in the test's tmp dir
(and copied to $SWARMSCOPE_SCREENSHOTS when set) to be looked at.
"""

from __future__ import annotations

import html
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from helpers import BIN, ROOT, free_port, load_report, only_run_dir

pytestmark = [
    pytest.mark.root,
    pytest.mark.bpf,
]
CHROMIUM = shutil.which("chromium")


def chromium(url: str, *args: str, budget_ms: int = 8000) -> str:
    """Chromium's output for ``url``; ``budget_ms`` of virtual time lets the page's scripts run
    (0 for a page that reloads itself, which would never settle)."""
    assert CHROMIUM, "chromium is installed by tools/setup.sh"
    budget = [f"--virtual-time-budget={budget_ms}"] if budget_ms else []
    p = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--window-size=1280,900", *budget, *args, url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def table_rows(dom: str) -> list[list[str]]:
    """The text of every table row's cells (th or td), tags stripped."""
    rows = []
    for tr in re.findall(r"<tr\b[^>]*>(.*?)</tr>", dom, re.S):
        cells = re.findall(r"<t[dh]\b[^>]*>(.*?)</t[dh]>", tr, re.S)
        rows.append([html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells])
    return rows


def shot(tmp: pathlib.Path, url: str, name: str) -> pathlib.Path:
    path = tmp / name
    chromium(url, f"--screenshot={path}")
    assert path.stat().st_size > 10_000
    keep = os.environ.get("SWARMSCOPE_SCREENSHOTS")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(path, os.path.join(keep, name))
    return path


def get(url: str, data: dict[str, Any] | None = None, timeout: float = 30) -> Any:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    with urllib.request.urlopen(url, data=body, timeout=timeout) as r:
        text = r.read().decode()
    return json.loads(text) if text.lstrip().startswith(("{", "[")) else text


class Locust:
    def __init__(self, locustfile: str, out: pathlib.Path, *opts: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [str(BIN / "locust"), "-f", locustfile, "--web-host", "127.0.0.1", "--web-port",
               str(self.port), "--ss-out", str(out), *opts]  # fmt: skip
        # Its output goes to a file, not a pipe nobody reads (a full pipe would block Locust).
        self.log = out.parent / "locust.log"
        with open(self.log, "w") as fh:
            self.p = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while True:
            try:
                get(self.base + "/", timeout=2)
                return
            except OSError:
                assert time.monotonic() < deadline and self.p.poll() is None, self.log.read_text()[-3000:]
                time.sleep(0.3)

    def wait_live(self, done: Callable[[dict[str, Any]], bool], timeout: float = 90) -> dict[str, Any]:
        """live.json once ``done(it)`` holds (the page's own state, polled; bounded)."""
        deadline = time.monotonic() + timeout
        while not done(data := get(self.base + "/swarmscope/live.json")):
            assert time.monotonic() < deadline and self.p.poll() is None, data
            time.sleep(0.2)
        return data

    def wait_requests(self, n: int, timeout: float = 90) -> None:
        """Until Locust's own statistics (its /stats/requests) count ``n`` requests."""
        deadline = time.monotonic() + timeout
        while (total := get(self.base + "/stats/requests")["stats"][-1]["num_requests"]) < n:
            assert time.monotonic() < deadline and self.p.poll() is None, total
            time.sleep(0.2)

    def wait_windows(self, n: int, timeout: float = 90) -> dict[str, Any]:
        return self.wait_live(lambda d: d["windows"] >= n and d["open_window"] is None, timeout)

    def stop_and_look(self, tmp: pathlib.Path, name: str) -> tuple[pathlib.Path, list[list[str]]]:
        """Stop (the UI's button), wait for the window's row, screenshot the tab, read its table."""
        get(self.base + "/stop", {})
        self.wait_windows(1)
        png = shot(tmp, self.base + "/?tab=swarmscope", name)
        return png, table_rows(chromium(self.base + "/?tab=swarmscope", "--dump-dom"))

    def quit_report(self, out: pathlib.Path) -> dict[str, Any]:
        """Locust's orderly stop (SIGTERM: quitting fires, the report is written); the report."""
        self.p.send_signal(signal.SIGTERM)
        assert self.p.wait(timeout=90) == 0, self.log.read_text()[-3000:]
        return load_report(only_run_dir(out))

    def __enter__(self) -> Locust:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(timeout=30)


@pytest.mark.slow
def test_exec_storm_tab_equals_report(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    # No reads so far (test_webui_live.py has them): the open row stays "…" until the close.
    with Locust("scenarios/exec_storm.py", out, "--ss-burst-s", "0.3", "--ss-live-interval-s", "0") as loc:
        assert get(loc.base + "/swarm", {"user_count": 2, "spawn_rate": 2})["success"] is True
        during = loc.wait_live(lambda d: d["open_window"] is not None)  # the window measuring now
        assert during["windows"] == 0
        assert during["rows"] == [
            {"window": "0.1 open", "node": "…", "generated": "…", "kernel": "…", "reported": "…",
             "loss": "…", "harness": "…"}
        ]  # fmt: skip
        shot(tmp_path, loc.base + "/?tab=swarmscope", "webui-exec-during.png")
        png, tab = loc.stop_and_look(tmp_path, "webui-exec.png")
        page = table_rows(chromium(loc.base + "/swarmscope/", "--dump-dom", budget_ms=0))
        shot(tmp_path, loc.base + "/?tab=reports", "webui-download-data.png")
        reports_tab = chromium(loc.base + "/?tab=reports", "--dump-dom")
        links = re.findall(r'<a\b[^>]*href="(swarmscope/[^"]+)"[^>]*>([^<]+)</a>', reports_tab)
        report_html = get(loc.base + "/swarmscope/report.html")
        rep = loc.quit_report(out)
    (it,) = rep["points"][0]["iterations"]
    want = [
        [
            "0.1",
            n["node"],
            f"{n['generated']:,}",
            f"{n['kernel']:,}",
            "-",
            "-",
            "yes",  # the harness holds: generated == kernel, on every node
        ]
        for n in it["per_node"]
    ]
    assert len(want) == 2
    assert [(n["generated"], n["harness_ok"]) for n in it["per_node"]] == [
        (n["kernel"], True) for n in it["per_node"]
    ]
    head = ["Window", "Node", "Generated", "Kernel", "Reported", "Loss %", "Generated = kernel"]
    assert tab == [head, *want], png
    assert page == [head, *want]
    assert links == [  # rendered anchors in Locust's "Download Data" tab
        ("swarmscope/report.html", "swarmscope report (HTML, rendered now)"),
        ("swarmscope/report.json", "swarmscope report.json"),
        ("swarmscope/trace.json", "swarmscope trace (trace.json)"),
    ]
    assert f"<small>{rep['run_id']}</small>" in report_html  # rendered from the store mid-run


@pytest.mark.slow
def test_ingress_flood_tab_equals_report(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    with Locust("scenarios/ingress_flood.py", out, "--ss-network-baseline-s", "0") as loc:
        assert get(loc.base + "/swarm", {"user_count": 5, "spawn_rate": 5})["success"] is True
        loc.wait_requests(50)  # Locust's own counter: the load is flowing
        png, tab = loc.stop_and_look(tmp_path, "webui-ingress.png")
        rep = loc.quit_report(out)
    (it,) = rep["points"][0]["iterations"]
    steps = it["extra"]["steps"]
    assert len(steps) >= 1
    proxy = it["extra"]["proxy"]

    def f(v: float | None, d: int) -> str:
        return "-" if v is None else f"{v:,.{d}f}"

    want = []
    for s in steps:
        p = s.get("proxy") or proxy or {}
        lat = s["latency_ms"]
        load = f"users={s['users']}" if "users" in s else f"rate={s['rate']}"
        want.append([str(s["step"]), load, f"{s['requests']:,}", f(s["rps"], 1), f"{s['failures']:,}",
                     f(lat["p50"], 2), f(lat["p90"], 2), f(lat["p99"], 2), f(p.get("cpu_pct"), 1),
                     f(p.get("rss_kib_max"), 0)])  # fmt: skip
    head = ["Step", "Load", "Requests", "Req/s", "Failures", "p50 ms", "p90 ms", "p99 ms", "Proxy CPU %",
            "Proxy RSS KiB"]  # fmt: skip
    assert tab == [head, *want], png
    assert steps[0]["requests"] > 0


@pytest.mark.parametrize("locustfile", ["scenarios/exec_storm.py", "scenarios/ingress_flood.py"])
def test_start_page_has_no_missing_host_warning(tmp_path: pathlib.Path, locustfile: str) -> None:
    """No host is needed (an exec storm has no target; the ingress flood starts its own): Locust's
    start page must not warn that a User class has no host, on its first load or any later."""
    with Locust(locustfile, tmp_path / "results") as loc:
        for _ in range(2):
            args = re.search(r"window\.templateArgs = (\{.*?\})\s*$", get(loc.base + "/"), re.M)
            assert args is not None
            assert json.loads(args.group(1))["missing_host_warning"] is False
