"""Checks (k6-like thresholds): the expression language, their locations, and the exit code.

The language is tested on report.json shapes of every kind; the exit code on real runs: a real
exec storm (``swarmscope run`` and ``locust -f``) that fails a check exits 99 and names it, the
same run with a looser check exits 0.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest
from helpers import BIN, ROOT, load_report, only_run_dir, run_cli

from swarmscope.controller.checks import EXIT_CODE, evaluate_one, item_lines, parse_check, parse_checks
from swarmscope.core.errors import ConfigError


def _point(index: int, params: dict, gen: int, kern: int, rep: int | None, loss_max: float | None) -> dict:
    stat = {"n": 1, "mean": None, "p50": None, "p99": None, "min": None, "max": None}
    return {
        "index": index,
        "params": params,
        **({"nodes": params["nodes"]} if "nodes" in params else {}),
        "summary": {
            "generated": {**stat, "max": gen},
            "kernel": {**stat, "max": kern},
            "reported": {**stat, "max": rep},
            "loss_ratio": {**stat, "max": loss_max},
        },
        "totals": {"generated": gen, "kernel": kern, "reported": rep, "loss_ratio": loss_max},
        "per_node": [],
        "flags": [],
    }


EXEC = {
    "points": [
        _point(0, {"nodes": 2}, 8000, 8000, 7990, 0.00125),
        _point(1, {"nodes": 5}, 20000, 20001, 18000, 0.1),
    ]
}
INGRESS = {
    "points": [_point(0, {"users": 10}, 100, 0, None, None)],
    "steps": [
        {"step": 0, "users": 10, "latency_ms": {"p50": 1.5, "p99": 12.0}},
        {"step": 1, "users": 100, "latency_ms": {"p50": 3.0, "p99": 250.0}},
    ],
}
NEIGHBORS = {
    "points": [],
    "neighbors": {
        "points": [
            {"neighbors": 1000, "mode": "list_program", "per_neighbor_us": 2.5},
            {"neighbors": 1000000, "mode": "list_program", "per_neighbor_us": 0.8},
            {"neighbors": 1000000, "mode": "write_watch_program", "per_neighbor_us": 1.2},
        ]
    },
}


def _ev(text: str, report: dict) -> tuple[bool, list, str]:
    r = evaluate_one(parse_check(text), report)
    return r["ok"], r["values"], r["message"]


def test_point_numbers_and_statistics() -> None:
    assert _ev("loss_ratio.max < 0.01", EXEC) == (
        False,
        [0.00125, 0.1],
        "points[1].loss_ratio.max: 0.1 < 0.01 is false",
    )
    assert _ev("loss_ratio.max < 0.2", EXEC) == (True, [0.00125, 0.1], "ok")
    assert _ev("generated == kernel", EXEC) == (
        False,
        [8000, 20000],
        "points[1].generated: 20000 == 20001 is false",
    )
    assert _ev("generated == kernel @ nodes=2", EXEC)[0] is False  # "@" selects the right side only
    assert _ev("generated @ 2 == kernel @ 2", EXEC) == (True, [8000], "ok")
    assert _ev("points[*].totals.reported >= 7990", EXEC) == (True, [7990, 18000], "ok")
    assert _ev("points[1].totals.kernel == 20001", EXEC) == (True, [20001], "ok")


def test_steps_and_neighbors_paths() -> None:
    assert _ev("steps[*].latency_ms.p99 < 200", INGRESS) == (
        False,
        [12.0, 250.0],
        "steps[1].latency_ms.p99: 250 < 200 is false",
    )
    assert _ev("steps.latency_ms.p99 @ users=10 < 200", INGRESS) == (True, [12.0], "ok")
    # a missing number (kernel of a kind that counts none is null) fails: it cannot be measured
    assert _ev("reported > 0", INGRESS) == (False, [None], "points[0].reported: no value")
    assert _ev("neighbors.per_neighbor_us @ 1000000 < 1.0", NEIGHBORS) == (
        False,
        [0.8, 1.2],
        "neighbors.points[2].per_neighbor_us: 1.2 < 1 is false",
    )
    assert _ev("neighbors.per_neighbor_us @ 1000 < 3", NEIGHBORS) == (True, [2.5], "ok")
    assert _ev("neighbors.per_neighbor_us @ 7 < 3", NEIGHBORS) == (
        False,
        [],
        "no value: nothing matched neighbors.per_neighbor_us @ 7",
    )
    assert _ev("neighbours.per_neighbor_us < 3", NEIGHBORS) == (
        False,
        [],
        "no value: the report has no 'neighbours'",
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("loss_ratio.max <", "expected a number or a report path at column 17, found the end"),
        ("loss_ratio.max 0.01", "expected a comparison at column 16, found '0.01'"),
        ("loss_ratio.max < 0.01 extra", "unexpected 'extra' at column 23 after the comparison"),
        ("1 < 2", "compares two numbers: one side must be a report path"),
        ("steps[x].p99 < 1", "expected '*' or an index at column 7"),
        ("__import__('os') < 1", "unexpected '(' at column 11"),
        ("kernel ; 1", "unexpected ';' at column 8"),
    ],
)
def test_invalid_expressions(text: str, reason: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_check(text)
    assert str(e.value) == reason


def test_every_invalid_check_with_its_location() -> None:
    with pytest.raises(ConfigError) as e:
        parse_checks([("kernel >", "s.yaml:4"), ("kernel > 1", "s.yaml:5"), ("=", "--check")])
    assert [str(p) for p in e.value.problems] == [
        "s.yaml:4: checks: 'kernel >': expected a number or a report path at column 9, found the end",
        "--check: checks: '=': expected a number or a report path at column 1, found '='",
    ]
    assert item_lines("scenario: exec_storm\nchecks:\n  - a < 1\n\n  - b > 2\n") == [3, 5]


@pytest.mark.slow
def test_bad_check_in_scenario_file_names_its_line(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("scenario: exec_storm\nnodes: [1]\nchecks:\n  - generated == kernel\n  - loss_ratio.max <\n")
    p = run_cli("run", str(f), "--check", "kernel >> 1")
    assert p.returncode == 2, p.stderr
    assert f"{f}:5: checks: 'loss_ratio.max <': expected a number or a report path at column 17" in p.stderr
    assert "--check: checks: 'kernel >> 1': expected a number or a report path at column 9" in p.stderr
    assert "Traceback" not in p.stderr


root = pytest.mark.root  # conftest skips it with "not root" (CI is root)
SMALL = ["--set", "nodes=1", "--set", "iterations=2", "--set", "burst_s=0.3", "--set", "pause_s=0"]


@pytest.mark.slow
@root
@pytest.mark.root
@pytest.mark.bpf
def test_failing_check_changes_the_exit_code_of_a_real_run(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("scenario: exec_storm\nchecks:\n  - generated == kernel\n")
    out = tmp_path / "strict"
    p = run_cli("run", str(f), *SMALL, "--out", str(out), "--check", "kernel.max < 10")
    assert p.returncode == EXIT_CODE, p.stderr[-3000:]
    rep = load_report(only_run_dir(out))
    kmax = rep["points"][0]["summary"]["kernel"]["max"]
    assert kmax > 10
    assert "PASS  generated == kernel  value " in p.stdout
    assert f"FAIL  kernel.max < 10  value {kmax}  (points[0].kernel.max: {kmax} < 10 is false)" in p.stdout
    assert "swarmscope: 1 check(s) failed: kernel.max < 10" in p.stderr
    assert rep["config"]["checks"] == ["generated == kernel", "kernel.max < 10"]
    assert [(c["check"], c["source"], c["ok"]) for c in rep["checks"]] == [
        ("generated == kernel", f"{f}:3", True),
        ("kernel.max < 10", "--check", False),
    ]
    assert rep["checks"][1]["values"] == [kmax]
    html = (only_run_dir(out) / "report.html").read_text()
    assert "<h2>checks</h2>" in html and "points[0].kernel.max: " in html

    loose = tmp_path / "loose"
    p = run_cli("run", str(f), *SMALL, "--out", str(loose), "--check", "kernel.max < 100000000")
    assert p.returncode == 0, p.stderr[-3000:]
    assert [c["ok"] for c in load_report(only_run_dir(loose))["checks"]] == [True, True]
    assert "checks: 2 passed, 0 failed" in p.stdout


@pytest.mark.slow
@root
@pytest.mark.root
@pytest.mark.bpf
def test_a_run_with_worker_errors_exits_5_before_its_failed_checks(tmp_path: pathlib.Path) -> None:
    """A worker that cannot make the load flags each window ``worker-error``; the run exited 0.
    It exits 5, ahead of a failed check (99). Here the worker's TMPDIR is private to root (0700,
    as /root is): load stress-ng runs as nobody, who cannot reach the copy of stress-ng the
    worker keeps there, so the kernel refuses each burst's exec (EACCES)."""
    out, private = tmp_path / "out", tmp_path / "private"
    private.mkdir(mode=0o700)
    p = run_cli(
        "run", "scenarios/exec_storm.yaml", "--set", "nodes=1", "--set", "iterations=2",
        "--set", "burst_s=1", "--set", "load=stress-ng", "--set", "tracer=none",
        "--out", str(out), "--check", "kernel.max > 10", env={"TMPDIR": str(private)},
    )  # fmt: skip
    assert p.returncode == 5, p.stderr[-3000:]
    rep = load_report(only_run_dir(out))
    # The copy's path is the worker's: its mkdtemp dir and its per-process comm tag (random).
    m = re.search(r"worker-error:n1:(.*?) at point", p.stderr)
    assert m is not None, p.stderr[-3000:]
    why = m.group(1)
    copy = rf"{re.escape(str(private))}/swarmscope-stressng-\w{{8}}/(s[0-9a-f]{{4}}-n1)/\1"
    assert re.fullmatch(rf"cannot start stress-ng in node n1: \[Errno 13\] Permission denied: '{copy}'", why)
    assert [it["flags"] for it in rep["points"][0]["iterations"]] == [[f"worker-error:n1:{why}"]] * 2
    assert f"swarmscope: worker-error:n1:{why} at point(s) 0 — a worker could not make the load" in p.stderr
    assert "FAIL  kernel.max > 10" in p.stdout  # the check is still evaluated and shown
    assert "Traceback" not in p.stderr  # the burst's refusal is the flag, not a greenlet's traceback


