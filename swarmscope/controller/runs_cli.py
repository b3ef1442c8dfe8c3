"""``swarmscope ls`` and ``swarmscope compare``: the runs of a results store, and two side by side.

    swarmscope ls                                   # runs in results/swarmscope.sqlite
    swarmscope ls --out other/ --json
    swarmscope compare RUN_A RUN_B                  # ids in the same store, or run directories
    swarmscope compare results/<a> other/<b> --json --plot cmp.png

``compare`` prints each figure of both runs (mean over iterations, min..max), the change and
a flag where the change is beyond both runs' own spread (controller.compare), and writes a plot
(default ``<out>/compare-<A>-<B>.png``). Reads the store only (works mid-run: status "running").
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from swarmscope.core.errors import ResultsError
from swarmscope.core.printable import printable


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("ls", help="list the runs of a results store", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--out", default="results", help="results directory (default: results)")
    p.add_argument("--db", help="results store (default: OUT/swarmscope.sqlite)")
    p.add_argument("--json", action="store_true", help="JSON for scripts")
    p.set_defaults(func=_ls)
    c = subparsers.add_parser("compare", help="compare two runs side by side", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    c.add_argument("run_a", metavar="RUN_A", help="run id (in --out's store) or run directory")
    c.add_argument("run_b", metavar="RUN_B", help="run id (in --out's store) or run directory")
    c.add_argument("--out", default="results", help="results directory of run ids (default: results)")
    c.add_argument("--db", help="results store of run ids (default: OUT/swarmscope.sqlite)")
    c.add_argument("--json", action="store_true", help="JSON for scripts")
    c.add_argument("--plot", help="write the plot here (default: OUT/compare-A-B.png)")
    c.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    c.set_defaults(func=_compare)


def _db(args: argparse.Namespace) -> str:
    from swarmscope.controller.store import DB_NAME

    db = args.db or os.path.join(args.out, DB_NAME)
    if not os.path.isfile(db):
        raise ResultsError(f"no results store at {db} (give --out DIR or --db PATH)")
    return db


def _report(ref: str, args: argparse.Namespace) -> dict[str, Any]:
    """A run by id (in the --out/--db store) or by its directory (its parent's store)."""
    from swarmscope.controller.report import build_report
    from swarmscope.controller.store import DB_NAME, ResultStore

    if os.path.isdir(ref):
        run_dir = os.path.abspath(ref).rstrip(os.sep)
        db, run_id = os.path.join(os.path.dirname(run_dir), DB_NAME), os.path.basename(run_dir)
        if not os.path.isfile(db):
            raise ResultsError(f"no results store at {db} for run directory {ref}")
    else:
        db, run_id = _db(args), ref
    with ResultStore(db) as store:
        if not store.has_run(run_id):
            known = [r for r in store.run_ids() if r.startswith(run_id)]
            if len(known) != 1:
                hint = f"; matches: {', '.join(known)}" if known else ""
                raise ResultsError(f"run {run_id!r} is not in {db}{hint}")
            run_id = known[0]  # a unique prefix is enough, as with git
        return build_report(store, run_id)


def _ls(args: argparse.Namespace) -> int:
    from swarmscope.controller.compare import dumps, list_runs, render_list
    from swarmscope.controller.report import build_report
    from swarmscope.controller.store import ResultStore

    with ResultStore(_db(args)) as store:
        rows = list_runs([build_report(store, r) for r in store.run_ids()])
    print(dumps(rows) if args.json else printable(render_list(rows)))
    return 0


def _compare(args: argparse.Namespace) -> int:
    from swarmscope.controller.compare import compare, compare_plot, dumps, render_compare

    a, b = _report(args.run_a, args), _report(args.run_b, args)
    if a.get("scenario") != b.get("scenario"):  # figures of two kinds share names, not meaning
        raise ResultsError(
            f"{a['run_id']} ({a.get('scenario')}) and {b['run_id']} ({b.get('scenario')}) are runs "
            "of two kinds: their figures do not compare. Compare two runs of one kind (`swarmscope ls` shows "
            "each run's scenario)."
        )
    cmp = compare(a, b)
    if not args.no_plot:
        path = args.plot or os.path.join(args.out, f"compare-{a['run_id']}-{b['run_id']}.png")
        plot = compare_plot(cmp, os.path.basename(path))
        try:
            with open(path, "wb") as fh:
                fh.write(plot.png)
        except OSError as e:
            raise ResultsError(f"cannot write the plot {path}: {e}") from e
        cmp["plot"] = os.path.abspath(path)
    print(dumps(cmp) if args.json else printable(render_compare(cmp)))
    if not args.json and "plot" in cmp:
        print(f"swarmscope: plot in {cmp['plot']}", file=sys.stderr)
    return 0
