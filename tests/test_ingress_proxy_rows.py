"""The ingress flood's proxy rows: in a ``locust -f`` window (the chart's headless controller)
each step gets the probe's procstat ticks that fall in it, in a swept window (``swarmscope run``)
the step gets all of them, and a step's figures come from those rows in both. A step (or a
window) without any says the proxy is missing: in the rows, the flags, the live table and
report.html, never a crash, never a zero.

No probe, no Locust: the window's worker results and probe readings are built here, as the
controller receives them, and go through the kind's real reconcile, sections and renderers.
"""

from __future__ import annotations

import pathlib
from typing import Any

from swarmscope.controller.model import PointInfo, ProbeReading, ReadingSample, WindowInfo, WindowOutcome
from swarmscope.kinds import load_scenario
from swarmscope.kinds.ingress_flood import live, report
from swarmscope.kinds.ingress_flood.results import build_sections, reconcile_window
from swarmscope.probes.programs.procstat import COLUMNS, SERIES
from swarmscope.workers.http_stats import StepRecorder

T0 = 1_800_000_000.0  # wall seconds of the window's start
PID = 4242


def _recorder(n_steps: int = 2) -> dict[str, Any]:
    """Two count steps: step 0 sends from T0+0.1 to T0+3.0, step 1 from T0+4.1 to T0+6.0 (one
    step, a swept window's: step 0 only)."""
    rec = StepRecorder(60.0, T0, n_steps=n_steps)
    for i in range(30):
        rec.record(T0 + 0.1 + i * 0.1, T0 + 0.1 + i * 0.1 + 0.005, 200, None, step=0)
    for i in range(20 if n_steps == 2 else 0):
        rec.record(T0 + 4.1 + i * 0.1, T0 + 4.1 + i * 0.1 + 0.005, 200, None, step=1)
    return rec.encode()


def _tick(end_s: float, cpu: float, rss: float) -> ReadingSample:
    """One procstat row of Traefik's process: the tick that ended at T0 + end_s (1 s long)."""
    end = int((T0 + end_s) * 1e9)
    labels = {"pid": str(PID), "comm": "traefik", **{c: "0.0" for c in COLUMNS}}
    labels.update({"%CPU": repr(cpu), "%usr": repr(cpu - 1.0), "%system": "1.0", "RSS": repr(rss),
                   "VSZ": repr(rss * 10)})  # fmt: skip
    return ReadingSample(SERIES, end - 1_000_000_000, end, round(100 * cpu), labels)


def _outcome(readings: list[ProbeReading], point: PointInfo) -> WindowOutcome:
    # The headless chart run: one worker, the target a Service it did not start (no lb_pids).
    # A swept point (users in its params) is one step: the worker's recorder holds that one.
    rec = _recorder(1 if point.params else 2)
    result = {"generated": 50, "requests": 50, "failures": 0, "recorder": rec, "url": "http://t:8080"}
    window = WindowInfo(run_id="r", window_id="w", point=point.index, iteration=1, nodes=["w1-n1"])
    return WindowOutcome(window, point, {"w1-n1": result}, readings)


def _reading(ticks: list[ReadingSample]) -> ProbeReading:
    gauges = {"proc.processes": 1.0 if ticks else 0.0, "proc.ticks": float(len(ticks))}
    return ProbeReading("p0", "w1-n1", {}, gauges, samples=ticks)


FREE = PointInfo(0, {}, 1)  # locust -f: one window, every step
SWEPT = PointInfo(1, {"users": 40}, 1)  # swarmscope run / --sweep: point 1, users=40


def _run(readings: list[ProbeReading], tmp: pathlib.Path, point: PointInfo = FREE) -> tuple[Any, Any]:
    _kind, cfg = load_scenario(
        "scenarios/ingress_flood.yaml",
        ["steps=10,40", "requests=30,20", "host=http://t:8080", "allow_hosts=t", "proxy_processes=traefik"],
        env={},
    )
    res = reconcile_window(cfg, _outcome(readings, point))
    return res, build_sections(cfg, [res], str(tmp))


