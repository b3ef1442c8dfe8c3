"""swarmscope's Locust plug-in: options from the kind's schema, roles per runner, messages.

    # scenarios/exec_storm.py (every locustfile in scenarios/ is such a shim)
    from swarmscope.app import plugin
    from swarmscope.workers.exec_user import ExecStormUser
    plugin.install("exec_storm")

``install`` registers swarmscope on Locust's events for one scenario kind, so
``locust -f scenarios/<kind>.py`` behaves as Locust users expect (headless or web UI,
``--master``/``--worker``) and additionally: at test start the controller sets up the workers
(the kind's driver, made from the config the master sends: workers read no scenario file) and
opens a measurement window on the probes; users count what they generate into it; at test stop
workers send their exact results, the controller closes the window and reconciles with the
kind's rule; at quit the report is written.

Every option of the kind's schema is a Locust option ``--ss-<key>`` (help shows its env var
``SWARMSCOPE_<KEY>``), generated from the schema, plus ``--ss-scenario-file``. Caveat: Locust's
``--help`` cannot list them (it is answered before the locustfile is imported, docs/doors.md):
``swarmscope run scenarios/<kind>.yaml --explain`` does. The messages are
in swarmscope.core.messages; ``register_messages`` wires them for ``swarmscope run`` too.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from gevent import sleep as gevent_sleep
from locust import events
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from swarmscope.controller.model import PointInfo
from swarmscope.controller.tables import THREE_NUMBER_COLUMNS
from swarmscope.core import messages as M
from swarmscope.core.errors import SwarmscopeError
from swarmscope.kinds import scenario_text
from swarmscope.workers import spans as worker_spans

log = logging.getLogger(__name__)

# "kind": the kind this process's locustfile installed (None: a worker that learns it from the
# master's swarmscope:setup); "expect": the kind `swarmscope worker --kind` asked for.
_INSTALLED: dict[str, Any] = {}


def option_name(key: str) -> str:
    return "--ss-" + key.replace("_", "-").replace(".", "-")


def option_dest(key: str) -> str:
    return "ss_" + key.replace(".", "_").replace("-", "_")


def install(kind_name: str | None) -> None:
    """Register swarmscope's Locust hooks for scenario kind ``kind_name`` (once per process);
    None: a worker that takes its kind from the master (``swarmscope worker``)."""
    from swarmscope.kinds import get_kind

    if "kind" in _INSTALLED:
        have = _INSTALLED["kind"].name if _INSTALLED["kind"] is not None else None
        if have != kind_name:
            raise SwarmscopeError(f"one locustfile, one kind: {have or 'the master-given kind'} installed")
        return
    _INSTALLED["kind"] = get_kind(kind_name) if kind_name else None
    from swarmscope.app import locust_checks, webui, workerauth

    workerauth.install()  # with a worker token set: Locust's master port admits only its workers
    if kind_name is not None:  # a worker without one has no web UI and no options (the master's)
        locust_checks.install()
        webui.install(kind_name)
        events.init_command_line_parser.add_listener(_add_options)
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stop.add_listener(_on_test_stop)
    events.quitting.add_listener(_on_quitting)


def _add_options(parser: Any, **_: Any) -> None:
    kind = _INSTALLED["kind"]
    group = parser.add_argument_group("swarmscope", f"swarmscope options of scenario kind {kind.name}")
    group.add_argument(
        "--ss-scenario-file", default=None, help="swarmscope scenario YAML to read options from"
    )
    for f in kind.schema.fields.values():
        if f.key == "scenario":
            continue
        group.add_argument(
            option_name(f.key), dest=option_dest(f.key), default=None, help=f"{f.help} [{f.env_var}]"
        )


def _config(options: Any) -> Any:
    """The kind's config: defaults < --ss-scenario-file < SWARMSCOPE_* env < --ss-* options."""
    kind = _INSTALLED["kind"]
    sets = [f"scenario={kind.name}"]
    for key in kind.schema.fields:
        v = getattr(options, option_dest(key), None) if options is not None else None
        if v is not None and key != "scenario":
            sets.append(f"{key}={v}")
    path = getattr(options, "ss_scenario_file", None) if options is not None else None
    labels = {key: option_name(key) for key in kind.schema.fields}  # a problem names --ss-<key>
    text = scenario_text(path) if path else None
    return kind.schema.load(file=path, sets=sets, text=text, set_labels=labels)


