"""Locust locustfile: neighbor writers as Locust users against a NeighborStore control plane.

    locust -f scenarios/neighbor_writes.py --headless -u 4 -r 4 -t 10s \
        --host 127.0.0.1:PORT --neighbor-batch 1000

Each user owns a disjoint block of generated neighbors (10.64.0.0/10 + user index × block) and
writes them in put-batch messages; every batch is one Locust request (type "grpc", name
"PutBatch", response_length = entries), timed from send to the durable-commit ack. A user
stops when its block is written (``--neighbors-per-user``). grpcio needs
``grpc.experimental.gevent.init_gevent()`` before any channel in a gevent-patched process.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import grpc
import grpc.experimental.gevent as grpc_gevent
from locust import User, events, task
from locust.exception import StopUser

grpc_gevent.init_gevent()

from swarmscope.targets.neighbors import records as R  # noqa: E402
from swarmscope.v1 import neighbors_pb2 as pb  # noqa: E402
from swarmscope.v1 import neighbors_pb2_grpc as pbg  # noqa: E402

_ids = itertools.count()


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--neighbor-batch", type=int, default=1000, help="entries per put-batch request")
    parser.add_argument("--neighbors-per-user", type=int, default=100_000, help="entries each user writes")


class NeighborWriterUser(User):
    """One writer: a gRPC channel, a block of neighbors, one PutBatch request per task run."""

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        self.batch = getattr(opts, "neighbor_batch", 1000)
        self.quota = getattr(opts, "neighbors_per_user", 100_000)
        self.base = next(_ids) * self.quota
        self.done = 0
        self.channel = grpc.insecure_channel(self.host)
        self.stub = pbg.NeighborStoreStub(self.channel)

    def on_stop(self) -> None:
        self.channel.close()

    @task
    def put_batch(self) -> None:
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
        self.environment.events.request.fire(
            request_type="grpc",
            name="PutBatch",
            response_time=(time.perf_counter() - t0) * 1000,
            response_length=n,
            exception=exc,
            context={},
        )
        if exc is None:
            self.done += n
