"""eBPF cost locustfile: ``locust -f scenarios/ebpf_cost.py --headless -u 1 -r 1 -t 10s`` (as root).

CostUser users run the write-up's busy loop (``while true; do cat /dev/null; done``) in their
worker's node while the third-party eBPF tools (``--ss-tools``) watch it; the probe's bpf_stats
gives each tool program's run count, runtime and CPU over the window. At test stop swarmscope
prints the table in the write-up's columns and, per node, generated against the kernel.
One worker (one machine, one set of tools): a second is refused at set-up.
"""

from swarmscope.app import plugin
from swarmscope.workers.cost_user import CostUser

plugin.install("ebpf_cost")

__all__ = ["CostUser"]
