"""``swarmscope report``: the controller's report command, with every kind's section renderers.

    swarmscope report results/<run_id>

The command itself is ``controller.report_cli``; this app-layer wrapper only fills the report's
renderer registry from the code's own kinds first (``kinds.register_all_renderers``), so a
re-rendered report draws the kinds' sections as the run did. Nothing read from the results
store chooses code (issue 18, finding 1).
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    from swarmscope.controller import report_cli

    p = report_cli.register(sub)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from swarmscope.controller import report_cli
    from swarmscope.kinds import register_all_renderers

    register_all_renderers()
    return report_cli.run(args)
