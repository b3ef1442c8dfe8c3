"""Locust users for the HTTP flood: closed model (N users) and open model (fixed arrival rate).

    load = WindowLoad(StepRecorder(2.0, t0, n_steps=1), "http://10.201.7.2:80", "/", "open",
                      rate_at=lambda t: 200.0, users=50)
    driver.active = load                 # every FloodUser of this process records into it
    user = FloodUser(environment); user.start(group)   # or Locust spawns them (locust -f)

Closed: each user sends the next request when the previous one returned (boom, Locust's
default); latency is measured from the actual send. Open: requests are *scheduled*: each of the
``load.users`` users owns every ``users/rate``-th slot of a fixed timetable; a user that falls
behind (stalled server) sends at once to catch up, and the latency is measured from the
intended send time, so a stall shows in the percentiles (wrk2's rule, no coordinated omission).

A request costs the generator what it costs plain Locust plus one tuple appended to a buffer:
``WindowLoad.record`` keeps (intended, done, status, error, step) and every ``FLUSH_AT``
requests, at a count step's end and at ``stop`` the buffer goes into the recorder in one
vectorised batch (``StepRecorder.record_many``, exact). Whoever reads the recorder mid-window
calls ``flush`` first (or ``recorded()`` for the count alone).

Users find the window they count into through the process's swarmscope driver
(``environment.swarmscope.worker.active``, a :class:`WindowLoad`), so a user that lives across
windows (``locust -f``, where each test start/stop is one window) records into the right one.
:class:`StepShape` drives a ``locust -f`` run through the scenario's steps (by time, or by
request count with ``requests``: workers.step_sync).

Caveats: importing this imports Locust, which monkey-patches the process with gevent. The open
model needs enough users for the rate × latency (Little's law); a step where the schedule could
not be kept shows up as latency, which is the point. Stopping users with Locust's default
``--stop-timeout`` 0 kills requests in flight, which nginx may still log: give it a few seconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import gevent
from locust import FastHttpUser, LoadTestShape, constant, events, task

from swarmscope.workers.http_stats import Row, StepRecorder

# Requests buffered before they go into the recorder in one batch: a flush costs about a
# millisecond, and the buffer stays well under a megabyte.
FLUSH_AT = 2048


class WindowLoad:
    """One window's load in this process: where requests go and the recorder they go into."""

    def __init__(
        self,
        recorder: StepRecorder,
        base_url: str,
        path: str,
        model: str,
        rate_at: Callable[[float], float] = lambda t: 0.0,
        users: int = 1,
    ):
        self.recorder = recorder
        self.base_url = base_url
        self.path = path
        self.model = model
        self.rate_at = rate_at  # open model: requests/s of the timetable at wall time t
        self.users = max(1, users)  # open model: users sharing that timetable
        self.stopping = False
        # Request-count steps (boom's -n): requests this process may still send; None = timed.
        # Taken before each send, one at a time (greenlets: no other user runs in between).
        self.budget: int | None = None
        self.elapsed_s: float | None = None  # count mode: from the step's start to its last answer
        # locust -f count steps (workers.step_sync): the step whose budget users take, this
        # node's share of it, and who to tell once every one of them is answered.
        self.step: int | None = None
        self.share = 0
        self._on_done: Callable[[int], None] | None = None
        self._answered = 0  # requests of the count step in progress answered here
        # Answered requests not yet in the recorder: one shared list is enough, as the users
        # are greenlets of one thread (nothing runs between a check and an append).
        self._buf: list[Row] = []
        self._slots = 0
        self._meter: gevent.Greenlet | None = None

    def next_slot(self) -> int:
        self._slots += 1
        return self._slots - 1

    def record(self, intended: float, r: Any, step: int | None = None) -> None:
        """One answered request: a tuple appended to the buffer (flushed every FLUSH_AT)."""
        err = getattr(r, "error", None)
        buf = self._buf
        buf.append(
            (
                intended,
                time.time(),
                getattr(r, "status_code", None) or None,
                None if err is None else type(err).__name__,  # not the exception: its frames
                step,
            )
        )
        if len(buf) >= FLUSH_AT:
            self.flush()
        if self._on_done is not None and step is not None and step == self.step:
            self._answered += 1
            if self._answered >= self.share:
                self.flush()
                self._step_done()

    def flush(self) -> None:
        """The buffered requests into the recorder (exact: StepRecorder.record_many)."""
        if self._buf:
            rows, self._buf = self._buf, []
            self.recorder.record_many(rows)

    def recorded(self) -> int:
        """Requests answered in this window so far (recorded or still buffered)."""
        return sum(s.requests for s in self.recorder.steps.values()) + len(self._buf)

    def begin_step(self, step: int, share: int, on_done: Callable[[int], None]) -> None:
        """Count step ``step`` starts: ``share`` requests for this process's users."""
        self.flush()
        self.step, self.share, self.budget, self._on_done = step, share, share, on_done
        self.recorder.current_step = step
        st = self.recorder.steps.get(step)
        self._answered = 0 if st is None else st.requests
        if share == 0:
            self._step_done()

    def _step_done(self) -> None:
        done, self._on_done = self._on_done, None
        if done is not None and self.step is not None:
            done(self.step)

    def start_cpu_meter(self) -> None:
        self._meter = gevent.spawn(self._cpu_meter)

    def stop(self) -> None:
        """No new requests; the CPU meter takes its last reading; the buffer is flushed (a
        user still finishing a request after this records it; the next stop flushes it)."""
        self.stopping = True
        if self._meter is not None:
            self._meter.join(timeout=1.0)
            self._meter = None
        self.flush()

    def _cpu_meter(self) -> None:
        """Attribute this process's CPU time to the step it was used in (generator honesty).
        os.times(): the process's user + system time from one syscall, no /proc file to read."""
        rec = self.recorder
        last = sum(os.times()[:2])
        while True:
            stopping = self.stopping
            gevent.sleep(0 if stopping else 0.25)
            now = sum(os.times()[:2])
            step = rec.step_of(time.time())
            rec.cpu_s[step] = rec.cpu_s.get(step, 0.0) + (now - last)
            last = now
            if stopping:
                return


