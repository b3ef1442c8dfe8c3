"""Checks in ``locust -f`` runs: ``--check EXPR`` (and ``--ss-checks``/the scenario file's
``checks:``) decide Locust's exit code, as k6 thresholds decide k6's.

    locust -f scenarios/exec_storm.py --headless -t 10s --check 'generated == kernel'
    # prints each check with its value at the end; exit code 99 when one failed

Wired by swarmscope.app.plugin: :func:`install` adds the option, :func:`load` parses the checks
before anything starts (an invalid one is a ConfigError naming its file line or ``--check``),
:func:`attach` prints the results when the report is written and sets
``environment.process_exit_code`` (Locust's documented way for a plug-in to set it).
"""

from __future__ import annotations

import sys
from typing import Any

from locust import events

from swarmscope.controller.checks import EXIT_CODE, Check, failed, render_results
from swarmscope.kinds.checks import load_checks

_DONE: list[bool] = []


def install() -> None:
    """Add ``--check`` to Locust's parser (once per process)."""
    if _DONE:
        return
    _DONE.append(True)
    events.init_command_line_parser.add_listener(_add_option)


def _add_option(parser: Any, **_: Any) -> None:
    parser.add_argument(
        "--check",
        dest="ss_check",
        action="append",
        default=[],
        metavar="EXPR",
        help="swarmscope: a pass/fail check over report.json, e.g. 'loss_ratio.max < 0.01' "
        f"(added to the scenario's checks; a failed check makes Locust exit {EXIT_CODE})",
    )


def load(cfg: Any, options: Any, kind: Any) -> tuple[list[Check], Any]:
    """The run's checks, parsed and located, and ``cfg`` with all of them (the report shows them)."""
    return load_checks(kind, cfg, list(getattr(options, "ss_check", None) or []))


def attach(environment: Any, proc: Any, checks: list[Check]) -> None:
    """Hold ``proc``'s run to ``checks``: results printed, the exit code set when one fails."""
    proc.checks = list(checks)
    if not checks:
        return

    def on_report(report: dict[str, Any], **_: Any) -> None:
        results = report.get("checks") or []
        print(render_results(results), file=sys.stderr)
        if failed(results):
            environment.process_exit_code = EXIT_CODE

    proc.events.report_written.add_listener(on_report)
