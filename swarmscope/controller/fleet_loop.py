"""A grpc.aio server on an asyncio event loop of its own thread, driven from synchronous code.

    loop = AioServerThread("fleet")
    port = loop.start(lambda server: add_ProbeControlServicer_to_server(svc, server),
                      bind="127.0.0.1:0", options=[...], credentials=None)
    loop.post(fn, arg)     # run fn(arg) on the loop, from any thread (asyncio is not thread-safe)
    loop.stop(grace_s=1.0)

Why a thread of its own: the fleet's callers (the sweep, the run pipeline, tests) are
synchronous and block on windows; the server's streams live on the loop, one task per stream
instead of one OS thread per stream.

Caveat: grpc.aio does not run inside a gevent-patched process (a Locust process); there the
fleet runs in a child process (controller/fleet_proc.py) and this runs in that child.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import functools
import socket
import termios
import threading
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from swarmscope.core.errors import FleetError
from swarmscope.core.wire import Reassembly
from swarmscope.v1 import probe_pb2 as pb

_gevent_ready = False


class AioServerThread:
    """One event loop in one daemon thread, holding one grpc.aio server."""

    def __init__(self, name: str):
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: grpc.aio.Server | None = None

    def start(
        self,
        add: Callable[[grpc.aio.Server], None],
        bind: str,
        options: list[tuple[str, Any]],
        credentials: grpc.ServerCredentials | None = None,
    ) -> int:
        """Start the loop and the server on it; return the bound port (FleetError if none)."""
        loop = asyncio.new_event_loop()
        started: dict[str, Any] = {}
        ready = threading.Event()

        async def serve() -> None:
            try:
                server = grpc.aio.server(options=options)
                add(server)
                if credentials is not None:
                    port = server.add_secure_port(bind, credentials)
                else:
                    port = server.add_insecure_port(bind)
                await server.start()
                drain_handoff(asyncio.get_running_loop())
                self._server = server
                started["port"] = port
            except Exception as e:  # reported to start()'s caller, in its thread
                started["error"] = e
            finally:
                ready.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            task = loop.create_task(serve())  # referenced: a task nobody holds may be collected
            loop.run_forever()
            task.cancel()
            loop.close()

        self.loop = loop
        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        ready.wait(30)
        err = started.get("error")
        port = int(started.get("port", 0))
        if err is not None or port == 0:
            self.stop(0)
            from swarmscope.core.errors import SetupError
            from swarmscope.core.sys.ports import check_free

            host, _, p = bind.rpartition(":")
            try:  # grpc says "Failed to bind": say whether the port is taken, and by whom
                if p.isdigit():
                    check_free(host.strip("[]"), int(p), "probes (gRPC)", "grpc_bind; a relay: --bind")
            except SetupError as taken:  # a FleetError: the fleet process sends those back whole
                raise FleetError(str(taken)) from err
            raise FleetError(f"cannot listen on {bind} for probes: {err or 'address in use?'}") from err
        return port

    def on_loop(self) -> bool:
        return self._thread is threading.current_thread()

    def post(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop: now if called from it, else as soon as it can."""
        if self.loop is None:
            return
        if self.on_loop():
            fn(*args)
        else:
            try:
                self.loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:
                pass  # the loop is closed: the server is gone, nobody is left to receive

    def stop(self, grace_s: float = 1.0) -> None:
        loop, server, thread = self.loop, self._server, self._thread
        self._server = None
        if loop is None or thread is None:
            return
        if server is not None and loop.is_running():
            fut = asyncio.run_coroutine_threadsafe(server.stop(grace_s), loop)
            try:
                fut.result(grace_s + 5)
            except Exception:
                pass
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(grace_s + 5)
        self.loop = None
        self._thread = None


def drain_handoff(loop: asyncio.AbstractEventLoop) -> int:
    """Take grpc.aio's completions by the batch on ``loop``: returns the readers rewrapped (0: none).

    grpc.aio's poller thread queues each completion and writes one byte to a socket pair; the
    loop's reader for it (``PollerCompletionQueue._handle_events``) reads one byte and runs every
    completion queued. With thousands of completions a second that is one more loop iteration,
    epoll_wait and recv per completion, most of them finding the queue already empty (about a
    fifth of the loop's samples at 10,000 probes, docs/scale-out.md). The wrapper reads all but
    the last byte first, then lets grpc read that one and run the queue: every completion whose
    byte was read has been queued before the run, so none is left waiting.

    Caveat: relies on grpc.aio's reader being a ``functools.partial`` of a method named
    ``_handle_events`` on a ``socket.socket`` (grpcio 1.76) and on the loop's selector map; when
    either is not what it expects it changes nothing. Loops of other fleets in the process share
    the socket: the wrappers take turns (``_drain_lock``), and a byte that an unwrapped reader
    took first ends this call (that reader runs the queue)."""
    selector = getattr(loop, "_selector", None)
    if selector is None:
        return 0
    wrapped = 0
    for key in list(selector.get_map().values()):
        reader = key.data[0] if isinstance(key.data, tuple) else None
        handle = getattr(reader, "_callback", None)
        sock = key.fileobj
        if not (isinstance(handle, functools.partial) and isinstance(sock, socket.socket)):
            continue
        if getattr(handle.func, "__name__", "") != "_handle_events":
            continue
        loop.remove_reader(sock)
        loop.add_reader(sock, _drained, sock, handle, array.array("i", [0]))
        wrapped += 1
    return wrapped


