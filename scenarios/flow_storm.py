"""Flow storm locustfile: ``locust -f scenarios/flow_storm.py --headless -u 1 -r 1 -t 10s`` (as root).

FlowStormUser users send UDP bursts over distinct 5-tuples between two network namespaces
their worker makes; the probe's ``flow_count`` program counts packets and bytes per flow on the
receiving end. At test stop swarmscope prints, per node, generated against the kernel.
Options: ``swarmscope run scenarios/flow_storm.yaml --explain`` (key K is ``--ss-K`` here, e.g.
``--ss-flows``; Locust's ``--help`` cannot list them, docs/doors.md).
A burst still sending at test stop is stopped and counted exactly (tests/test_flow_storm_locust.py).
"""

from swarmscope.app import plugin
from swarmscope.workers.flow_user import FlowStormUser

plugin.install("flow_storm")

__all__ = ["FlowStormUser"]
