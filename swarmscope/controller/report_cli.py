"""``swarmscope report``: re-render a stored run's report (JSON, HTML + plots, console table).

    swarmscope report results/<run_id>                      # DB: results/swarmscope.sqlite
    swarmscope report results/<run_id> --format console     # only print the per-node table
    swarmscope report some/dir --db other/swarmscope.sqlite --run-id <run_id>

The run id is the run directory's name unless ``--run-id`` is given; the report files are
written into RUN_DIR. Caveat: it reads the store only, so it works while a run is still
writing (the report then has status "running").
"""

from __future__ import annotations

import argparse
import os
import sys

from swarmscope.core.errors import ResultsError


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "report",
        help="re-render a run's report from the results store",
        description="Re-render report.json / report.html / the console table of a stored run.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run's directory, <out>/<run_id>")
    p.add_argument("--db", help="results store (default: RUN_DIR/../swarmscope.sqlite)")
    p.add_argument("--run-id", help="run id (default: the name of RUN_DIR)")
    p.add_argument(
        "--format",
        default="html,json,console",
        help="comma-separated: html, json, console (default: all three)",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    # Imported here: the report pulls in the store now and matplotlib when drawing.
    from swarmscope.controller.report import FORMATS, render_console, write_report
    from swarmscope.controller.store import DB_NAME, ResultStore

    run_dir = os.path.abspath(args.run_dir)
    run_id = args.run_id or os.path.basename(run_dir.rstrip(os.sep))
    formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        what = ", ".join(bad) or "(empty)"
        raise ResultsError(f"--format: unknown {what}; choose from {', '.join(FORMATS)}")
    db = args.db or os.path.join(os.path.dirname(run_dir), DB_NAME)
    if not os.path.isfile(db):
        raise ResultsError(f"no results store at {db} (give --db PATH)")
    with ResultStore(db) as store:
        if not store.has_run(run_id):
            known = store.run_ids()
            hint = f"; stored runs: {', '.join(known[-5:])}" if known else "; it holds no runs"
            raise ResultsError(f"run {run_id!r} is not in {db}{hint}")
        report = write_report(store, run_id, run_dir, tuple(f for f in formats if f != "console"))
    if "console" in formats:
        print(render_console(report))
    written = [n for f, n in (("json", "report.json"), ("html", "report.html")) if f in formats]
    if written:
        print(f"swarmscope: wrote {', '.join(os.path.join(run_dir, n) for n in written)}", file=sys.stderr)
    return 0
