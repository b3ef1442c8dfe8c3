"""The ingress flood's worker side: one load generator per worker, and the target on worker 0.

    driver = IngressDriver(cfg, prefix="w1-")        # kind.make_driver, on swarmscope:setup
    driver.info()     # worker 0 without a host: {"url": "http://10.201.7.2:80", "lb_pids": [...]}
    driver.run_window("w-p0-i1", ["w1-n1", "w2-n1"], payload, environment)
    # -> {"w1-n1": {"generated": successes, "recorder": blob, "server_requests": lines, ...}}
    driver.close()                                    # stops the load, tears the target down

A worker is one node (the load generator). Each window is one step: the worker takes its share
of the step's users (closed) or rate and users (open) from its position among the window's
nodes, runs Locust ``FloodUser`` users on its Locust environment (or k6) from the payload's
``start_at`` for ``step_duration`` seconds, stops them gracefully (requests in flight finish and
are recorded) and returns its exact counts and encoded HdrHistograms. The worker of index 0
starts the local target (no ``host``), counts the access-log lines of each window, samples
nothing itself (the probe's ``procstat`` does, on the LB pids it announces) and runs the fault,
whose records and client-observed downtime go back in its results.

Caveats: runs in a gevent-patched Locust worker (threads and sleeps are greenlets). The server
count is taken once the access log stops growing, so another worker's last responses are in it;
the windows of all workers start at the same wall time (``start_at``), so a cluster needs
synchronised clocks for exact per-window server counts.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from swarmscope.core.errors import SwarmscopeError
from swarmscope.core.node import node_host
from swarmscope.kinds.ingress_flood.config import IngressConfig
from swarmscope.workers import spans
from swarmscope.workers.http_stats import StepRecorder, downtime
from swarmscope.workers.step_sync import share

log = logging.getLogger(__name__)


def worker_index(prefix: str) -> int:
    """The worker's index from its node prefix (``w<i+1>-``; no prefix: the only worker)."""
    m = re.fullmatch(r"w(\d+)-", prefix)
    return int(m.group(1)) - 1 if m else 0


