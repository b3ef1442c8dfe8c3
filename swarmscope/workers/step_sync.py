"""``locust -f`` ingress steps that end on a request count (boom's -n) or change backend replicas.

    sync = StepSync.of(environment)          # the master's state, made by register() at init
    users = sync.tick(environment, cfg)      # StepShape.tick in count mode: users, or None = done

In ``swarmscope run`` a step is a window and the controller runs them one by one. Under
``locust -f`` one window holds every step and :class:`~swarmscope.workers.http_users.StepShape`
on the master drives them, by time; with ``requests`` a step ends when its count is answered
instead, which only the workers see. So the master and the workers talk (Locust custom
messages, in order on the master's socket; a local runner delivers them to itself):

1. the shape sets the step's users (Locust spawns them; they idle: no budget yet), and a tick
   later sends ``ingress_step`` with each node's share of the count (the first nodes take the
   remainder, as in ``swarmscope run``);
2. each worker's users take one request each from its share until it is spent; when the last
   is answered the worker sends ``ingress_step_done``;
3. when every node is done (or ``step_duration``, the step's limit, has passed) the master sends
   ``ingress_step_end``: the worker that runs the local target counts the access-log lines of
   the step once the log stops growing, reloads the LB onto the next step's ``backends`` and
   answers ``ingress_step_logged``; only then does the next step start. So each step's log lines
   are its own, and no request of a step goes to the previous step's upstream.

Timed steps with ``backends`` varying per step send ``ingress_step`` (no shares) at each
boundary and the target worker reloads then (nginx's graceful reload: requests already on the
old workers finish there).

Caveats: a shape tick is a second, so a count step costs about two seconds of set-up beside its
requests (not in its ``elapsed_s``, which runs from its first send to its last answer).
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)

STEP = "swarmscope:ingress_step"  # master -> workers: {"step", "shares": {node: n} | None}
DONE = "swarmscope:ingress_step_done"  # worker -> master: {"step", "node"}
END = "swarmscope:ingress_step_end"  # master -> workers: {"step"}
LOGGED = "swarmscope:ingress_step_logged"  # target worker -> master: {"step", "lines"}
END_WAIT_S = 20.0  # the most the master waits for the target worker's log count


def share(total: int, position: int, count: int) -> int:
    """This node's part of ``total`` split over ``count`` nodes (the first ones take the rest)."""
    return total // count + (1 if position < total % count else 0)


class StepSync:
    """The master's view of the step in progress (count mode) or the last step told (timed)."""

    def __init__(self) -> None:
        self.step = -1
        self.phase = "idle"  # idle → spawn → running → ending → (next step's spawn) … → over
        self.since = 0.0
        self.nodes: list[str] = []
        self.done: set[str] = set()

    @staticmethod
    def of(environment: Any) -> StepSync:
        sync = getattr(environment, "swarmscope_steps", None)
        if sync is None:
            sync = environment.swarmscope_steps = StepSync()
        return sync

    # -- count mode ---------------------------------------------------------------------------
    def tick(self, environment: Any, cfg: Any) -> tuple[int, float] | None:
        """One shape tick of a request-count run: the users to hold, or None when all are done."""
        runner, now = environment.runner, time.monotonic()
        if self.phase in ("idle", "logged"):
            if self.step + 1 >= len(cfg.steps):
                self.phase = "over"
                return None
            self.step, self.phase, self.since = self.step + 1, "spawn", now
        elif self.phase == "spawn" and _window_open(environment):
            # The step's users are up (and idle): give them the count. The first step waits for
            # the window: test_start sets the target up (and measures the network baseline)
            # while the shape ticks on.
            proc = environment.swarmscope
            self.nodes = sorted(proc.controller.nodes)
            n = _count(cfg, self.step)
            shares = {node: share(n, i, len(self.nodes)) for i, node in enumerate(self.nodes)}
            self.done, self.phase, self.since = set(), "running", now
            runner.send_message(STEP, {"step": self.step, "shares": shares})
        elif self.phase == "running":
            limit = now - self.since > float(cfg.step_duration)
            if limit or self.done >= set(self.nodes):
                if limit:
                    log.warning("ingress: step %d hit its %g s limit", self.step, cfg.step_duration)
                self.phase, self.since = "ending", now
                if _has_target(environment):
                    runner.send_message(END, {"step": self.step})
                else:  # a remote host: no log to count, nothing to reload
                    self.phase = "logged"
        elif self.phase == "ending" and now - self.since > END_WAIT_S:
            log.warning("ingress: no log count for step %d in %g s; going on", self.step, END_WAIT_S)
            self.phase = "logged"
        if self.phase == "over":
            return None
        return int(cfg.steps[self.step]), 10000.0

    # -- timed steps ------------------------------------------------------------------------------
    @staticmethod
    def window_opened(environment: Any) -> float | None:
        """Wall time the test's window opened (None: not yet, the workers are being set up)."""
        free = getattr(environment, "swarmscope_free", None)
        window = getattr(free, "window", None)
        return window.opened_ns / 1e9 if window is not None and window.opened_ns else None

    def timed(self, environment: Any, cfg: Any, step: int) -> None:
        """Tell the target worker each new step (it reloads onto that step's backends)."""
        if step != self.step:
            self.step = step
            if step > 0 and cfg.backends and len(cfg.backends) > 1 and _has_target(environment):
                environment.runner.send_message(STEP, {"step": step, "shares": None})


def _count(cfg: Any, step: int) -> int:
    counts = cfg.requests
    return int(counts[step] if len(counts) > 1 else counts[0])


def _window_open(environment: Any) -> bool:
    return StepSync.window_opened(environment) is not None


def _has_target(environment: Any) -> bool:
    free = getattr(environment, "swarmscope_free", None)
    return bool(free is not None and free.shared.get("target_node"))


def register(environment: Any, runner: Any) -> None:
    """Wire the four messages for this process's role (a local runner plays both)."""
    from locust.runners import MasterRunner, WorkerRunner

    if not isinstance(runner, MasterRunner):

        def on_step(environment: Any, msg: Any, **_: Any) -> None:
            driver = environment.swarmscope.worker
            d = msg.data
            if d.get("shares") is None:  # timed step: only the target worker reloads
                driver.use_step_backends(int(d["step"]))
                return
            n = int(d["shares"].get(driver.name, 0))
            driver.begin_count_step(int(d["step"]), n, lambda step: _done(environment, step))

        def on_end(environment: Any, msg: Any, **_: Any) -> None:
            driver = environment.swarmscope.worker
            step = int(msg.data["step"])
            lines = driver.end_step(step)  # None: not the target's worker
            if lines is not None:
                environment.runner.send_message(LOGGED, {"step": step, "lines": lines})

        runner.register_message(STEP, on_step)
        runner.register_message(END, on_end)
    if not isinstance(runner, WorkerRunner):

        def on_done(environment: Any, msg: Any, **_: Any) -> None:
            sync = StepSync.of(environment)
            if int(msg.data["step"]) == sync.step:
                sync.done.add(str(msg.data["node"]))

        def on_logged(environment: Any, msg: Any, **_: Any) -> None:
            sync = StepSync.of(environment)
            if int(msg.data["step"]) == sync.step and sync.phase == "ending":
                sync.phase = "logged"

        runner.register_message(DONE, on_done)
        runner.register_message(LOGGED, on_logged)


def _done(environment: Any, step: int) -> None:
    driver = environment.swarmscope.worker
    environment.runner.send_message(DONE, {"step": step, "node": driver.name})
