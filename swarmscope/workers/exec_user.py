"""ExecStormUser: the Locust user of the exec storm.

    # scenarios/exec_storm.py
    from swarmscope.app import plugin
    from swarmscope.workers.exec_user import ExecStormUser
    plugin.install("exec_storm")

Each user is bound to one node of its worker (round-robin) and runs back-to-back bursts of
``--ss-burst-s`` seconds with ``--ss-concurrency`` execs in flight, each burst one Locust
request (type EXEC, name "burst <node>", response_length = execs). The exact count goes to the
worker's tally of the current window; a burst cut short by the test's stop is stopped and still
counted (the worker finishes it at test stop).
"""

from __future__ import annotations

import time
from typing import Any

import gevent
from locust import User, constant, task

from swarmscope.workers.driver import report_request


class ExecStormUser(User):
    wait_time = constant(0)

    def on_start(self) -> None:
        proc = self.environment.swarmscope
        self.worker = proc.worker
        self.node = self.worker.next_node()
        # The master's --ss-* options reach workers in Locust's spawn message (parsed_options).
        opts = self.environment.parsed_options
        self.burst_s = float(getattr(opts, "ss_burst_s", None) or proc.cfg.burst_s)
        self.concurrency = int(getattr(opts, "ss_concurrency", None) or proc.cfg.concurrency)

    @task
    def burst(self) -> None:
        window = self.worker.current_window
        if not window:
            gevent.sleep(0.05)  # the window opens at test start; a worker may see users first
            return
        t0 = time.perf_counter()
        handle = self.worker.start(window, self.node, self.burst_s, self.concurrency)
        try:
            result = self.worker.finish(handle)
        except gevent.GreenletExit:
            handle.stop()  # the worker waits for it and counts it at test stop
            raise
        except Exception as e:
            report_request(self.environment, "EXEC", f"burst {self.node.name}", None, 0, e)
            return
        report_request(self.environment, "EXEC", f"burst {self.node.name}", t0, int(result.execs), None)

    def context(self) -> dict[str, Any]:
        return {"node": self.node.name}
