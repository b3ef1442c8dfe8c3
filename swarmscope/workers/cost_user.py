"""CostUser: the Locust user of ``ebpf_cost`` (``locust -f scenarios/ebpf_cost.py``).

    locust -f scenarios/ebpf_cost.py --headless -u 1 -r 1 -t 10s --ss-tools seccomp,open

Each task run is one busy loop (``while true; do cat /dev/null; done``) in the worker's node for
``duration_s``, one Locust request (type "loop", name "cat /dev/null", response_length = execs);
its exact exec count goes to the driver's tally of the current window, a loop cut by the test's
stop included. The window is one ``busy`` phase; the tools watch the node from set-up on.
Caveat: several users run their loops side by side in the one node (still counted exactly).
"""

from __future__ import annotations

from locust import User, constant, task

from swarmscope.workers.driver import recorded_call


class CostUser(User):
    wait_time = constant(0)

    def on_start(self) -> None:
        proc = self.environment.swarmscope
        self.driver = proc.worker
        self.duration_s = float(proc.cfg.duration_s)

    @task
    def loop(self) -> None:
        recorded_call(self.environment, self.driver, "loop", "cat /dev/null",
                      lambda _w, rec: self.driver.busy_loop(self.duration_s, rec))  # fmt: skip