def _locust(out: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(BIN / "locust"), "-f", "scenarios/exec_storm.py", "--headless", "-u", "2", "-r", "2",
           "-t", "3s", "--ss-out", str(out), "--ss-burst-s", "0.3", *args]  # fmt: skip
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@root
@pytest.mark.root
@pytest.mark.bpf
def test_locust_exit_code_follows_the_checks(tmp_path: pathlib.Path) -> None:
    p = _locust(tmp_path / "a", "--check", "kernel > 5", "--check", "generated < 5")
    assert p.returncode == EXIT_CODE, p.stderr[-3000:]
    rep = load_report(only_run_dir(tmp_path / "a"))
    gen = rep["points"][0]["totals"]["generated"]
    assert f"FAIL  generated < 5  value {gen}  (points[0].generated: {gen} < 5 is false)" in p.stderr
    assert [(c["check"], c["ok"]) for c in rep["checks"]] == [("kernel > 5", True), ("generated < 5", False)]
    p = _locust(tmp_path / "b", "--check", "kernel > 5", "--check", "generated > 5")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "checks: 2 passed, 0 failed" in p.stderr
    # an invalid check stops Locust before it starts, naming it
    p = _locust(tmp_path / "c", "--check", "generated <")
    assert p.returncode == 2, p.stderr[-3000:]
    assert "--check: checks: 'generated <': expected a number or a report path at column 12" in p.stderr