def test_each_locust_f_step_gets_the_procstat_ticks_within_it(tmp_path: pathlib.Path) -> None:
    # Ticks with their middle in step 0 (ending at +1, +2, +3), one between the steps (+4: its
    # middle at +3.5, after step 0's last answer and before step 1's first send), one in step 1.
    ticks = [_tick(1.0, 10.0, 30000.0), _tick(2.0, 20.0, 31000.0), _tick(3.0, 30.0, 32000.0),
             _tick(4.0, 99.0, 99999.0), _tick(5.5, 50.0, 33000.0)]  # fmt: skip
    res, sec = _run([_reading(ticks)], tmp_path)
    s0, s1 = sec["steps"]
    assert [r["t_ns"] for r in s0["proxy_per_second"]] == [int((T0 + e) * 1e9) for e in (1.0, 2.0, 3.0)]
    assert [r["t_ns"] for r in s1["proxy_per_second"]] == [int((T0 + 5.5) * 1e9)]
    assert {(r["pid"], r["comm"], r["role"]) for r in s0["proxy_per_second"]} == {(PID, "traefik", "worker")}
    assert s0["proxy"] == {"cpu_pct": 20.0, "usr_pct": 19.0, "sys_pct": 1.0, "rss_kib_max": 32000.0,
                           "processes": 1.0, "ticks": 3.0}  # fmt: skip
    assert s1["proxy"] == {"cpu_pct": 50.0, "usr_pct": 49.0, "sys_pct": 1.0, "rss_kib_max": 33000.0,
                           "processes": 1.0, "ticks": 1.0}  # fmt: skip
    (p0,) = s0["proxy_processes"]
    assert (p0["pid"], p0["%CPU"], p0["RSS"], p0["VSZ"]) == (PID, 20.0, 32000.0, 320000.0)
    assert not [f for f in res.flags if f.startswith("missing")]
    assert [row["cpu"] for row in live.rows([res])] == ["20.0", "50.0"]


def test_a_step_or_a_window_without_a_proxy_reading_says_it_is_missing(tmp_path: pathlib.Path) -> None:
    # A reading whose ticks all fall in step 0: step 1's proxy is missing, named in the flags.
    res, sec = _run([_reading([_tick(2.0, 20.0, 31000.0)])], tmp_path)
    assert [s["proxy"] is None for s in sec["steps"]] == [False, True]
    assert [f for f in res.flags if f.startswith("missing")] == ["missing:proxy:step1"]
    # No procstat reading at all (the probe never answered for the node): every step's proxy is
    # None, the window flagged once, and the live table and report.html render it as missing.
    res, sec = _run([], tmp_path)
    proxies = [(s["proxy"], s["proxy_per_second"], s["proxy_processes"]) for s in sec["steps"]]
    assert proxies == [(None, [], [])] * 2
    assert [f for f in res.flags if f.startswith("missing")] == ["missing:proxy:probe"]
    assert [(row["cpu"], row["rss"]) for row in live.rows([res])] == [("-", "-")] * 2
    html = report.render_steps("steps", sec["steps"], {"ingress": sec["ingress"]}).html
    assert html.count("<td><i>missing</i></td>") == 4  # CPU and RSS of both steps
    assert "proxy_cpu_rss.png" not in sec["ingress"]["plots"].values()


def test_a_swept_step_has_its_figures_from_its_rows(tmp_path: pathlib.Path) -> None:
    # The window is the step, so every tick of the window is the step's, and its figures come
    # from those rows as a locust -f step's do: CPU the mean of the 5 per-tick sums,
    # (10+20+30+99+50)/5, RSS the largest tick.
    ticks = [_tick(1.0, 10.0, 30000.0), _tick(2.0, 20.0, 31000.0), _tick(3.0, 30.0, 32000.0),
             _tick(4.0, 99.0, 99999.0), _tick(5.5, 50.0, 33000.0)]  # fmt: skip
    res, sec = _run([_reading(ticks)], tmp_path, SWEPT)
    (s,) = sec["steps"]
    assert (s["step"], s["users"], len(s["proxy_per_second"])) == (1, 40, 5)
    assert s["proxy"] == res.extra["proxy"]
    assert s["proxy"] == {"cpu_pct": 41.8, "usr_pct": 40.8, "sys_pct": 1.0, "rss_kib_max": 99999.0,
                          "processes": 1.0, "ticks": 5.0}  # fmt: skip
    assert not [f for f in res.flags if f.startswith("missing")]


def test_a_swept_step_without_a_proxy_process_says_it_is_missing(tmp_path: pathlib.Path) -> None:
    # procstat read the window but matched no process (the LB gone, a wrong name): the proxy is
    # missing from the step, not idle at 0 % and 0 KiB, and named as a locust -f step's is.
    res, sec = _run([_reading([])], tmp_path, SWEPT)
    (s,) = sec["steps"]
    assert (s["proxy"], s["proxy_per_second"], s["proxy_processes"]) == (None, [], [])
    assert res.extra["proxy"] is None
    assert [f for f in res.flags if f.startswith("missing")] == ["missing:proxy:step1"]
    assert [(row["cpu"], row["rss"]) for row in live.rows([res])] == [("-", "-")]
    html = report.render_steps("steps", sec["steps"], {"ingress": sec["ingress"]}).html
    assert html.count("<td><i>missing</i></td>") == 2  # its CPU and RSS
