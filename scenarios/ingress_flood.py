"""Locustfile for the ingress flood: steps of users (closed) or arrival rates (open).

    locust -f scenarios/ingress_flood.py --headless --ss-steps 10,50 --ss-step-duration 5 \\
        --stop-timeout 5                       # no --host: a worker starts the local nginx target
    locust -f scenarios/ingress_flood.py --master --headless --expect-workers 2 --stop-timeout 5
    locust -f scenarios/ingress_flood.py --worker                            # (twice)
    locust -f scenarios/ingress_flood.py --headless --ss-steps 100,200 --ss-requests 1000 \
        --ss-backends 1,2 --stop-timeout 5      # boom's -n: each step ends on its exact count

Each test start/stop is one window; the workers' HdrHistograms are merged exactly on the
master and the report (per-step rows, faults, the nginx log check) goes in the run directory.
Options: ``swarmscope run scenarios/ingress_flood.yaml --explain`` lists every one (key K is
``--ss-K`` here; Locust's ``--help`` cannot list them, docs/doors.md).
"""

from swarmscope.app import plugin
from swarmscope.workers.http_users import FloodUser, StepShape

plugin.install("ingress_flood")

__all__ = ["FloodUser", "StepShape"]