def _shape_checks(kind_name: str, *texts: str) -> list:
    from swarmscope.kinds import get_kind
    from swarmscope.kinds.checks import load_checks

    kind = get_kind(kind_name)
    checks, _ = load_checks(kind, kind.schema.load(env={}), list(texts))
    return checks


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("exec_storm", "generated == kernel"),
        ("exec_storm", "loss_ratio.max < 0.01"),
        ("exec_storm", "kernel.p50 > 1000"),
        ("exec_storm", "points[*].iterations[*].tracer_lost == 0"),
        ("exec_storm", "exec_storm.rate_per_node > 0"),
        ("ingress_flood", "steps[*].latency_ms.p99 < 200"),
        ("ingress_flood", "ingress.successes == ingress.server_requests"),
        ("neighbor_writes", "neighbors.per_neighbor_us @ 1000000 < 1.0"),
        ("flow_storm", "flow_storm.points[*].kernel == flow_storm.points[*].generated"),
        ("ebpf_cost", "generated > 0"),
    ],
)
def test_documented_paths_pass_the_check_before_the_run(kind: str, text: str) -> None:
    (c,) = _shape_checks(kind, text)
    assert c.text == text


@pytest.mark.parametrize(
    ("kind", "text", "why"),
    [
        ("exec_storm", "lossratio.max < 0.01",
         "the exec_storm report has no 'lossratio'; did you mean loss_ratio?"),
        ("exec_storm", "steps[*].latency_ms.p99 < 200",
         "the exec_storm report has no 'steps' ('steps' is in ingress_flood reports, not this kind's)"),
        ("ingress_flood", "ingress.succeses > 0", "ingress has no 'succeses'; did you mean successes?"),
        ("exec_storm", "loss_ratio.maxx < 1", "points[0].loss_ratio has no 'maxx'; did you mean max?"),
    ],
)  # fmt: skip
def test_unknown_paths_are_refused_before_the_run(kind: str, text: str, why: str) -> None:
    with pytest.raises(ConfigError) as e:
        _shape_checks(kind, text)
    assert str(e.value.problems[0]) == f"--check: checks: {text!r}: {why} (docs/report-json.md)"


@pytest.mark.slow
def test_a_misspelt_check_stops_the_run_before_it_starts(tmp_path: pathlib.Path) -> None:
    """Issue 28: `--check 'lossratio.max < 0.01'` ran the whole sweep, then exited 99."""
    out = tmp_path / "results"
    p = run_cli("run", "scenarios/exec_storm.yaml", "--out", str(out), "--check", "lossratio.max < 0.01")
    assert p.returncode == 2
    assert p.stderr == (
        "swarmscope: 1 problem(s) in the configuration:\n  - --check: checks: 'lossratio.max < 0.01': "
        "the exec_storm report has no 'lossratio'; did you mean loss_ratio? (docs/report-json.md)\n"
    )
    assert not out.exists()  # nothing ran
