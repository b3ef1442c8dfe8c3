"""Locustfile for the ingress flood: steps of users (closed) or arrival rates (open).

    locust -f scenarios/ingress_flood.py --host http://127.0.0.1:8080 --ss-steps 100,200,300 \\
        --ss-step-duration 30 --headless --ss-out steps.json
    locust -f scenarios/ingress_flood.py --ss-model open --ss-steps 500,1000 ...   # req/s

User and shape come from swarmscope.workers.http_users; each worker keeps one HdrHistogram per
step and the master merges them exactly (written to --ss-out as per-step rows).
"""

from swarmscope.workers.http_users import FloodUser, StepShape

__all__ = ["FloodUser", "StepShape"]