def expect_kind(name: str) -> None:
    """``swarmscope worker --kind NAME``: refuse a master that runs another kind."""
    _INSTALLED["expect"] = name


def _learn_kind(environment: Any, proc: Any, name: str) -> None:
    """The kind of the master's swarmscope:setup, on a worker: checked against the one this
    worker was started for (its locustfile's, or ``--kind``); a worker that had none takes it,
    with what Locust would have taken from the kind's locustfile (scenarios/<kind>.py) had it
    started on it: its User classes (the master's spawn messages name them), its shape, and
    its init hooks, run now (the ingress flood's step sync registers its messages there).
    Raises SetupError on a mismatch, naming both kinds."""
    from swarmscope.core.errors import SetupError
    from swarmscope.core.paths import SCENARIOS
    from swarmscope.kinds import get_kind

    have = proc.kind.name if proc.kind is not None else _INSTALLED.get("expect", "")
    if have and have != name:
        raise SetupError(
            f"this worker was started for the {have} kind and the controller runs {name}: start it "
            f"with `swarmscope worker --controller HOST` (it takes the controller's kind) or for {name}"
        )
    if proc.kind is not None:
        return
    kind = get_kind(name, "the controller's swarmscope:setup")
    _INSTALLED["kind"] = proc.kind = kind  # before the locustfile's own install(name) below
    users: list[Any] = []
    path = SCENARIOS / f"{name}.py"
    fired = list(events.init._handlers)  # Locust fired these at start, on the placeholder
    if path.is_file():  # a kind without one runs swept windows only: no Locust user at all
        from locust.util.load_locustfile import load_locustfile

        classes, shapes = load_locustfile(str(path))
        users = list(classes.values())
        if shapes:  # as on a worker started on the locustfile (its hooks look at it)
            environment.shape_class = shapes[0]
    environment.user_classes[:] = users
    for hook in [h for h in events.init._handlers if h not in fired]:  # what its imports added
        hook(environment=environment, runner=environment.runner, web_ui=None)


def register_messages(proc: Any, runner: Any) -> None:
    """Wire swarmscope's messages (swarmscope.core.messages) for ``proc``'s roles onto a runner."""
    local = isinstance(runner, LocalRunner)
    if proc.role in ("local", "worker"):

        def on_setup(environment: Any, msg: Any, **_: Any) -> None:
            d = msg.data
            try:
                if proc.worker is None:  # a second test (web UI) keeps the nodes it made
                    _learn_kind(environment, proc, str(d.get("kind") or d["cfg"]["scenario"]))
                    sim = 0 if os.environ.get("NODE_NAME") else int(d["sim_nodes"])
                    proc.set_up_worker(d["cfg"], sim, d.get("prefix", ""))
            except SwarmscopeError as e:
                if local:  # one process: the run fails with it where it asked
                    raise
                # Told to the master, which fails the run with it at once (not a set-up timeout),
                # and this worker quits with the error's exit code: one line, no traceback.
                print(f"swarmscope: {e}", file=sys.stderr)
                runner.send_message(M.NODES, {"nodes": [], "error": str(e)})
                environment.process_exit_code = e.exit_code
                import gevent

                gevent.spawn(runner.quit)  # after this handler: the message leaves first
                return
            runner.send_message(M.NODES, {"nodes": proc.worker.describe(), "info": proc.worker.info()})

        def on_run(environment: Any, msg: Any, **_: Any) -> None:
            d = msg.data
            with worker_spans.window(d["window_id"], d.get("traceparent", "")) as spans:
                per_node = proc.worker.run_window(
                    d["window_id"], M.window_nodes(d), d.get("payload", {}), environment
                )
            result = {"window_id": d["window_id"], "per_node": per_node, "spans": spans.take()}
            runner.send_message(M.RESULT, result)

        def on_window(environment: Any, msg: Any, **_: Any) -> None:
            proc.worker.current_window = msg.data["window_id"]
            worker_spans.begin(msg.data["window_id"], msg.data.get("traceparent", ""))

        def on_stop(environment: Any, msg: Any, **_: Any) -> None:
            if proc.worker is not None and proc.worker.current_window == msg.data["window_id"]:
                environment.runner.stop()  # fires test_stop here, which sends the results

        runner.register_message(M.SETUP, on_setup)
        runner.register_message(M.RUN, on_run, concurrent=True)
        if not local:
            runner.register_message(M.WINDOW, on_window)
            runner.register_message(M.STOP, on_stop)
    if proc.controller is not None:
        ctl = proc.controller

        def alive(client_id: str) -> bool:  # a node of a worker gone can be taken by another
            from swarmscope.controller.sweep import worker_alive

            return worker_alive(runner, client_id)

        def on_nodes(environment: Any, msg: Any, **_: Any) -> None:
            if msg.data.get("error"):
                ctl.worker_errors[msg.node_id] = str(msg.data["error"])
                return
            # msg.node_id is the worker's authenticated connection (workerauth), not its claim.
            ctl.add_nodes(msg.node_id, msg.data["nodes"], msg.data.get("info") or {}, alive=alive)

        def on_result(environment: Any, msg: Any, **_: Any) -> None:
            ctl.add_results(
                msg.data["window_id"], msg.node_id, msg.data["per_node"], msg.data.get("spans", b"")
            )

        runner.register_message(M.RESULT, on_result)
        runner.register_message(M.NODES, on_nodes)


