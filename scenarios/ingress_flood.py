"""Locustfile for the ingress flood: steps of users (closed) or arrival rates (open).

    locust -f scenarios/ingress_flood.py --host http://127.0.0.1:8080 --ss-steps 100,200,300 \\
        --ss-step-duration 30 --headless --ss-out steps.json
    locust -f scenarios/ingress_flood.py --ss-model open --ss-steps 500,1000 ...   # req/s

Users and shape come from swarmscope.workers.http_users; each worker keeps one HdrHistogram
per step and the master merges them exactly (written to --ss-out). Select the model with
--ss-model; the unused user class is removed so Locust runs only one.
"""

import sys

from locust import events

from swarmscope.workers.http_users import ClosedHttpUser, OpenHttpUser, StepShape

__all__ = ["ClosedHttpUser", "OpenHttpUser", "StepShape"]


@events.init.add_listener
def _pick_model(environment, **_kw):
    opts = environment.parsed_options
    model = getattr(opts, "ss_model", "closed") if opts is not None else "closed"
    keep = OpenHttpUser if model == "open" else ClosedHttpUser
    environment.user_classes = [keep]
    environment.user_classes_by_name = {keep.__name__: keep}


if __name__ == "__main__":
    sys.exit("run with: locust -f scenarios/ingress_flood.py")
