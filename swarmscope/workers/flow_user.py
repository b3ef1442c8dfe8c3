"""FlowStormUser: the Locust user of the flow storm (``locust -f scenarios/flow_storm.py``).

    locust -f scenarios/flow_storm.py --headless -u 1 -r 1 -t 10s --ss-flows 5000

Each task run is one burst of the worker's generator over the first ``flows`` value's flows
(``packets_per_flow`` rounds, paced at ``rate_pps``, at most ``max_s``), one Locust request
(type "flows", name "burst", response_length = packets); its exact counts go to the driver's
tally of the current window. Users of one worker take turns (one source port per namespace).
A burst cut by the test's stop is stopped and still counted.
"""

from __future__ import annotations

from locust import User, constant, task

from swarmscope.workers.driver import recorded_call


class FlowStormUser(User):
    wait_time = constant(0)

    def on_start(self) -> None:
        proc = self.environment.swarmscope
        self.driver = proc.worker
        cfg = proc.cfg
        self.flows = int(cfg.flows[0])
        self.params = {
            "packets_per_flow": cfg.packets_per_flow,
            "proto": cfg.proto,
            "frame_bytes": cfg.frame_bytes,
            "rate_pps": cfg.rate_pps,
            "max_s": cfg.max_s,
        }

    @task
    def burst(self) -> None:
        recorded_call(self.environment, self.driver, "flows", "burst",
                      lambda _w, rec: self.driver.burst(0, self.flows, self.params, rec))  # fmt: skip