# One drain at a time in the process: two loops' wrappers must not interleave. Without it, both
# could read "all but the last" byte, leaving none for either handle() (BlockingIOError in
# both), and nobody would run the queue: completions stranded, streams silent until their
# liveness ran out (seen with two fleets in one process, tests/test_fleet_gc.py).
_drain_lock = threading.Lock()


def _drained(sock: socket.socket, handle: Callable[[], None], count: array.array[int]) -> None:
    with _drain_lock:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, count)  # bytes waiting: completions queued
        try:
            if count[0] > 1:
                sock.recv(count[0] - 1)
            handle()  # reads the last byte, then runs the queue
        except BlockingIOError:
            # An unwrapped reader (grpc's own, on a loop this did not rewrap) took the last byte
            # after this read its others: it runs the queue, after every event whose byte this
            # took had been queued.
            pass


def grpc_for_gevent() -> None:
    """Make grpc cooperate with gevent when this process is monkey-patched (Locust)."""
    global _gevent_ready
    if _gevent_ready:
        return
    try:
        from gevent import monkey

        patched = monkey.is_module_patched("threading")
    except ImportError:
        patched = False
    if patched:
        import grpc.experimental.gevent as grpc_gevent

        grpc_gevent.init_gevent()
    _gevent_ready = True


def gevent_patched() -> bool:
    try:
        from gevent import monkey
    except ImportError:
        return False
    return bool(monkey.is_module_patched("threading"))


def refuse(context: grpc.aio.ServicerContext, code: grpc.StatusCode, details: str) -> None:
    """End the call with ``code`` once the handler returns, without ``context.abort()``: abort
    raises, and the exception's traceback (a cycle through the handler's frame, the request
    and its bytes) lives until a full collection, which a fleet makes rare (fleet_gc): ~22 KB
    plus the message per refused call, measured by bench/abuse.py."""
    context.set_code(code)
    context.set_details(details)


def parse_request(cls: Any, raw: bytes, context: grpc.aio.ServicerContext) -> Any:
    """The message, or None with the call set to end as INVALID_ARGUMENT."""
    try:
        return cls.FromString(raw)
    except DecodeError:
        refuse(context, grpc.StatusCode.INVALID_ARGUMENT, f"not a {cls.DESCRIPTOR.full_name}")
        return None


def probe_control_handlers(svc: Any) -> grpc.GenericRpcHandler:
    """ProbeControl with requests parsed here: a message that does not parse is the caller's
    INVALID_ARGUMENT, not the UNKNOWN grpc.aio makes of a deserializer's exception."""

    def unary(cls: Any, fn: Any, reply: Any) -> grpc.RpcMethodHandler:
        async def call(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            request = parse_request(cls, raw, context)
            return reply() if request is None else await fn(request, context)

        return grpc.unary_unary_rpc_method_handler(call, response_serializer=reply.SerializeToString)

    return grpc.method_handlers_generic_handler(
        "swarmscope.v1.ProbeControl",
        {
            "Hello": unary(pb.HelloRequest, svc.Hello, pb.HelloReply),
            "Register": unary(pb.RegisterRequest, svc.Register, pb.RegisterReply),
            # Commands are serialized when queued (fleet_state.put_all): written as they are.
            "Session": grpc.stream_stream_rpc_method_handler(svc.Session),
        },
    )


async def read_loop(
    context: grpc.aio.ServicerContext,
    handle: Callable[[pb.ProbeMessage], None],
    bad: list[str],
    hung_up: Callable[[], None],
) -> None:
    """A Session's reads, in a task of their own: each message parsed (parts joined) and handed
    to ``handle`` until the stream ends; a message that does not parse is named in ``bad`` and ends it.
    ``context.read()``, not the request iterator: one async-generator step less per message."""
    read, parse, eof = context.read, pb.ProbeMessage.FromString, grpc.aio.EOF
    joined = Reassembly()  # a message larger than the wire limit comes in parts (core/wire.py)
    try:
        while True:
            raw = await read()
            if raw is eof:
                return
            try:
                msg = parse(raw)
            except DecodeError:
                bad.append("not a swarmscope.v1.ProbeMessage")
                return
            if msg.HasField("part"):
                try:
                    whole = joined.add(msg)
                except FleetError as e:
                    bad.append(str(e))
                    return
                if whole is None:
                    continue
                msg = whole
            handle(msg)
    except (grpc.RpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
        pass  # stream ended; liveness marks the probe dead
    finally:
        hung_up()