# -- free-running tests (locust -f) --------------------------------------------------------------
class _FreeRun:
    """State of a plain Locust test: each start/stop of the test is one window of point 0."""

    def __init__(self, proc: Any):
        self.proc = proc
        self.point: PointInfo | None = None
        self.iteration = 0
        self.window: Any = None
        self.shared: dict[str, Any] = {}
        self.status = "ok"  # "interrupted" when quitting came with a window in flight
        self.opening = False  # test start: workers being set up, the window being opened
        self.run_time: float | None = None  # a headless -t, held until the set-up is done


def _on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    from swarmscope.app import locust_checks
    from swarmscope.app.process import SwarmscopeProcess

    if runner is None:
        return
    kind = _INSTALLED["kind"]
    role = (
        "local"
        if isinstance(runner, LocalRunner)
        else "master"
        if isinstance(runner, MasterRunner)
        else "worker"
    )
    if role != "worker":  # a worker sweeping here would miss the master's first messages
        from swarmscope.app.lifecycle import sweep_stale

        sweep_stale()  # what killed earlier runs left on this machine (docs/lifecycle.md)
    try:
        if kind is None and role != "worker":
            from swarmscope.core.errors import SetupError

            raise SetupError(
                "this locustfile is `swarmscope worker`'s (a worker that takes its kind from the "
                "controller): run Locust with a kind's, -f scenarios/<kind>.py"
            )
        web = environment.web_ui
        if web is not None:  # Locust binds it after this hook, in a greenlet that only logs a failure
            from swarmscope.core.sys.ports import check_free

            check_free(
                getattr(web, "host", "") or "",
                int(getattr(web, "port", 0) or 0),
                "Locust's web UI",
                "--web-port",
            )
        # A worker's config comes from the master (swarmscope:setup), not from its own options.
        cfg = _config(environment.parsed_options) if role != "worker" else None
        checks: list[Any] = []
        if cfg is not None:
            checks, cfg = locust_checks.load(cfg, environment.parsed_options, kind)
        proc = SwarmscopeProcess.make(cfg, kind, role=role)
        from swarmscope.app import weblogin

        weblogin.install(environment)  # --web-login: the UI behind Locust's login page
    except SwarmscopeError as e:
        print(f"swarmscope: {e}", file=sys.stderr)
        runner.quit()
        sys.exit(e.exit_code)
    environment.swarmscope = proc
    if environment.web_ui is not None:
        from swarmscope.app.webui_live import follow

        follow(proc.events)  # the tab's readings so far
    locust_checks.attach(environment, proc, checks)
    environment.swarmscope_free = _FreeRun(proc)
    _hold_run_time(environment, role)
    if proc.printer is not None:
        proc.printer.total = 0  # windows follow the user's starts, not the scenario's plan
    _install_ctrl_c(environment, runner)
    register_messages(proc, runner)
    # Registered after the runner's own quitting listener, so it runs first (quitting fires in
    # reverse order): a master's would stop without telling its workers.
    environment.events.quitting.add_listener(_on_quitting_first)
    if not isinstance(runner, WorkerRunner):
        import atexit

        atexit.register(_on_exit_unreported, environment)


