"""swarmscope's Locust plug-in: options, roles per runner, and the messages between them.

Importing this module (every locustfile in scenarios/ does) registers swarmscope on Locust's
global events, so ``locust -f scenarios/exec_storm.py`` behaves as Locust users expect —
headless or web UI, ``--master``/``--worker`` — and additionally:

- at test start the controller opens a measurement window on the probes (and the tracer);
- users burst on their nodes; each worker counts exactly what it generated;
- at test stop workers send their counts, the controller closes the window, reconciles and
  prints generated / kernel / reported per node; at quit the report is written.

Every schema option of the scenario is also a Locust option ``--ss-<key>`` (env
``SWARMSCOPE_<KEY>``), e.g. ``--ss-nodes 2 --ss-tracer bpftrace``.

Messages (Locust custom messages, worker ↔ master; local calls in a single process):
``swarmscope:nodes`` (worker → master: its nodes), ``swarmscope:announce`` (master → workers:
send your nodes), ``swarmscope:window`` (master → workers: the window bursts count into),
``swarmscope:burst`` (master → workers: burst now on these nodes) and
``swarmscope:generated`` (worker → master: exact counts per node for a window).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from locust import events
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from swarmscope.controller.model import PointInfo
from swarmscope.errors import SwarmscopeError

log = logging.getLogger(__name__)

MSG_NODES = "swarmscope:nodes"
MSG_ANNOUNCE = "swarmscope:announce"
MSG_WINDOW = "swarmscope:window"
MSG_STOP = "swarmscope:stop"
MSG_BURST = "swarmscope:burst"
MSG_GENERATED = "swarmscope:generated"

SCENARIO = os.environ.get("SWARMSCOPE_SCENARIO_KIND", "exec_storm")


def _option_name(key: str) -> str:
    return "--ss-" + key.replace("_", "-").replace(".", "-")


@events.init_command_line_parser.add_listener
def _add_options(parser: Any, **_: Any) -> None:
    from swarmscope.controller.scenario import get_kind

    group = parser.add_argument_group("swarmscope", "swarmscope options (see `swarmscope run --help`)")
    group.add_argument(
        "--ss-scenario-file", default=None, help="swarmscope scenario YAML to read options from"
    )
    for f in get_kind(SCENARIO).schema.fields.values():
        if f.key == "scenario":
            continue
        group.add_argument(
            _option_name(f.key),
            dest="ss_" + f.key.replace(".", "_"),
            default=None,
            help=f"{f.help} [{f.env_var}]",
        )


def _config(options: Any) -> tuple[Any, Any]:
    from swarmscope.controller.scenario import get_kind

    kind = get_kind(SCENARIO)
    sets = []
    for key in kind.schema.fields:
        v = getattr(options, "ss_" + key.replace(".", "_"), None) if options is not None else None
        if v is not None:
            sets.append(f"{key}={v}")
    path = getattr(options, "ss_scenario_file", None) if options is not None else None
    return kind, kind.schema.load(file=path, sets=sets)


def register_messages(proc: Any, runner: Any) -> None:
    """Wire the swarmscope messages of ``proc``'s roles onto a Locust runner."""
    if proc.worker is not None:
        worker = proc.worker

        def on_burst(environment: Any, msg: Any, **_: Any) -> None:
            d = msg.data
            t0 = time.perf_counter()
            per_node = worker.burst(
                d["window_id"],
                d["nodes"],
                float(d["duration_s"]),
                int(d["concurrency"]),
                float(d.get("rate", 0.0)),
            )
            elapsed_ms = (time.perf_counter() - t0) * 1000
            for node, tally in per_node.items():
                environment.events.request.fire(
                    request_type="EXEC",
                    name=f"burst {node}",
                    response_time=elapsed_ms,
                    response_length=int(tally["generated"]),
                    exception=SwarmscopeError(tally["errors"][0]) if tally["errors"] else None,
                    context={},
                )
            runner.send_message(MSG_GENERATED, {"window_id": d["window_id"], "per_node": per_node})

        def on_announce(environment: Any, msg: Any, **_: Any) -> None:
            runner.send_message(MSG_NODES, {"nodes": worker.describe()})

        def on_window(environment: Any, msg: Any, **_: Any) -> None:
            worker.current_window = msg.data["window_id"]

        def on_stop(environment: Any, msg: Any, **_: Any) -> None:
            if worker.current_window == msg.data["window_id"]:
                environment.runner.stop()  # fires test_stop here, which sends the counts

        runner.register_message(MSG_BURST, on_burst, concurrent=True)
        if not isinstance(runner, LocalRunner):
            runner.register_message(MSG_ANNOUNCE, on_announce)
            runner.register_message(MSG_WINDOW, on_window)
            runner.register_message(MSG_STOP, on_stop)
    if proc.controller is not None:
        ctl = proc.controller

        def on_nodes(environment: Any, msg: Any, **_: Any) -> None:
            ctl.add_nodes(msg.node_id, msg.data["nodes"])

        def on_generated(environment: Any, msg: Any, **_: Any) -> None:
            ctl.add_generated(msg.data["window_id"], msg.node_id, msg.data["per_node"])

        runner.register_message(MSG_GENERATED, on_generated)
        if not isinstance(runner, LocalRunner):
            runner.register_message(MSG_NODES, on_nodes)


