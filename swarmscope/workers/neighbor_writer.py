"""Neighbor writer: the load of the neighbor scenario, a gRPC client of the NeighborStore API.

    w = NeighborWriter("127.0.0.1:PORT", token)    # token: the control plane's (default: env)
    t = w.write(keys, values, batch=5000)   # one PutBatch stream; WriteTiming per batch
    t.sends_ns, t.acks_ns, t.counts, t.revisions

    SWARMSCOPE_NEIGHBORS_TOKEN=... python -m swarmscope.workers.neighbor_writer \
        --control-plane ADDR -n 100000 --out t.json [--socket PATH]   # PATH: the Unix fast path

Entries go out packed (keys/values bytes per batch message) on one bidirectional stream; the
send time of each batch (CLOCK_MONOTONIC, just before it is handed to gRPC) and the time its
acknowledgement (durable commit) arrived are recorded, so every entry's write time is known:
the entries of a batch share its times. Several writers may run at once (Locust users).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import grpc

from swarmscope.core import auth
from swarmscope.core.errors import LoadGenError
from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.ipc import IpcClient
from swarmscope.targets.neighbors.server import TOKEN_ENV, connect
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


def write_ipc(client: IpcClient, keys: bytes, values: bytes, batch: int = 5000) -> WriteTiming:
    """The same load over the control plane's Unix socket (targets/neighbors/ipc.py): batches
    are pipelined (sent without waiting), a thread takes the acks (durable commits) meanwhile."""
    n = R.check(keys, values)
    t = WriteTiming()
    err: list[BaseException] = []

    def acks() -> None:
        try:
            for _ in range(-(-n // batch)):
                rev, server_ns = client.ack()
                t.acks_ns.append(time.monotonic_ns())
                t.revisions.append(rev)
                t.commits_ns.append(server_ns)
        except (LoadGenError, OSError) as e:
            err.append(e)

    th = threading.Thread(target=acks, name="neighbor-acks", daemon=True)
    th.start()
    for a in range(0, n, batch):
        b = min(n, a + batch)
        t.counts.append(b - a)
        t.sends_ns.append(time.monotonic_ns())
        client.send_put(keys[a * R.KEY_SIZE : b * R.KEY_SIZE], values[a * R.VALUE_SIZE : b * R.VALUE_SIZE])
    th.join()
    if err or len(t.acks_ns) != len(t.counts):
        raise LoadGenError(f"put-batch: {len(t.counts)} sent, {len(t.acks_ns)} acknowledged: {err}")
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write generated neighbors to a NeighborStore")
    ap.add_argument("--control-plane", required=True)
    ap.add_argument("-n", type=int, required=True)
    ap.add_argument("--start", type=int, default=0, help="index of the first generated neighbor")
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--out", default="-", help="timing JSON file ('-' = stdout)")
    ap.add_argument("--socket", default="", help="write over the control plane's Unix socket instead")
    ns = ap.parse_args(argv)
    keys, values = R.make_entries(ns.n, ns.start)
    if ns.socket:
        c = IpcClient(ns.socket, auth.load_token(env=TOKEN_ENV))  # connected before the clock
        t = write_ipc(c, keys, values, ns.batch)
        c.close()
    else:
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