class IngressDriver:
    def __init__(self, cfg: IngressConfig, prefix: str = ""):
        self.cfg = cfg
        self.name = f"{prefix}n1"
        self.host = node_host()
        self.index = worker_index(prefix)
        self.target: Any = None
        self.error = ""
        self.base_url = str(cfg.host).rstrip("/")
        self.active: Any = None  # the WindowLoad FloodUsers of this process record into
        self._window = ""
        self._done: dict[str, dict[str, Any]] = {}
        self._log_before = 0
        self._step_of: dict[str, int] = {}  # window id -> the step it runs (backends per step)
        # locust -f (workers.step_sync): the log lines counted at the start of the step in
        # progress, and per step its lines and the replicas that served it (target worker).
        self._step_mark = 0
        self._by_step: dict[str, dict[str, int]] = {}
        self._fault: Any = None
        self._fault_sent = 0
        self._fault_struck = 0  # records already named as struck in a window's results
        self._timeline: list[tuple[float, bool]] = []
        # Requests sent to the target outside any window (the preflight): in the report, so
        # that its total equals the server's access log (issue 18, finding 12).
        self.preflight_requests = 0
        # iperf3 between host and the local target's namespace, once per run before any load;
        # sent with the first window's results (None: not measured).
        self.network_baseline: dict[str, Any] | None = None
        # k6 is found (or built, with a progress line) now, at set-up: never inside a window.
        self.k6 = ""
        if cfg.engine == "k6":
            from swarmscope.workers.k6 import k6_binary

            try:
                self.k6 = k6_binary()
            except SwarmscopeError as e:
                self.error = str(e)
        if self.index == 0 and not self.error:
            self._set_up_target()

    def _set_up_target(self) -> None:
        from swarmscope.core.errors import ConfigError, Problem
        from swarmscope.kinds.ingress_flood.config import host_allowed, preflight, target_url

        cfg = self.cfg
        try:
            if not cfg.host:
                from swarmscope.kinds.ingress_flood.config import backends_of
                from swarmscope.targets.ingress.local import LocalIngress

                started = max(cfg.backends or [2])
                self.target = LocalIngress(cfg.restart_delay_s, cfg.lb_workers, backends=started)
                self.target.__enter__()
                self.target.use_backends(backends_of(cfg, 0))
                self.base_url = self.target.url.rstrip("/")
            url = target_url(self.base_url, cfg.path)
            # Checked again here, on the worker, on the URL really requested: the namespaces
            # trusted are the ones that exist where the load is sent from.
            why = host_allowed(url, list(cfg.allow_hosts or []))
            if why:
                raise ConfigError([Problem("worker", "host", why)])
            preflight(url, cfg.preflight_timeout_s, cfg.tls_verify)
            self.preflight_requests = 1
            if self.target is not None and cfg.network_baseline_s > 0:
                self.network_baseline = self._baseline(int(cfg.network_baseline_s))
        except SwarmscopeError as e:
            # Reported to the controller in info(), which fails the run with it.
            self.error = str(e)

    def _baseline(self, seconds: int) -> dict[str, Any]:
        """The network baseline (iperf3 over the load's own veth); a failure is reported in it,
        not fatal: the HTTP figures stand without it."""
        from swarmscope.targets.ingress.netbase import network_baseline

        try:
            return network_baseline(self.target.netns, self.target.ns_addr, seconds)
        except SwarmscopeError as e:
            log.warning("ingress: network baseline: %s", e)
            return {"tool": "iperf3", "error": str(e)}

    # -- the Driver protocol ----------------------------------------------------------------
    def describe(self) -> list[dict[str, Any]]:
        # cgroup id 0: the probe's procstat gives this node all chosen processes (the proxy's,
        # which live outside any node's cgroup).
        return [{"name": self.name, "host": self.host, "cgroup_id": 0, "cgroup_path": "", "comm": ""}]

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.name, "index": self.index}
        if self.error:
            out["error"] = self.error
        if self.index == 0:
            out["url"] = self.base_url
            # Whether this worker has a log to count at each step's end (workers.step_sync): a
            # remote host has none, and the master would wait for a count that never comes.
            out["local_target"] = self.target is not None
            out["lb_pids"] = self._lb_pids_settled()
            out["preflight_requests"] = self.preflight_requests
        return out

    def _lb_pids_settled(self, timeout_s: float = 5.0) -> list[int]:
        """The LB master and all its workers: nginx forks the workers after the master is up,
        so wait (briefly) until all ``lb_workers`` are there before the probe is told the pids."""
        if self.target is None:
            return []
        want = 1 + int(self.cfg.lb_workers)
        deadline = time.monotonic() + timeout_s
        pids = self.target.lb_pids()
        while len(pids) < want and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = self.target.lb_pids()
        return pids

    @property
    def current_window(self) -> str:
        return self._window

    @current_window.setter
    def current_window(self, window_id: str) -> None:
        """locust -f: a test start opens a window holding every step (StepShape drives them)."""
        if window_id and window_id != self._window:
            cfg = self.cfg
            t0 = time.time()
            self._start(window_id, t0, len(cfg.steps), cfg.model == "open")
            self._step_mark, self._by_step = self._log_before, {}
            self.use_step_backends(0)  # a second test (web UI) starts at step 0 again
            steps = [float(s) for s in cfg.steps]
            rec = self.active.recorder
            self.active.rate_at = lambda t: steps[rec.step_of(t)]
            self.active.users = int(cfg.open_users)
            if cfg.requests and cfg.model == "closed":  # boom's -n: steps end on their count
                self.active.budget = 0  # users idle until the master deals the first step's count
                self.active.recorder.current_step = 0
            self.active.start_cpu_meter()
        self._window = window_id

    # -- locust -f steps (workers.step_sync) -------------------------------------------------
    def begin_count_step(self, step: int, n: int, done: Any) -> None:
        """This node's share ``n`` of count step ``step``; ``done(step)`` once all are answered."""
        load = self.active
        if load is None:
            return
        load.begin_step(step, n, done)

    def end_step(self, step: int) -> int | None:
        """The target's worker: the log lines of the step just ended (once the log stops
        growing), then the LB onto the next step's replicas. None on other workers."""
        if self.target is None:
            return None
        now = self._settled_log_count()
        lines, self._step_mark = now - self._step_mark, now
        self._by_step[str(step)] = {"server_requests": lines, "backends": self.target.backends_used}
        self.use_step_backends(step + 1)
        return lines

    def use_step_backends(self, step: int) -> None:
        """The target's worker: the LB onto ``step``'s replicas (when they vary per step)."""
        from swarmscope.kinds.ingress_flood.config import backends_of

        cfg = self.cfg
        if self.target is None or not cfg.backends or not 0 <= step < len(cfg.steps):
            return
        try:
            self.target.use_backends(backends_of(cfg, step))
        except SwarmscopeError as e:
            log.warning("ingress: backends for step %d: %s", step, e)
            return
        # What the LB really proxies to from now on: the report's replicas for the step.
        self._by_step.setdefault(str(step), {})["backends"] = self.target.backends_used

    def run_window(
        self, window_id: str, nodes: list[str], payload: dict[str, Any], environment: Any
    ) -> dict[str, Any]:
        import gevent

        if self.name not in nodes:
            return {}
        p = payload
        pos, count = nodes.index(self.name), len(nodes)
        openm = p["model"] == "open"
        users = (
            max(1, share(int(p["open_users"]), pos, count)) if openm else share(int(p["users"]), pos, count)
        )
        rate = float(p["rate"]) / count if openm else 0.0
        if not self.base_url:
            self.base_url = str(p["url"]).rstrip("/")
        start_at, dur = float(p["start_at"]), float(p["step_duration"])
        load = self._start(window_id, start_at, 1, openm)
        self._step_of[window_id] = int(p["step"])
        load.rate_at, load.users = (lambda t: rate), users
        if self.target is not None and p.get("backends") is not None:
            self.target.use_backends(int(p["backends"]))  # normally already, see _finish
        n_requests = p.get("request_count")
        if n_requests is not None:  # boom's -n: this worker's share of the step's exact count
            load.budget = share(int(n_requests), pos, count)
        extra: dict[str, Any] = {}
        gevent.sleep(max(0.0, start_at - time.time()))
        if self.cfg.engine == "k6":
            extra = self._run_k6(load, users, rate, dur, openm)
        else:
            self._run_users(load, users, dur, environment)
        out = self._finish(window_id, bool(p.get("last")), extra)
        # The request step's span: its scalar results (requests, successes, ...) as attributes.
        scalars = {
            f"swarmscope.{k}": v
            for k, v in out.get(self.name, {}).items()
            if isinstance(v, int | float | str) and not isinstance(v, bool)
        }
        spans.record(
            window_id,
            f"step {self.name}",
            int(start_at * 1e9),
            time.time_ns(),
            {
                "swarmscope.node": self.name,
                "swarmscope.users": users,
                "swarmscope.model": p["model"],
                **scalars,
            },
        )
        return out

    def stop_window(self, window_id: str) -> None:
        if self.active is not None and window_id not in self._done:
            self._done[window_id] = self._finish(window_id, True, {})[self.name]

    def take(self, window_id: str, node_names: list[str] | None = None) -> dict[str, Any]:
        r = self._done.pop(window_id, None)
        return {self.name: r} if r is not None else {}

    def close(self) -> None:
        if self.active is not None:
            self.active.stop()
        if self._fault is not None:
            self._fault.cancel()
        if self.target is not None:
            self.target.close()
            self.target = None

    # -- a window ---------------------------------------------------------------------------
    def _start(self, window_id: str, t0: float, n_steps: int, openm: bool) -> Any:
        from swarmscope.workers.http_users import WindowLoad

        cfg = self.cfg
        keep = cfg.fault != "none" and self.index == 0
        rec = StepRecorder(cfg.step_duration, t0, keep_timeline=keep, n_steps=n_steps)
        self.active = WindowLoad(rec, self.base_url, cfg.path, "open" if openm else "closed")
        if self.target is not None:
            self._log_before = self.target.access_log_count()
        if keep and self._fault is None:
            from swarmscope.targets.faults import fault_kwargs, make_fault

            self._fault = make_fault(
                cfg.fault, at_s=cfg.fault_at, target=self.target, **fault_kwargs(cfg.fault, cfg)
            )
            self._fault.arm(t0)  # fault_at counts from the first step's start
        return self.active

    def _run_users(self, load: Any, users: int, dur: float, environment: Any) -> None:
        import gevent
        from gevent.pool import Group

        from swarmscope.workers.http_users import FloodUser

        group = Group()
        load.start_cpu_meter()
        running = [FloodUser(environment) for _ in range(users)]
        for u in running:
            u.start(group)
        end = load.recorder.t0 + dur
        if load.budget is None:
            gevent.sleep(max(0.0, end - time.time()))
        else:  # count mode: until every budgeted request is recorded, step_duration at most
            budget = load.budget
            while load.recorded() < budget and time.time() < end:
                gevent.sleep(0.02)
            load.elapsed_s = time.time() - load.recorder.t0
        load.stop()
        # Graceful: a user between requests is killed, one in a request finishes it (and
        # records it) first, as Locust's own stop with a stop timeout does.
        for u in running:
            u.stop(force=False)
        if not group.join(timeout=float(self.cfg.stop_timeout_s)):
            log.warning("ingress: users still in a request after the stop timeout; killed")
            group.kill(block=True)

    def _next_backends(self, window_id: str) -> None:
        """Reload onto the next step's replicas now, so the LB pids sent with these results
        (which the probe samples in the next window) are the workers that will serve it."""
        from swarmscope.kinds.ingress_flood.config import backends_of

        step = self._step_of.pop(window_id, None)
        if step is not None and step + 1 < len(self.cfg.steps):
            try:
                self.target.use_backends(backends_of(self.cfg, step + 1))
            except SwarmscopeError as e:
                log.warning("ingress: backends for step %d: %s (retried at its start)", step + 1, e)

    def _run_k6(self, load: Any, users: int, rate: float, dur: float, openm: bool) -> dict[str, Any]:
        from swarmscope.workers.k6 import run_k6

        load.stop()  # k6 generates, not this process's users
        step = round(rate) if openm else users
        budget = load.budget  # count mode: this worker's share, k6's shared iterations
        if step < 1 or budget == 0:
            if budget is not None:
                load.elapsed_s = 0.0
            return {"k6_dropped_iterations": 0}
        out = Path(tempfile.mkdtemp(prefix="ss-k6-"))
        try:
            res = run_k6(
                self.base_url + self.cfg.path, [step], dur, "open" if openm else "closed", out,
                max_vus=users, keep_timeline=load.recorder.keep_timeline,
                iterations=None if budget is None else [budget], k6=self.k6,
            )  # fmt: skip
        finally:
            shutil.rmtree(out, ignore_errors=True)
        load.recorder = res.recorder
        if budget is not None:  # from k6's first send to its last answer (its start-up excluded)
            st = list(res.recorder.steps.values())
            first = min((s.first_t for s in st), default=0.0)
            load.elapsed_s = max((s.last_t for s in st), default=0.0) - first
        return {"k6_dropped_iterations": res.dropped_iterations}

    def _finish(self, window_id: str, last: bool, extra: dict[str, Any]) -> dict[str, Any]:
        load, self.active = self.active, None
        load.stop()
        rec: StepRecorder = load.recorder
        out: dict[str, Any] = {**extra, "engine": self.cfg.engine}
        if load.elapsed_s is not None:  # count mode: the time this worker's share took
            out["elapsed_s"] = load.elapsed_s
        if self.index == 0:
            out["url"] = self.base_url
            out["preflight_requests"], self.preflight_requests = self.preflight_requests, 0
            if self.network_baseline is not None:
                out["network_baseline"], self.network_baseline = self.network_baseline, None
        if self.target is not None:
            out["server_requests"] = self._settled_log_count() - self._log_before
            out["backends"] = self.target.backends_used
            if not last and self.cfg.backends and len(self.cfg.backends) > 1:
                self._next_backends(window_id)
            out["lb_pids"] = self._lb_pids_settled(timeout_s=1.0)
            out["restarts"] = [list(r) for r in self.target.restarts]
            if self._by_step:  # locust -f count steps: each step's own log lines
                out["server_requests_by_step"], self._by_step = self._by_step, {}
        if self._fault is not None:
            self._timeline.extend(rec.timeline)
            out["faults"] = self._fault_records(last)
            # The faults that struck in this window, whether or not their record (which waits
            # for the recovery) goes with it: a kill's unlogged replies belong to this window.
            struck, self._fault_struck = self._fault.records[self._fault_struck :], len(self._fault.records)
            out["faults_struck"] = [r["name"] for r in struck if "error" not in r]
        rec.timeline = []  # downtime is computed here: the timeline stays on the worker
        requests = sum(s.requests for s in rec.steps.values())
        failures = sum(sum(s.failures.values()) for s in rec.steps.values())
        out.update(generated=requests - failures, requests=requests, failures=failures, recorder=rec.encode())
        return {self.name: out}

    def _settled_log_count(self) -> int:
        """The access-log lines once the log stops growing: nginx writes a line after its
        response, and another worker's last responses may still be on their way."""
        last, since, deadline = self.target.access_log_count(), time.monotonic(), time.monotonic() + 10
        while time.monotonic() - since < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)
            n = self.target.access_log_count()
            if n != last:
                last, since = n, time.monotonic()
        return last

    def _fault_records(self, last: bool) -> list[dict[str, Any]]:
        """Fault records not yet sent whose recovery is known (or the run is over), with the
        client-observed downtime from this worker's request timeline."""
        out = []
        for r in self._fault.records[self._fault_sent :]:
            d = downtime(self._timeline, r["at"]) if "error" not in r else {}
            if d and d.get("downtime_s") and d.get("recovery_s") is None and not last:
                break  # not recovered yet: report it with a later window, when it is known
            out.append({**r, **d, "restart_delay_s": self.cfg.restart_delay_s})
            self._fault_sent += 1
        if self._fault_sent == len(self._fault.records) and self._fault.records:
            self._timeline = []  # every fault reported: the timeline is no longer needed
        return out