def _hold_run_time(environment: Any, role: str) -> None:
    """A headless ``-t`` is that long a load: it counts from the end of test start's set-up.
    Locust starts its clock as it starts the test, and the set-up (the workers' nodes, the
    probes' programs compiled: seconds, more on a busy machine) ran inside it, so a short -t
    ended with no load in the window. Locust reads -t once, after this hook: it is taken from
    Locust here and started by _start_run_time. A shape counts -t itself (StepShape: from the
    window's opening too)."""
    opts = environment.parsed_options
    if role == "worker" or environment.shape_class is not None or not getattr(opts, "headless", False):
        return
    run_time = getattr(opts, "run_time", None)
    if run_time:
        environment.swarmscope_free.run_time, opts.run_time = run_time, None
        # Locust would now say there is no limit; _start_run_time says when it starts.
        logging.getLogger("locust.main").addFilter(
            lambda rec: not rec.getMessage().startswith("No run time limit set")
        )


def _start_run_time(environment: Any, free: _FreeRun) -> None:
    """The held -t, from now on, then quit as Locust's own -t does in a headless run."""
    import gevent

    run_time, free.run_time = free.run_time, None
    if not run_time:
        return
    environment.parsed_options.run_time = run_time  # for Locust's later readers (--html's {t})
    log.info("Run time limit set to %s seconds, from now: the set-up is done", run_time)

    def up() -> None:
        log.info("--run-time limit reached, shutting down")
        environment.runner.quit()

    gevent.spawn_later(run_time, up)


def _install_ctrl_c(environment: Any, runner: Any) -> None:
    """Ctrl-C (SIGINT) and SIGTERM (what a pod stop sends) for every role: a master, a local
    runner and a worker alike, one orderly shutdown in the main greenlet."""
    # Ctrl-C as a KeyboardInterrupt thrown into the main greenlet, where locust.main catches
    # it and shuts down once, in order (quitting fires, the report is written). Left to
    # Python, it was seen to land in a greenlet of grpc's gevent integration and get lost
    # (web UI), or in a worker's message greenlet, with a traceback; turned into Locust's
    # SIGTERM, a master with workers shut down twice (its handler's runner.quit() let the main
    # greenlet's own shutdown run alongside, and the handler's sys.exit then failed in the
    # interpreter's exit, with a traceback).
    import signal

    import gevent
    import greenlet

    main = greenlet.getcurrent()

    def _on_sigint(sig: int) -> None:  # and SIGTERM
        from swarmscope.app.lifecycle import STOPS

        STOPS.append(sig)
        free = getattr(environment, "swarmscope_free", None)
        if free is not None and (free.window is not None or free.opening):  # one in flight
            free.status = "interrupted"
        shape = getattr(runner, "shape_greenlet", None)
        if shape is not None and getattr(environment.parsed_options, "headless", False):
            # A headless run with a shape: locust.main installs its SIGTERM handler only once
            # the shape is done, so SIGTERM now would kill the process outright (no report,
            # the target's nginx and namespace left behind). Ending the shape lets Locust
            # stop and quit in order, as at the shape's own end.
            shape.kill(block=False)
            return
        if not main.dead:
            gevent.get_hub().loop.run_callback(main.throw, KeyboardInterrupt)

    gevent.signal_handler(signal.SIGINT, _on_sigint, signal.SIGINT)
    # SIGTERM the same way. Locust installs its own SIGTERM handler later (once a headless
    # shape is done; before, SIGTERM killed the process outright, leaving the target's nginx
    # and namespace); both then run, and _on_quitting_first ends Locust's shutdown in its
    # signal greenlet, which would otherwise run alongside the main greenlet's.
    gevent.signal_handler(signal.SIGTERM, _on_sigint, signal.SIGTERM)
    environment.swarmscope_main = main


