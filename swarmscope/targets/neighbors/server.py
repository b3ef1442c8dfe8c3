"""Reference neighbor control plane: the NeighborStore gRPC service over a durable Store.

    SWARMSCOPE_NEIGHBORS_TOKEN=... python -m swarmscope.targets.neighbors.server --db /tmp/n.db
    # prints "LISTENING 127.0.0.1:<port>" on stdout once it accepts calls
    cp = start_server("/tmp/n.db")        # the same as a subprocess with a fresh token
    stub = pbg.NeighborStoreStub(connect(cp.address, cp.token))

Authentication is the probe fleet's (``swarmscope.core.grpcauth.Guard``: the shared token on every
call; the token from ``$SWARMSCOPE_NEIGHBORS_TOKEN`` or ``--token-file``, never the command
line). Limits, so a client cannot take the server down: messages up to ``MAX_MESSAGE_BYTES``
both ways, at most ``MAX_BATCH_ENTRIES`` entries per message and ``MAX_PAGE`` per List page,
a call-rate cap and a write-rate cap (messages/s, PutBatch messages included), at most
``MAX_WATCHERS`` watchers and ``MAX_CONCURRENT_RPCS`` calls at once, a bounded queue per
watcher (a watcher that falls behind is ended with RESOURCE_EXHAUSTED), and a compacted log
(a List or Watch from before the compaction base is OUT_OF_RANGE: list now, watch from there).

Watch fan-out: every watcher has its own queue, filled under the commit lock, so each sees
every transaction once and in revision order; history (revision > start) is read from SQLite
first. Large transactions are streamed in pages of at most ``page_size`` entries.
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any, NamedTuple

import grpc

from swarmscope.core import auth
from swarmscope.core.errors import LoadGenError, SwarmscopeError
from swarmscope.core.grpcauth import Guard, RateLimit, token_channel
from swarmscope.core.sys import owners
from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.store import DURABILITY, Compacted, Store
from swarmscope.v1 import neighbors_pb2 as pb
from swarmscope.v1 import neighbors_pb2_grpc as pbg

log = logging.getLogger(__name__)
TOKEN_ENV = "SWARMSCOPE_NEIGHBORS_TOKEN"
PAGE = 65536  # entries per streamed message by default: 1 MiB of packed records
MAX_PAGE = 1_000_000  # a client's page_size is capped here (16 MiB of records per message)
MAX_BATCH_ENTRIES = R.MAX_BATCH_ENTRIES  # entries (or deleted keys) in one put-batch message
MAX_MESSAGE_BYTES = 32 << 20  # a full batch or page (16 MiB) fits; nothing near the old 64 MiB
MAX_WATCHERS = 64
MAX_CONCURRENT_RPCS = 256
CALLS_PER_S = 5000.0  # far above what fsync'd commits allow; a flood is refused cheaply
WRITES_PER_S = 5000.0
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


class ControlPlane(NamedTuple):
    """A control plane started by :func:`start_server`."""

    proc: subprocess.Popen[str]
    address: str
    token: str
    socket: str = ""  # the Unix-socket fast path (ipc.py), when started with one


def connect(address: str, token: str | None = None) -> grpc.Channel:
    """A channel to a control plane, every call carrying its token (default: from the env)."""
    return token_channel(address, token or auth.load_token(env=TOKEN_ENV), GRPC_OPTIONS)


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
    def __init__(self, store: Store, writes_per_s: float | None = WRITES_PER_S):
        self.store = store
        self.writes = RateLimit(writes_per_s, 2 * writes_per_s) if writes_per_s else None

    def _write_allowed(self, context: Any) -> None:
        if self.writes is not None and not self.writes.take():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "write rate over the server's cap")

    def Put(self, request: pb.PutRequest, context: Any) -> pb.WriteResponse:
        n = request.neighbor
        if len(n.value) != R.VALUE_SIZE:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"value must be {R.VALUE_SIZE} bytes")
        self._write_allowed(context)
        existed = self.store.get(n.ip) is not None
        rev = self.store.commit(R.pack_keys([n.ip]), n.value)
        return pb.WriteResponse(revision=rev, existed=existed)

    def PutBatch(self, request_iterator: Iterator[pb.NeighborBatch], context: Any) -> Iterator[pb.BatchAck]:
        for b in request_iterator:
            if max(len(b.keys), len(b.deleted)) > MAX_BATCH_ENTRIES * R.KEY_SIZE:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"more than {MAX_BATCH_ENTRIES} entries in one message"
                )
            self._write_allowed(context)
            try:
                rev = self.store.commit(b.keys, b.values, b.deleted)
            except ValueError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            yield pb.BatchAck(revision=rev, count=len(b.keys) // R.KEY_SIZE, server_ns=time.monotonic_ns())

    def Delete(self, request: pb.DeleteRequest, context: Any) -> pb.WriteResponse:
        self._write_allowed(context)
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
        try:
            rev, keys, values = self.store.snapshot(request.revision)
        except Compacted as e:
            context.abort(grpc.StatusCode.OUT_OF_RANGE, str(e))
        yield from pages(rev, keys, values, b"", min(request.page_size or PAGE, MAX_PAGE))

    def Watch(self, request: pb.WatchRequest, context: Any) -> Iterator[pb.NeighborBatch]:
        if self.store.status()[2] >= MAX_WATCHERS:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"at most {MAX_WATCHERS} watchers")
        w, upto = self.store.watch(request.start_revision)
        context.add_callback(lambda: self.store.unwatch(w))
        history = self.store.history(request.start_revision, upto)
        try:
            try:
                for rev, k, v, d in history:
                    yield from pages(rev, k, v, d, PAGE)
            except Compacted as e:
                context.abort(grpc.StatusCode.OUT_OF_RANGE, f"{e}: list, then watch from its revision")
            finally:
                history.close()  # lets compaction go on even if the client stopped reading
            while context.is_active():
                try:
                    item = w.q.get(timeout=0.5)
                except queue.Empty:
                    continue
                if item is None:
                    if w.overflowed:
                        context.abort(
                            grpc.StatusCode.RESOURCE_EXHAUSTED,
                            "watcher fell too far behind (its queue is bounded): list and watch again",
                        )
                    return
                self.store.taken(w, item)
                rev, k, v, d = item
                if rev > upto:  # anything at or below upto came from history already
                    yield from pages(rev, k, v, d, PAGE)
        finally:
            self.store.unwatch(w)

    def Status(self, request: pb.StatusRequest, context: Any) -> pb.StatusResponse:
        rev, n, w = self.store.status()
        return pb.StatusResponse(revision=rev, entries=n, watchers=w)


def serve(
    db: str,
    listen: str = "127.0.0.1:0",
    token: str = "",
    workers: int = MAX_WATCHERS + 16,  # every watcher holds a thread: the others still get some
    calls_per_s: float | None = CALLS_PER_S,
    writes_per_s: float | None = WRITES_PER_S,
    durability: str = "fsync",
) -> tuple[grpc.Server, Store, int]:
    if not token:
        raise SwarmscopeError("the neighbor control plane needs a token (it serves no anonymous calls)")
    try:
        store = Store(db, durability=durability)
    except sqlite3.Error as e:  # e.g. its directory removed by a starter stopping meanwhile
        raise LoadGenError(f"cannot open its database {db}: {e}") from e
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers),
        options=GRPC_OPTIONS,
        interceptors=[Guard(token, calls_per_s)],
        maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
    )
    pbg.add_NeighborStoreServicer_to_server(Service(store, writes_per_s), server)
    port = server.add_insecure_port(listen)
    server.start()
    return server, store, port


def start_server(
    db: str, token: str | None = None, socket_path: str = "", durability: str = "fsync"
) -> ControlPlane:
    """This server as a subprocess on a fresh port with a fresh token (or ``token``), once it
    listens (and on ``socket_path`` too, the fast path, when given). The token goes through
    the environment, never the command line."""
    token = token or auth.new_token()
    cmd = [sys.executable, "-m", "swarmscope.targets.neighbors.server", "--db", db]
    if socket_path:
        cmd += ["--socket", socket_path]
    if durability != "fsync":
        cmd += ["--durability", durability]
    env = {**os.environ, TOKEN_ENV: token}
    p = subprocess.Popen(
        owners.dying_with_us(cmd, env),
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # own session: Ctrl-C is swarmscope's to pass on
    )
    line = p.stdout.readline() if p.stdout else ""
    if not line.startswith("LISTENING"):
        p.kill()
        raise LoadGenError(f"control plane did not start (exit {p.wait()})")
    return ControlPlane(p, line.split()[1], token, socket_path)


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
    ap.add_argument("--token-file", help=f"file holding the token (default: ${TOKEN_ENV})")
    ap.add_argument("--socket", default="", help="also serve the Unix-socket fast path here (ipc.py)")
    ap.add_argument(
        "--durability",
        choices=sorted(DURABILITY),
        default="fsync",
        help="fsync: a write is answered once fsync'd (survives power loss); os: once in the OS",
    )
    ns = ap.parse_args(argv)
    try:
        token = auth.load_token(ns.token_file, env=TOKEN_ENV)
        server, store, port = serve(ns.db, ns.listen, token, durability=ns.durability)
    except SwarmscopeError as e:
        print(f"neighbor control plane: {e}", file=sys.stderr)
        return 2
    ipc = None
    if ns.socket:
        from swarmscope.targets.neighbors.ipc import IpcServer

        ipc = IpcServer(store, ns.socket, token, RateLimit(WRITES_PER_S, 2 * WRITES_PER_S))
    host = ns.listen.rsplit(":", 1)[0]
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    try:
        print(f"LISTENING {host}:{port}", flush=True)
    except BrokenPipeError:
        # Whoever started it stopped before reading the line (a Ctrl-C while the run starts): stop
        # too, quietly; stdout goes to /dev/null so the interpreter's exit flush cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        done.set()
    done.wait()
    if ipc is not None:
        ipc.close()
    server.stop(1).wait()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
