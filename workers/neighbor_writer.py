"""Neighbor writer: the load of the neighbor scenario, a gRPC client of the NeighborStore API.

    w = NeighborWriter("127.0.0.1:PORT", token)    # token: the control plane's (default: env)
    t = w.write(keys, values, batch=5000)   # one PutBatch stream; WriteTiming per batch
    t.sends_ns, t.acks_ns, t.counts, t.revisions

    SWARMSCOPE_NEIGHBORS_TOKEN=... python -m swarmscope.workers.neighbor_writer \
        --control-plane ADDR -n 100000 --out t.json

Entries go out packed (keys/values bytes per batch message) on one bidirectional stream; the
send time of each batch (CLOCK_MONOTONIC, just before it is handed to gRPC) and the time its
acknowledgement (durable commit) arrived are recorded, so every entry's write time is known:
the entries of a batch share its times. Several writers may run at once (Locust users).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import grpc

from swarmscope.errors import LoadGenError
from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.server import connect
from swarmscope.v1 import neighbors_pb2 as pb
from swarmscope.v1 import neighbors_pb2_grpc as pbg


@dataclass
class WriteTiming:
    counts: list[int] = field(default_factory=list)  # entries per batch
    sends_ns: list[int] = field(default_factory=list)
    acks_ns: list[int] = field(default_factory=list)
    revisions: list[int] = field(default_factory=list)
    commits_ns: list[int] = field(default_factory=list)  # server's commit time (same host clock)

    @property
    def entries(self) -> int:
        return sum(self.counts)


class NeighborWriter:
    def __init__(self, address: str, token: str | None = None):
        self.channel = connect(address, token)
        self.stub = pbg.NeighborStoreStub(self.channel)

    def write(self, keys: bytes, values: bytes, batch: int = 5000, timeout: float = 600) -> WriteTiming:
        n = R.check(keys, values)
        t = WriteTiming()

        def requests() -> Iterator[pb.NeighborBatch]:
            for a in range(0, n, batch):
                b = min(n, a + batch)
                msg = pb.NeighborBatch(keys=keys[a * 4 : b * 4], values=values[a * 12 : b * 12])
                t.counts.append(b - a)
                now = time.monotonic_ns()
                t.sends_ns.append(now)
                msg.client_ns = now
                yield msg

        try:
            for ack in self.stub.PutBatch(requests(), timeout=timeout):
                t.acks_ns.append(time.monotonic_ns())
                t.revisions.append(ack.revision)
                t.commits_ns.append(ack.server_ns)
        except grpc.RpcError as e:
            raise LoadGenError(
                f"PutBatch failed after {len(t.acks_ns)} acks: {e.code().name} {e.details()}"
            ) from e
        if len(t.acks_ns) != len(t.counts):
            raise LoadGenError(f"PutBatch: {len(t.counts)} batches sent, {len(t.acks_ns)} acknowledged")
        return t

    def put(self, ip: int, value: bytes) -> int:
        return int(self.stub.Put(pb.PutRequest(neighbor=pb.Neighbor(ip=ip, value=value))).revision)

    def delete(self, ip: int) -> int:
        return int(self.stub.Delete(pb.DeleteRequest(ip=ip)).revision)

    def status(self) -> pb.StatusResponse:
        return self.stub.Status(pb.StatusRequest())

    def close(self) -> None:
        self.channel.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write generated neighbors to a NeighborStore")
    ap.add_argument("--control-plane", required=True)
    ap.add_argument("-n", type=int, required=True)
    ap.add_argument("--start", type=int, default=0, help="index of the first generated neighbor")
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--out", default="-", help="timing JSON file ('-' = stdout)")
    ns = ap.parse_args(argv)
    keys, values = R.make_entries(ns.n, ns.start)
    w = NeighborWriter(ns.control_plane)
    w.status()  # connect before the clock starts
    t = w.write(keys, values, ns.batch)
    w.close()
    text = json.dumps(asdict(t))
    if ns.out == "-":
        print(text)
    else:
        with open(ns.out, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
