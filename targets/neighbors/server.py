"""Reference neighbor control plane: the NeighborStore gRPC service over a durable Store.

    python -m swarmscope.targets.neighbors.server --db /tmp/n.db --listen 127.0.0.1:0
    # prints "LISTENING 127.0.0.1:<port>" on stdout once it accepts calls

Watch fan-out: every watcher has its own queue, filled under the commit lock, so each sees
every transaction once and in revision order; history (revision > start) is read from SQLite
first. Large transactions are streamed in pages of at most ``page_size`` entries (gRPC
messages stay well under the size limit). Caveat: a slow watcher's queue is unbounded.
"""

from __future__ import annotations

import argparse
import logging
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

from swarmscope.errors import LoadGenError
from swarmscope.sys import owners
from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.store import Store
from swarmscope.v1 import neighbors_pb2 as pb
from swarmscope.v1 import neighbors_pb2_grpc as pbg

log = logging.getLogger(__name__)
PAGE = 65536  # entries per streamed message: 1 MiB of packed records
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
]


def pages(rev: int, keys: bytes, values: bytes, deleted: bytes, page: int) -> Iterator[pb.NeighborBatch]:
    n = len(keys) // R.KEY_SIZE
    nd = len(deleted) // R.KEY_SIZE
    steps = max(1, -(-max(n, nd) // page))
    for i in range(steps):
        a, b = i * page, (i + 1) * page
        yield pb.NeighborBatch(
            keys=keys[a * R.KEY_SIZE : b * R.KEY_SIZE],
            values=values[a * R.VALUE_SIZE : b * R.VALUE_SIZE],
            deleted=deleted[a * R.KEY_SIZE : b * R.KEY_SIZE],
            revision=rev,
            last=i == steps - 1,
        )


class Service(pbg.NeighborStoreServicer):
    def __init__(self, store: Store):
        self.store = store

    def Put(self, request: pb.PutRequest, context: Any) -> pb.WriteResponse:
        n = request.neighbor
        if len(n.value) != R.VALUE_SIZE:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"value must be {R.VALUE_SIZE} bytes")
        existed = self.store.get(n.ip) is not None
        rev = self.store.commit(R.pack_keys([n.ip]), n.value)
        return pb.WriteResponse(revision=rev, existed=existed)

    def PutBatch(self, request_iterator: Iterator[pb.NeighborBatch], context: Any) -> Iterator[pb.BatchAck]:
        import time

        for b in request_iterator:
            try:
                rev = self.store.commit(b.keys, b.values, b.deleted)
            except ValueError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            yield pb.BatchAck(revision=rev, count=len(b.keys) // R.KEY_SIZE, server_ns=time.monotonic_ns())

    def Delete(self, request: pb.DeleteRequest, context: Any) -> pb.WriteResponse:
        existed = self.store.get(request.ip) is not None
        rev = self.store.commit(deleted=R.pack_keys([request.ip]))
        return pb.WriteResponse(revision=rev, existed=existed)

    def Get(self, request: pb.GetRequest, context: Any) -> pb.GetResponse:
        got = self.store.get(request.ip)
        cur = self.store.status()[0]
        if got is None:
            return pb.GetResponse(found=False, revision=cur)
        v, rev = got
        return pb.GetResponse(
            found=True, revision=cur, neighbor=pb.Neighbor(ip=request.ip, value=v, mod_revision=rev)
        )

    def List(self, request: pb.ListRequest, context: Any) -> Iterator[pb.NeighborBatch]:
        cur = self.store.status()[0]
        if request.revision > cur:
            context.abort(
                grpc.StatusCode.OUT_OF_RANGE, f"revision {request.revision} is in the future ({cur})"
            )
        rev, keys, values = self.store.snapshot(request.revision)
        yield from pages(rev, keys, values, b"", request.page_size or PAGE)

    def Watch(self, request: pb.WatchRequest, context: Any) -> Iterator[pb.NeighborBatch]:
        w, upto = self.store.watch(request.start_revision)
        context.add_callback(lambda: self.store.unwatch(w))
        try:
            for rev, k, v, d in self.store.history(request.start_revision, upto):
                yield from pages(rev, k, v, d, PAGE)
            while context.is_active():
                try:
                    item = w.q.get(timeout=0.5)
                except queue.Empty:
                    continue
                if item is None:
                    return
                rev, k, v, d = item
                if rev > upto:  # anything at or below upto came from history already
                    yield from pages(rev, k, v, d, PAGE)
        finally:
            self.store.unwatch(w)

    def Status(self, request: pb.StatusRequest, context: Any) -> pb.StatusResponse:
        rev, n, w = self.store.status()
        return pb.StatusResponse(revision=rev, entries=n, watchers=w)


def serve(db: str, listen: str = "127.0.0.1:0", workers: int = 16) -> tuple[grpc.Server, Store, int]:
    store = Store(db)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=GRPC_OPTIONS)
    pbg.add_NeighborStoreServicer_to_server(Service(store), server)
    port = server.add_insecure_port(listen)
    server.start()
    return server, store, port


def start_server(db: str) -> tuple[subprocess.Popen[str], str]:
    """This server as a subprocess on a fresh port; (process, "127.0.0.1:<port>") once it listens."""
    cmd = [sys.executable, "-m", "swarmscope.targets.neighbors.server", "--db", db]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=owners.die_with_parent)
    line = p.stdout.readline() if p.stdout else ""
    if not line.startswith("LISTENING"):
        p.kill()
        raise LoadGenError(f"control plane did not start (exit {p.wait()})")
    return p, line.split()[1]


def stop(p: subprocess.Popen[str]) -> None:
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="reference neighbor control plane (gRPC + SQLite WAL)")
    ap.add_argument("--db", required=True)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ns = ap.parse_args(argv)
    server, store, port = serve(ns.db, ns.listen)
    host = ns.listen.rsplit(":", 1)[0]
    print(f"LISTENING {host}:{port}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop(1).wait()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