def active_load(environment: Any) -> WindowLoad | None:
    proc = getattr(environment, "swarmscope", None)
    driver = getattr(proc, "worker", None)
    return getattr(driver, "active", None)


class FloodUser(FastHttpUser):
    """One user class for both models (the window's ``model``), so a locustfile has one user.

    closed: a request, wait for it, the next one (no think time); latency from the actual send.
    open: this user's share of a fixed-rate timetable; latency from the intended send time.
    """

    wait_time = constant(0)
    # A redirect is an answer to count, never a new place to send load to (it could point
    # outside the allow-list the target was checked against).
    max_redirects = 0

    def __init__(self, environment: Any):
        load = active_load(environment)
        if load is not None and load.base_url:
            self.host = load.base_url
        elif environment.host:
            self.host = environment.host
        # The run's timeouts (the worker's config), before FastHttpUser builds its client.
        cfg = getattr(getattr(getattr(environment, "swarmscope", None), "worker", None), "cfg", None)
        if cfg is not None:
            self.connection_timeout = float(cfg.connect_timeout_s)
            self.network_timeout = float(cfg.request_timeout_s)
        super().__init__(environment)
        self.slot = -1
        self.next_t: float | None = None
        self.rate_seen = 0.0
        self.load_seen: WindowLoad | None = None

    @task
    def get(self) -> None:
        load = active_load(self.environment)
        if load is None or load.stopping:
            gevent.sleep(0.05)  # between windows (locust -f): nothing to count into
            return
        if load is not self.load_seen:
            self.load_seen, self.slot, self.next_t = load, load.next_slot(), None
        if load.model != "open":
            if load.budget is not None:
                if load.budget <= 0:
                    gevent.sleep(0.05)  # this step's count is sent: idle until it ends
                    return
                load.budget -= 1
            step, t = load.step, time.time()  # the step whose count this request is part of
            load.record(t, self.client.get(load.path, name="flood"), step)
            return
        now = time.time()
        rate = load.rate_at(now)
        if rate <= 0:
            gevent.sleep(0.05)
            return
        interval = load.users / rate
        if self.next_t is None or rate != self.rate_seen:
            # (Re)start the timetable: slot k of n is offset by k/rate so users interleave.
            self.next_t = now + (self.slot % load.users) / rate
            self.rate_seen = rate
        intended = self.next_t
        if intended > now:
            gevent.sleep(intended - now)
            if load.stopping:  # the step ended while this user waited for its slot
                return
        load.record(intended, self.client.get(load.path, name="flood"))
        self.next_t = intended + interval


