"""Neighbor writes locustfile: ``locust -f scenarios/neighbor_writes.py --headless -u 4 -r 4 -t 10s``.

NeighborWriterUser users write generated neighbors in put-batches to a control plane (``--host``,
or one each worker starts); each batch is a Locust request and goes into the worker's
HdrHistogram, merged exactly on the master at test stop (``--master`` / ``--worker`` work).
Options: ``swarmscope run scenarios/neighbor_writes.yaml --explain`` (key K is ``--ss-K`` here, e.g.
``--ss-batch-size``; Locust's ``--help`` cannot list them, docs/doors.md).
"""

from swarmscope.app import plugin
from swarmscope.workers.neighbor_user import NeighborWriterUser

plugin.install("neighbor_writes")

__all__ = ["NeighborWriterUser"]