def _on_exit_unreported(environment: Any) -> None:
    """The process exits without Locust's quitting event: Locust's headless master that gives
    up waiting for workers (--expect-workers-max-wait) calls sys.exit straight away. Write the
    report anyway, "failed", with what was measured, so the run directory is never left
    without report.json. Does nothing when quitting already closed the run."""
    free: _FreeRun | None = getattr(environment, "swarmscope_free", None)
    if free is None or free.proc.closed:
        return
    log.warning("the process is exiting without Locust's quitting event: writing the report")
    free.status = "failed"
    _on_quitting(environment)


def _on_quitting_first(environment: Any, **_: Any) -> None:
    """Quitting with a window in flight (Ctrl-C, SIGTERM, the web UI's quit): Locust fires
    quitting *before* it stops the runner. Stop it now, so the window closes in order (users
    and workers stop and send their counts, then the probes read); teardown comes after.
    Fired by Locust's own SIGTERM handler (a greenlet of its own): held here for good, as our
    handler of the same signal has sent the main greenlet its KeyboardInterrupt, whose shutdown
    is the one and exits the process (two ran side by side: runner.quit() here woke the main
    greenlet's own shutdown, and this one's sys.exit failed in the interpreter's exit)."""
    import greenlet

    main = getattr(environment, "swarmscope_main", None)
    if main is not None and not main.dead and greenlet.getcurrent() is not main:
        import gevent.event

        gevent.event.Event().wait()  # never set: the process exits under it
    free: _FreeRun | None = getattr(environment, "swarmscope_free", None)
    if free is None or free.window is None or free.proc.controller is None:
        return
    free.status = "interrupted"
    environment.runner.stop()  # fires test_stop, which closes the window
    if free.window is not None and free.point is not None:  # no user had started: close it here
        timeout_s = free.proc.cfg.window_timeout_s
        _close(environment, free.proc, free.window, free.point, timeout_s)
        free.window = None


def _on_test_start(environment: Any, **_: Any) -> None:
    from swarmscope.controller.sweep import set_up_workers

    free: _FreeRun | None = getattr(environment, "swarmscope_free", None)
    if free is None or free.proc.controller is None:
        return
    proc, runner = free.proc, environment.runner
    kind, cfg = proc.kind, proc.cfg
    workers = runner.worker_count if isinstance(runner, MasterRunner) else 1
    free.opening = True
    try:
        if cfg.probe == "external":
            proc.fleet.wait_for_probes(cfg.expect_probes, cfg.probe_timeout_s)
        infos = set_up_workers(runner, proc.controller, cfg, kind.free_run_nodes(cfg), workers, 10.0)
        free.shared = kind.shared(cfg, infos)
        names = sorted(proc.controller.nodes)
        if free.point is None:
            free.point = PointInfo(0, {"nodes": len(names)}, 0)
            proc.events.point_started.fire(run=proc.run, point=free.point)
        free.iteration += 1
        free.point.iterations = free.iteration
        free.window = proc.controller.open_window(
            free.point, free.iteration, names, programs=kind.programs(cfg, free.shared)
        )
    except SwarmscopeError as e:  # no probe, a worker that cannot set up: the run fails, said once
        if proc.closed:  # Ctrl-C came while this was starting: the run is already closed
            log.info("the run closed while its window was opening: %s", e)
            return
        import gevent

        print(f"swarmscope: {e}", file=sys.stderr)
        free.status = "failed"
        environment.process_exit_code = e.exit_code
        gevent.spawn(runner.quit)  # once Locust's start (which fired this) has returned
        return
    finally:
        free.opening = False
        _start_run_time(environment, free)  # also after a failed set-up: the run stays bounded
    if proc.worker is not None:
        proc.worker.current_window = free.window.window_id
        worker_spans.begin(free.window.window_id, free.window.traceparent)
    else:  # the traceparent: the workers' spans of the window are children of its span
        runner.send_message(
            M.WINDOW, {"window_id": free.window.window_id, "traceparent": free.window.traceparent}
        )
    # Read so far only for someone to look at (the tab), and for the kinds whose tab shows it.
    if (
        cfg.live_interval_s > 0
        and environment.web_ui is not None
        and kind.live_columns is THREE_NUMBER_COLUMNS
    ):
        import gevent

        gevent.spawn(_read_so_far, environment, free, free.window)


