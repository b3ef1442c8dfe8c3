"""Locust users for the HTTP flood: closed model (N users) and open model (fixed arrival rate).

    from swarmscope.workers import http_users as hu
    hu.setup(steps=[100, 200], step_duration_s=30, model="closed")   # or model="open", steps = rates
    env = Environment(user_classes=[hu.FloodUser], shape_class=hu.StepShape(), host=url)

Closed: each user sends the next request when the previous one returned (boom, Locust's
default); latency is measured from the actual send. Open: requests are *scheduled* — each of
``open_users`` users owns every ``open_users/rate``-th slot of a fixed timetable; a user that
falls behind (stalled server) sends at once to catch up, and the latency is measured from the
intended send time, so a stall shows in the percentiles (wrk2's rule, no coordinated omission).

Every request is recorded in this process's :class:`StepRecorder` (one HdrHistogram per step);
in a distributed run each worker sends its encoded recorder to the master at test stop
(message ``ss_http_steps``) and the master merges them exactly (``MASTER_BLOBS``).

Caveats: importing this imports Locust, which monkey-patches the process with gevent. The open
model needs enough users for the rate × latency (Little's law); a step where the schedule
could not be kept shows up as latency, which is the point.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
import psutil
from locust import FastHttpUser, LoadTestShape, constant, events, task

from swarmscope.workers.http_stats import StepRecorder

# Run parameters, set by setup() (in-process) or from the command line (locust -f).
PARAMS: dict[str, Any] = {
    "steps": [100],
    "step_duration_s": 10.0,
    "model": "closed",
    "open_users": 100,
    "path": "/",
    "spawn_rate": 1000.0,
    "keep_timeline": False,
}
RECORDER: StepRecorder | None = None
MASTER_BLOBS: list[dict[str, Any]] = []
_CURRENT_RATE: list[float] = [0.0]


def setup(**params: Any) -> None:
    PARAMS.update(params)


def start_recorder(t0: float | None = None) -> StepRecorder:
    global RECORDER
    RECORDER = StepRecorder(
        PARAMS["step_duration_s"], t0, keep_timeline=PARAMS["keep_timeline"], n_steps=len(PARAMS["steps"])
    )
    gevent.spawn(_cpu_meter, RECORDER)
    return RECORDER


def _cpu_meter(rec: StepRecorder) -> None:
    """Attribute this process's CPU time to the step it was used in (generator honesty)."""
    proc = psutil.Process()
    last = sum(proc.cpu_times()[:2])
    while RECORDER is rec:
        gevent.sleep(0.25)
        now = sum(proc.cpu_times()[:2])
        step = rec.step_of(time.time())
        rec.cpu_s[step] = rec.cpu_s.get(step, 0.0) + (now - last)
        last = now


def _record(intended: float, r: Any) -> None:
    rec = RECORDER
    if rec is None:
        return
    err = getattr(r, "error", None)
    status = getattr(r, "status_code", None) or None
    rec.record(intended, time.time(), status, None if err is None else type(err).__name__)


class FloodUser(FastHttpUser):
    """One user class for both models (``PARAMS["model"]``), so a locustfile has a single user.

    closed: a request, wait for it, the next one (no think time); latency from the actual send.
    open: this user's share of a fixed-rate timetable; latency from the intended send time.
    """

    wait_time = constant(0)
    _seq = 0

    def on_start(self) -> None:
        FloodUser._seq += 1
        self.slot = FloodUser._seq - 1
        self.next_t: float | None = None
        self.rate_seen = 0.0

    @task
    def get(self) -> None:
        if PARAMS["model"] != "open":
            t = time.time()
            _record(t, self.client.get(PARAMS["path"], name="flood"))
            return
        rate = _CURRENT_RATE[0]
        if rate <= 0:
            gevent.sleep(0.05)
            return
        n = max(1, int(PARAMS["open_users"]))
        interval = n / rate
        now = time.time()
        if self.next_t is None or rate != self.rate_seen:
            # (Re)start the timetable: slot k of n is offset by k/rate so users interleave.
            self.next_t = now + (self.slot % n) / rate
            self.rate_seen = rate
        intended = self.next_t
        if intended > now:
            gevent.sleep(intended - now)
        r = self.client.get(PARAMS["path"], name="flood")
        _record(intended, r)
        self.next_t = intended + interval


class StepShape(LoadTestShape):
    """Steps held ``step_duration_s`` each: users (closed) or arrival rates (open), then stop."""

    def tick(self) -> tuple[int, float] | None:
        t = self.get_run_time()
        steps = PARAMS["steps"]
        i = int(t // PARAMS["step_duration_s"])
        if i >= len(steps):
            _CURRENT_RATE[0] = 0.0
            return None
        if PARAMS["model"] == "open":
            _CURRENT_RATE[0] = float(steps[i])
            return int(PARAMS["open_users"]), float(PARAMS["spawn_rate"])
        return int(steps[i]), float(PARAMS["spawn_rate"])


# -- distributed runs (locust -f scenarios/ingress_flood.py --master/--worker) -------------------
@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    g = parser.add_argument_group("swarmscope ingress flood")
    g.add_argument(
        "--ss-steps",
        default="100,200,300,400,500,600,700,800,900,1000",
        help="users per step (closed) or req/s per step (open)",
    )
    g.add_argument("--ss-step-duration", type=float, default=30.0, help="seconds per step")
    g.add_argument("--ss-model", choices=["closed", "open"], default="closed")
    g.add_argument("--ss-open-users", type=int, default=100, help="open model: users sharing the timetable")
    g.add_argument("--ss-out", default="", help="master: write the merged per-step results (JSON) here")


@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    opts = environment.parsed_options
    if opts is not None and hasattr(opts, "ss_steps"):
        setup(
            steps=[float(x) for x in str(opts.ss_steps).split(",") if x.strip()],
            step_duration_s=opts.ss_step_duration,
            model=opts.ss_model,
            open_users=opts.ss_open_users,
        )
    runner = environment.runner
    if runner is not None and type(runner).__name__ == "MasterRunner":
        runner.register_message("ss_http_steps", lambda msg, **kw: MASTER_BLOBS.append(msg.data))


@events.test_start.add_listener
def _on_test_start(environment: Any, **_: Any) -> None:
    if type(environment.runner).__name__ != "MasterRunner" and RECORDER is None:
        start_recorder()


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_: Any) -> None:
    runner = environment.runner
    if type(runner).__name__ == "WorkerRunner" and RECORDER is not None:
        runner.send_message("ss_http_steps", RECORDER.encode())


@events.quitting.add_listener
def _on_quit(environment: Any, **_: Any) -> None:
    import json

    opts = environment.parsed_options
    out = getattr(opts, "ss_out", "") if opts is not None else ""
    blobs = MASTER_BLOBS or ([RECORDER.encode()] if RECORDER is not None else [])
    if out and blobs:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"steps": StepRecorder.merge(blobs).summary()}, fh, indent=1)
