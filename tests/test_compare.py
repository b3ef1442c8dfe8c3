"""``swarmscope ls`` and ``swarmscope compare``: the spread rule on known numbers, then two real
exec-storm runs with different tracers (none and bpftrace) compared through the CLI."""

from __future__ import annotations

import json
import pathlib

import pytest
from helpers import load_report, run_cli

from swarmscope.controller.compare import compare, render_compare


def _report(run_id: str, its: dict[int, list[float]], tracer: str) -> dict:
    points = [
        {"index": i, "params": {"nodes": n}, "iterations": [{"generated": v, "kernel": v} for v in vals]}
        for i, (n, vals) in enumerate(its.items())
    ]
    cfg = {"tracer": tracer, "out": run_id}
    return {
        "run_id": run_id,
        "scenario": "exec_storm",
        "status": "ok",
        "started": "t",
        "config": cfg,
        "points": points,
    }


def test_spread_rule() -> None:
    a = _report("A", {1: [100, 110], 2: [200, 220], 5: [50]}, "none")
    b = _report("B", {1: [105, 130], 2: [230, 240], 5: [60], 9: [1, 2]}, "bpftrace")
    cmp = compare(a, b)
    assert cmp["config_diff"] == {"tracer": ["none", "bpftrace"]}  # "out" is where, not what
    got = [(r["where"], r["figure"], r["change"], r["flag"]) for r in cmp["rows"]]
    assert got == [
        ("nodes=1", "generated", 12.5, "within"),  # 105..130 overlaps 100..110
        ("nodes=1", "kernel", 12.5, "within"),
        ("nodes=2", "generated", 25.0, "beyond"),  # 230..240 all above 200..220
        ("nodes=2", "kernel", 25.0, "beyond"),
        ("nodes=5", "generated", 10.0, "no-spread"),  # one iteration: no spread to judge by
        ("nodes=5", "kernel", 10.0, "no-spread"),
        ("nodes=9", "generated", None, "only B"),
        ("nodes=9", "kernel", None, "only B"),
    ]
    assert cmp["rows"][2]["change_pct"] == pytest.approx(25 / 210 * 100)
    text = render_compare(cmp)
    assert "  config tracer: 'none' -> 'bpftrace'" in text
    lines = text.splitlines()
    assert lines[4].split() == ["where", "figure", "A", "mean", "A", "min..max", "B", "mean", "B", "min..max",
                                "change", "change", "%", "flag"]  # fmt: skip
    row = ["nodes=2", "generated", "210.0", "200..220", "235.0", "230..240", "+25.0", "+11.9"]
    row += ["BEYOND", "SPREAD"]
    assert lines[7].split() == row
    assert lines[5].split()[-1] == "+11.9"  # within the spread: no flag


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_compare_two_real_runs_with_different_tracers(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    ids = []
    for tracer in ("none", "bpftrace"):
        p = run_cli(
            "run", "scenarios/exec_storm.yaml", "--set", "nodes=1", "--set", "iterations=2",
            "--set", "burst_s=0.3", "--set", "pause_s=0", "--set", f"tracer={tracer}", "--out", str(out),
        )  # fmt: skip
        assert p.returncode == 0, p.stderr[-3000:]
        ids.append(p.stderr.split("swarmscope: run ", 1)[1].split()[0])
    reps = [load_report(out / i) for i in ids]

    p = run_cli("ls", "--out", str(out), "--json")
    assert p.returncode == 0, p.stderr
    listed = json.loads(p.stdout)
    assert [(r["run_id"], r["tracer"], r["windows"], r["status"]) for r in listed] == [
        (ids[0], "none", 2, "ok"),
        (ids[1], "bpftrace", 2, "ok"),
    ]
    p = run_cli("ls", "--out", str(out))
    assert p.stdout.splitlines()[0].split() == [
        "run", "scenario", "status", "started", "duration", "points", "windows", "tracer", "checks", "flags",
    ]  # fmt: skip
    assert len(p.stdout.splitlines()) == 3

    plot = tmp_path / "cmp.png"
    p = run_cli("compare", ids[0], str(out / ids[1]), "--out", str(out), "--json", "--plot", str(plot))
    assert p.returncode == 0, p.stderr
    cmp = json.loads(p.stdout)
    assert cmp["a"]["run_id"] == ids[0] and cmp["b"]["run_id"] == ids[1]
    assert cmp["config_diff"] == {"tracer": ["none", "bpftrace"]}
    rows = {(r["where"], r["figure"]): r for r in cmp["rows"]}
    assert sorted(rows) == [("nodes=1", f) for f in ("generated", "kernel", "loss_ratio", "reported")]
    for fig in ("generated", "kernel"):
        sa, sb = (rep["points"][0]["summary"][fig] for rep in reps)
        r = rows[("nodes=1", fig)]
        assert (r["a"]["mean"], r["a"]["min"], r["a"]["max"]) == (sa["mean"], sa["min"], sa["max"])
        assert (r["b"]["mean"], r["b"]["min"], r["b"]["max"]) == (sb["mean"], sb["min"], sb["max"])
        assert r["change"] == sb["mean"] - sa["mean"]
        beyond = sb["min"] > sa["max"] or sb["max"] < sa["min"]
        assert r["flag"] == ("beyond" if beyond else "within")
    assert rows[("nodes=1", "reported")]["flag"] == "only B"  # no tracer in A: nothing reported
    assert rows[("nodes=1", "reported")]["b"]["mean"] == reps[1]["points"][0]["summary"]["reported"]["mean"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    assert cmp["plot"] == str(plot)

    p = run_cli("compare", ids[0], "nope", "--out", str(out))
    assert p.returncode == 1 and f"run 'nope' is not in {out}/swarmscope.sqlite" in p.stderr


def _store_with_runs(out: pathlib.Path, *kinds: str) -> list[str]:
    """A results store holding one realistic run per kind name (tests/_results_data)."""
    import dataclasses

    from _results_data import fire_run, make_run

    from swarmscope.controller.store import ResultStore
    from swarmscope.core.events import RunEvents

    ids = []
    with ResultStore(out / "swarmscope.sqlite") as store:
        for i, kind in enumerate(kinds):
            run = dataclasses.replace(make_run(f"run-{i}-{kind}"), scenario=kind)
            events = RunEvents()
            store.attach(events)
            fire_run(events, run)
            ids.append(run.run_id)
    return ids


@pytest.mark.slow
def test_ls_into_a_closed_pipe_is_quiet(tmp_path: pathlib.Path) -> None:
    """`swarmscope ls --json | head`: the reader is gone before the write; no traceback."""
    import subprocess

    from helpers import BIN

    _store_with_runs(tmp_path, "exec_storm")
    p = subprocess.Popen([str(BIN / "swarmscope"), "ls", "--out", str(tmp_path), "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # like head once it has its lines
    err = p.stderr.read()
    assert p.wait(timeout=60) == 141  # 128 + SIGPIPE, as a Unix tool killed by the closed pipe
    assert err == b""


@pytest.mark.slow
def test_compare_refuses_runs_of_two_kinds(tmp_path: pathlib.Path) -> None:
    a, b = _store_with_runs(tmp_path, "exec_storm", "ingress_flood")
    p = run_cli("compare", a, b, "--out", str(tmp_path))
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr == (
        f"swarmscope: {a} (exec_storm) and {b} (ingress_flood) are runs of two kinds: their figures "
        "do not compare. Compare two runs of one kind (`swarmscope ls` shows each run's scenario).\n"
    )