# -- free-running tests (locust -f) --------------------------------------------------------------
class _FreeRun:
    """State of a plain Locust test: each start/stop of the test is one window of point 0."""

    def __init__(self, proc: Any):
        self.proc = proc
        self.point: PointInfo | None = None
        self.iteration = 0
        self.window: Any = None


@events.init.add_listener
def _on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    from swarmscope.process import SwarmscopeProcess

    if runner is None:
        return
    kind, cfg = _config(environment.parsed_options)
    role = (
        "local"
        if isinstance(runner, LocalRunner)
        else "master"
        if isinstance(runner, MasterRunner)
        else "worker"
    )
    sim = int(cfg["nodes"][0]) if not os.environ.get("NODE_NAME") else 0
    prefix = "" if role == "local" else f"p{os.getpid()}"
    try:
        proc = SwarmscopeProcess.make(cfg, kind, role=role, sim_nodes=sim, node_prefix=prefix)
    except SwarmscopeError as e:
        print(f"swarmscope: {e}", file=sys.stderr)
        runner.quit()
        sys.exit(e.exit_code)
    environment.swarmscope = proc
    environment.swarmscope_free = _FreeRun(proc)
    if not isinstance(runner, WorkerRunner):
        # Ctrl-C as Locust's SIGTERM: a plain KeyboardInterrupt was seen to get lost in web-UI
        # mode (it can land in a greenlet of grpc's gevent integration); SIGTERM is Locust's
        # orderly shutdown (quitting fires, the report is written).
        import signal

        import gevent

        gevent.signal_handler(signal.SIGINT, lambda: os.kill(os.getpid(), signal.SIGTERM))
    register_messages(proc, runner)
    if isinstance(runner, WorkerRunner):
        runner.send_message(MSG_NODES, {"nodes": proc.worker.describe()})


@events.test_start.add_listener
def _on_test_start(environment: Any, **_: Any) -> None:
    free: _FreeRun | None = getattr(environment, "swarmscope_free", None)
    if free is None or free.proc.controller is None:
        return
    proc, runner = free.proc, environment.runner
    if proc.cfg["probe"] == "external":
        proc.fleet.wait_for_probes(proc.cfg["expect_probes"], proc.cfg["probe_timeout_s"])
    if isinstance(runner, MasterRunner):
        runner.send_message(MSG_ANNOUNCE, {})
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(proc.controller.nodes) < runner.worker_count:
            time.sleep(0.05)
    names = sorted(proc.controller.nodes)
    if free.point is None:
        free.point = PointInfo(0, {"nodes": len(names)}, 0)
        proc.events.point_started.fire(run=proc.run, point=free.point)
    free.iteration += 1
    free.point.iterations = free.iteration
    free.window = proc.controller.open_window(free.point, free.iteration, names)
    if proc.worker is not None:
        proc.worker.current_window = free.window.window_id
    else:
        runner.send_message(MSG_WINDOW, {"window_id": free.window.window_id})


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_: Any) -> None:
    free: _FreeRun | None = getattr(environment, "swarmscope_free", None)
    if free is None:
        return
    proc, runner = free.proc, environment.runner
    if proc.worker is not None and proc.worker.current_window:
        window_id = proc.worker.current_window
        proc.worker.current_window = ""
        proc.worker.stop_inflight(window_id)
        runner.send_message(MSG_GENERATED, {"window_id": window_id, "per_node": proc.worker.take(window_id)})
    if proc.controller is not None and free.window is not None and free.point is not None:
        if isinstance(runner, MasterRunner):
            # A master that quits (-t, Ctrl-C) stops without telling workers to stop first:
            # ask them, so their users stop and they send what they generated.
            runner.send_message(MSG_STOP, {"window_id": free.window.window_id})
        proc.controller.close_window(free.window, free.point)
        free.window = None
        from swarmscope.controller.report import build_report, render_console

        print(render_console(build_report(proc.store, proc.run.run_id)), file=sys.stderr)


@events.quitting.add_listener
def _on_quitting(environment: Any, **_: Any) -> None:
    free: _FreeRun | None = getattr(environment, "swarmscope_free", None)
    if free is None:
        return
    if free.point is not None and free.proc.run is not None:
        free.proc.events.point_done.fire(
            run=free.proc.run, point=free.point, results=list(free.proc.controller.results)
        )
    report = free.proc.close("ok")
    if report is not None and free.proc.run is not None:
        print(f"swarmscope: report in {free.proc.run.run_dir}", file=sys.stderr)
