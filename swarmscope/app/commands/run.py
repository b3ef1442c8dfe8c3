"""``swarmscope run``: run a scenario file (a sweep) on this machine and write its report.

    swarmscope run scenarios/exec_storm.yaml --set nodes=2,5 --set iterations=30 --out results/
    swarmscope run scenarios/exec_storm.yaml --explain     # every option, its value and source

``--set KEY=VALUE`` overrides any key of the scenario file (a list is comma-separated); the
precedence is defaults < file < SWARMSCOPE_* env < --set. Every problem in the configuration
is reported at once, with where it came from.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

# Exit codes (docs/checks.md, "Exit codes"): 4 harness mismatch, 1 failed, 5 worker errors, 99
# failed checks, in that order; 2 and 3 are configuration and set-up errors, 130 a signal.
WORKER_ERROR_EXIT = 5


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run a scenario file (sweep, probes, tracer, report)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario_file", nargs="?", help="scenario YAML, e.g. scenarios/exec_storm.yaml")
    p.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="override a key"
    )
    p.add_argument("--out", help="results directory (same as --set out=DIR)")
    p.add_argument(
        "--check",
        dest="checks",
        action="append",
        default=[],
        metavar="EXPR",
        help="a pass/fail check over report.json, added to the file's checks: "
        "e.g. 'loss_ratio.max < 0.01'; a failed check exits 99",
    )
    p.add_argument(
        "--explain", action="store_true", help="print every option with its value and source, then exit"
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from swarmscope.kinds import load_scenario

    sets = list(args.sets) + ([f"out={args.out}"] if args.out else [])
    kind, cfg = load_scenario(args.scenario_file, sets)
    from swarmscope.controller.checks import EXIT_CODE, failed, render_results
    from swarmscope.kinds.checks import load_checks

    # Invalid ones, or paths the kind's report lacks: a ConfigError (exit 2) before the run.
    checks, cfg = load_checks(kind, cfg, args.checks)  # cfg with every check: the report shows them
    if args.explain:
        _explain(kind, cfg)
        return 0
    from swarmscope.app.run import run_scenario

    report = run_scenario(kind, cfg, checks=checks)
    if report is None:
        return 1
    from swarmscope.app.console import kind_summary
    from swarmscope.controller.report import render_console

    print(render_console(report))
    summary = kind_summary(report)  # the ingress steps / neighbor points, one screen
    if summary:
        print(summary)
    if checks:
        print(render_results(report.get("checks") or []))
    bad = [f for f in report.get("flags", []) if f["flag"] == "harness-mismatch"]
    if bad:
        print(
            f"swarmscope: {bad[0]['message']} — generated != kernel: the harness is wrong, see the report",
            file=sys.stderr,
        )
        return 4
    if report.get("status") == "failed":  # e.g. no kernel count anywhere: what was kept is reported
        print("swarmscope: the run failed (status failed): see the report's flags", file=sys.stderr)
        return 1
    # A window whose worker failed to make its load measured something else than the scenario
    # asked for: its figures (and any check over them) cannot be read as the system's.
    worker_errors = [f for f in report.get("flags", []) if f["flag"].startswith("worker-error:")]
    if worker_errors:
        print(
            f"swarmscope: {worker_errors[0]['message']} — a worker could not make the load the "
            f"scenario asked for ({len(worker_errors)} worker error(s), see the report's flags)",
            file=sys.stderr,
        )
        return WORKER_ERROR_EXIT
    bad_checks = failed(report.get("checks"))
    if bad_checks:
        names = "; ".join(c["check"] for c in bad_checks)
        print(f"swarmscope: {len(bad_checks)} check(s) failed: {names}", file=sys.stderr)
        return EXIT_CODE
    return 0


def run_file(scenario_file: str, sets: list[str]) -> int:
    """``swarmscope run SCENARIO --set ...`` (``swarmscope controller --sweep`` runs this)."""
    return _run(
        argparse.Namespace(scenario_file=scenario_file, sets=sets, out=None, checks=[], explain=False)
    )


def _explain(kind: Any, cfg: Any) -> None:
    """Every option of the run with its value and source, then the probe programs it opens and
    their params (the kind sets the per-window ones through OpenWindow.options)."""
    from swarmscope.probes.programs.base import DESCRIPTIONS, program_params, window_params

    print(f"scenario kind {kind.name} (metric {kind.metric})")
    for key, f in kind.schema.fields.items():
        print(f"{key:<24} = {getattr(cfg, key)!r:<30} ({cfg.sources[key]}; env {f.env_var})\n    {f.help}")
    try:
        programs = kind.programs(cfg, {})
    except KeyError:  # a kind whose options come from its workers' set-up (known at run time)
        programs = {}
    if not programs:
        return
    print("\nprobe programs of each window (per-window params are set by the kind at run time):")
    for name, opts in programs.items():
        print(f"  {name}: {DESCRIPTIONS.get(name, '')}")
        per_window = window_params(name)
        for f in program_params(name):
            scope = "per window" if f.key in per_window else f"start-up, env {f.env_var}"
            val = opts.get(f.key.split(".", 1)[1], f.default)
            print(f"    {f.key:<26} = {val!r:<20} ({scope})\n        {f.help}")
