"""NeighborWriterUser: the Locust user of neighbor writes (``locust -f scenarios/neighbor_writes.py``).

    locust -f scenarios/neighbor_writes.py --headless -u 4 -r 4 -t 10s --ss-batch-size 1000

Each user owns a disjoint block of generated neighbors (``--ss-neighbors-per-user`` of them,
blocks disjoint across users and workers) and writes it in put-batch messages to the control
plane at ``--host``, or to one its worker's driver starts when there is none. Every batch is one
Locust request (type "grpc", name "PutBatch", response_length = entries), timed from send to
the durable-commit ack, and recorded in the driver's HdrHistogram of the current window; the
master merges the workers' histograms exactly at test stop. A user stops when its block is
written. grpc needs ``init_gevent`` before any channel in a gevent-patched process: done here.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
import grpc
import grpc.experimental.gevent as grpc_gevent
from locust import User, constant, task
from locust.exception import StopUser

grpc_gevent.init_gevent()

from swarmscope.targets.neighbors import records as R  # noqa: E402
from swarmscope.targets.neighbors.server import connect  # noqa: E402
from swarmscope.v1 import neighbors_pb2 as pb  # noqa: E402
from swarmscope.v1 import neighbors_pb2_grpc as pbg  # noqa: E402
from swarmscope.workers.driver import report_request  # noqa: E402


class NeighborWriterUser(User):
    """One writer: a gRPC channel, a block of neighbors, one PutBatch request per task run."""

    wait_time = constant(0)

    def on_start(self) -> None:
        proc = self.environment.swarmscope
        self.driver = proc.worker
        self.batch = int(proc.cfg.batch_size)
        self.quota = int(proc.cfg.neighbors_per_user)
        self.base = self.driver.next_block(self.quota)
        self.done = 0
        addr, token = self.driver.control_plane(self.host)
        self.channel = connect(addr, token)
        self.stub = pbg.NeighborStoreStub(self.channel)

    def on_stop(self) -> None:
        channel = getattr(self, "channel", None)  # None: stopped (Ctrl-C) before on_start connected
        if channel is not None:
            channel.close()

    @task
    def put_batch(self) -> None:
        window = self.driver.current_window
        if not window:
            gevent.sleep(0.05)  # the window opens at test start; a worker may see users first
            return
        n = min(self.batch, self.quota - self.done)
        if n <= 0:
            raise StopUser()
        keys, values = R.make_entries(n, start=self.base + self.done)
        t0 = time.perf_counter()
        exc: Exception | None = None
        try:
            acks = list(self.stub.PutBatch(iter([pb.NeighborBatch(keys=keys, values=values)]), timeout=30))
            if len(acks) != 1 or acks[0].count != n:
                exc = RuntimeError(f"bad ack {acks}")
        except grpc.RpcError as e:
            exc = e
        elapsed = time.perf_counter() - t0
        report_request(self.environment, "grpc", "PutBatch", t0, n, exc)
        self.driver.record(window, n, round(elapsed * 1e6), exc is None)
        if exc is None:
            self.done += n

    def context(self) -> dict[str, Any]:
        return {"block": self.base}
