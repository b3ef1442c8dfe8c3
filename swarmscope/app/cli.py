"""The ``swarmscope`` command: one sub-command per job, each registered by its own module.

    swarmscope run scenarios/exec_storm.yaml --set nodes=2,5 --set iterations=30
    swarmscope report results/<run-id>
    swarmscope probe --once --seconds 5

A sub-command module exposes ``register(subparsers)``, which adds its parser and sets
``func(args) -> int``. Heavy imports (BCC, Locust, matplotlib) happen inside ``func`` so
``swarmscope --help`` stays fast. Our own errors print as one clear message, not a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys

from swarmscope import __version__
from swarmscope.core.errors import SwarmscopeError

# name -> module with register(subparsers). Order is the order in --help.
COMMAND_MODULES = [
    "swarmscope.app.commands.run",
    "swarmscope.app.commands.roles",
    "swarmscope.probes.cli",
    "swarmscope.controller.relay_cli",
    "swarmscope.probes.top_ebpf",
    "swarmscope.app.commands.report",
    "swarmscope.controller.trace_push",
    "swarmscope.controller.runs_cli",
    "swarmscope.controller.tracers.selfcheck",
]


# Long-lived node processes: parsed with their own module only, so the controller's imports
# (fleet, tracers, gevent, prometheus parser: ~10 MiB of RSS) never load into every node's probe.
LEAN_COMMANDS = {
    "probe": "swarmscope.probes.cli",
    "node-key": "swarmscope.probes.cli",
    "relay": "swarmscope.controller.relay_cli",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every sub-command, or with ``only`` that command module's."""
    ap = argparse.ArgumentParser(
        prog="swarmscope", description="Distributed load-and-measure with eBPF ground truth."
    )
    ap.add_argument("--version", action="version", version=f"swarmscope {__version__}")
    ap.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMAND_MODULES if only is None else [only]:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name == mod:
                continue  # a role not built yet
            raise
        m.register(sub)
    return ap


# Sub-commands that run Locust/gevent: patch before grpc, ssl or threads are imported.
GEVENT_COMMANDS = {"run", "controller", "worker"}


def _exit_starting(sig: int, _frame: object) -> None:
    from swarmscope.app.lifecycle import STOPS

    STOPS.append(sig)
    print(f"swarmscope: {signal.Signals(sig).name} while starting: exiting", file=sys.stderr)
    sys.exit(0)  # in the main greenlet: gevent's hub passes SystemExit on to it


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if GEVENT_COMMANDS & set(words[:3]):  # every kind runs its windows through Locust
        # Until the run's own stop takes over (Locust's init: swarmscope.app.plugin; `run`'s
        # stop_on_signals), SIGTERM exits: nothing of the run exists yet. Python's default would
        # not do for a pod's PID 1, which the kernel spares the signals it has no handler for: the
        # chart's worker, retrying its connect to an idle controller (60 tries, 5 s apart),
        # ignored the kubelet's stop and lived out the pod's grace period (30 s).
        signal.signal(signal.SIGTERM, _exit_starting)
        from gevent import monkey

        monkey.patch_all()
    ap = build_parser(LEAN_COMMANDS.get(words[0]) if words else None)
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        ap.print_help()
        return 2
    try:
        rc = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe fails here, inside the try, not at interpreter exit
        return rc
    except SwarmscopeError as e:
        print(f"swarmscope: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("swarmscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`swarmscope ls --json | head`): stop quietly, like any Unix
        # tool killed by SIGPIPE (exit 141), and keep Python from failing again at its own
        # final flush of the closed stdout.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