class StepShape(LoadTestShape):
    """``locust -f``: the scenario's steps held ``step_duration`` each, then stop.

    closed: the step is the user count; open: ``open_users`` users and the step is the rate
    (each worker's users read the rate from the config the master sent). Locust's own options
    count (``use_common_options``): ``-u N`` is one step of N users (``-t`` long, if given),
    ``-r`` its spawn rate (default: all at once), and ``-t`` bounds the load (from the window's
    opening, docs/doors.md)."""

    use_common_options = True

    def tick(self) -> tuple[int, float] | None:
        from swarmscope.workers.step_sync import StepSync

        env: Any = self.runner.environment if self.runner is not None else None
        # Steps and -t count from the window's opening, as the workers' recorders do, not from
        # the shape's start: setting the target up (and its network baseline) comes in between,
        # seconds on a busy machine, which a short -t counted from the start left without load.
        start = StepSync.window_opened(env)
        limit = getattr(env.parsed_options, "run_time", None)
        if limit and start is not None and time.time() - start >= limit:
            return None
        cfg = env.swarmscope.cfg  # the config swarmscope's plug-in loaded on this master
        if cfg.requests and cfg.model == "closed":  # boom's -n: a step ends on its count
            return StepSync.of(env).tick(env, cfg)
        steps = cfg.steps
        i = 0 if start is None else int((time.time() - start) // cfg.step_duration)
        if i >= len(steps):
            return None
        StepSync.of(env).timed(env, cfg, i)  # backends per step: the target reloads
        users = int(cfg.open_users) if cfg.model == "open" else int(steps[i])
        return users, float(getattr(env, "ss_spawn_rate", None) or 10000.0)  # default: all at once


# -- locust -f: Locust's --host is the target, and workers learn the local target's URL ---------
@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    opts = environment.parsed_options
    if opts is not None and getattr(opts, "host", None) and not getattr(opts, "ss_host", None):
        opts.ss_host = opts.host  # a Locust user's --host names the target: no local one then
    if opts is not None and getattr(opts, "num_users", None) and not getattr(opts, "ss_steps", None):
        # A Locust user's -u (read here, before headless mode fills in its default of 1): one
        # step of that many users, as long as -t when given (StepShape reads -r and -t too).
        opts.ss_steps = str(opts.num_users)
        if getattr(opts, "run_time", None) and not getattr(opts, "ss_step_duration", None):
            opts.ss_step_duration = str(opts.run_time)
    environment.ss_spawn_rate = getattr(opts, "spawn_rate", None)
    # Added here, so it runs after swarmscope's own test_start hook (installed before init),
    # which sets up the workers and learns the target's URL from them.
    events.test_start.add_listener(_target_host)
    runner = environment.runner
    if runner is not None and isinstance(environment.shape_class, StepShape):
        from swarmscope.workers.step_sync import register

        register(environment, runner)  # count steps and backends per step under locust -f


def _target_host(environment: Any, **_: Any) -> None:
    """Master: the URL of the target (started by one worker) goes to every worker with the
    spawn message (Locust sends ``environment.host`` with it)."""
    free = getattr(environment, "swarmscope_free", None)
    url = getattr(free, "shared", {}).get("url") if free is not None else None
    if url:
        environment.host = url