def _read_so_far(environment: Any, free: _FreeRun, window: Any) -> None:
    """Every ``live_interval_s`` while ``window`` is open: its counts so far (controller/rolling.py),
    fired as ``window_reading`` for the tab. Generated so far is what the workers reported to
    Locust's stats since the window opened (the kind's requests carry their count as length)."""
    from swarmscope.controller.rolling import read_so_far

    proc, interval = free.proc, free.proc.cfg.live_interval_s
    total = environment.runner.stats.total
    base = total.total_content_length

    def generated() -> int:
        return max(0, total.total_content_length - base)

    while True:
        gevent_sleep(interval)
        if free.window is not window or proc.closed or proc.controller is None:
            return
        try:  # a read so far waits at most one interval (2 s at most) for its probes
            read_so_far(proc.controller, window, proc.kind.metric, generated, min(interval, 2.0))
        except SwarmscopeError as e:
            log.warning("swarmscope: a read so far of window %s failed: %s", window.window_id, e)


def _on_test_stop(environment: Any, **_: Any) -> None:
    free: _FreeRun | None = getattr(environment, "swarmscope_free", None)
    if free is None:
        return
    proc, runner = free.proc, environment.runner
    if proc.worker is not None and proc.worker.current_window:
        window_id = proc.worker.current_window
        proc.worker.current_window = ""
        proc.worker.stop_window(window_id)
        per_node = proc.worker.take(window_id)
        spans = worker_spans.finish(window_id, per_node)
        runner.send_message(M.RESULT, {"window_id": window_id, "per_node": per_node, "spans": spans})
    if proc.controller is not None and free.window is not None and free.point is not None:
        # Taken before closing: a second test_stop while this one waits for the probes (a
        # Ctrl-C's stop racing the shape's end) finds no window and does nothing.
        window, free.window = free.window, None
        if isinstance(runner, MasterRunner):
            # A master that quits (-t, Ctrl-C) stops without telling workers to stop first:
            # ask them, so their users stop and they send what they generated.
            runner.send_message(M.STOP, {"window_id": window.window_id})
        _close(environment, proc, window, free.point, proc.cfg.window_timeout_s)
        # its line is printed by iteration_done; the report at quitting


def _close(environment: Any, proc: Any, window: Any, point: PointInfo, timeout_s: float) -> None:
    """Close a free run's window, waiting for the results of the workers still connected only:
    one that quit without sending (a Ctrl-C to the whole process group) is not waited for
    (the close waited out window_timeout_s for it, 30 s)."""
    from swarmscope.controller.sweep import worker_alive

    runner = environment.runner
    proc.controller.close_window(
        window, point, timeout_s=timeout_s, alive=lambda cid: worker_alive(runner, cid)
    )


def _on_quitting(environment: Any, **_: Any) -> None:
    free: _FreeRun | None = getattr(environment, "swarmscope_free", None)
    if free is None:
        return
    proc = free.proc
    if free.point is not None and proc.run is not None:
        proc.events.point_done.fire(run=proc.run, point=free.point, results=list(proc.controller.results))
    report = proc.close(free.status)  # with the kind's report sections
    if report is not None and proc.run is not None:
        from swarmscope.app.console import kind_summary
        from swarmscope.controller.report import render_console

        print(render_console(report), file=sys.stderr)  # with the final status, not "running"
        summary = kind_summary(report)  # the ingress steps / neighbor points, one screen
        if summary:
            print(summary, file=sys.stderr)
        print(f"swarmscope: report in {proc.run.run_dir}", file=sys.stderr)


__all__ = ["install", "option_name", "register_messages"]
