"""Exec storm locustfile: ``locust -f scenarios/exec_storm.py --headless -u 4 -r 4 -t 10s`` (as root).

Every user bursts exec() of a tiny static binary on its node (a simulated node = a cgroup v2
child on one machine; the real node in a cluster). At test stop swarmscope prints, per node,
what the workers generated, what the kernel counted and what the tracer under test reported
(``--ss-tracer bpftrace``). Options:
``swarmscope run scenarios/exec_storm.yaml --explain`` (key K is ``--ss-K`` here; docs/doors.md).
"""

from swarmscope.app import plugin
from swarmscope.workers.exec_user import ExecStormUser

plugin.install("exec_storm")

__all__ = ["ExecStormUser"]
