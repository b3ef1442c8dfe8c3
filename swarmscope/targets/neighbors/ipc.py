"""The control plane's local fast path: a Unix socket beside gRPC, and the shared log behind it.

    srv = IpcServer(store, "/run/ss/neigh.sock", token)     # in the server process (server.py)
    c = IpcClient("/run/ss/neigh.sock", token)              # writer, agent, master-side probes
    rev, server_ns = c.put_batch(keys, values)              # durable when it returns
    c.get(key) -> (value, mod_revision) | None
    c.watch() -> (revision, tail); c.note() -> (revision, tail) after every commit

Why (docs/neighbors.md): a Python gRPC round trip costs 0.4-0.9 ms here, which is the whole of
a small batch's budget (Arion programs 1 neighbor in 15 µs). On this path the data never
crosses a socket to an agent: every commit is appended to a shared-memory log
(:mod:`shmlog`) under the store's lock, and each watcher's always-open connection gets a
16-byte note ``(revision, tail)``; the agent programs the BPF map straight from its read-only
mapping. A list is a load of ``tail``, with no round trip at all.

Frames: ``u32 length, u8 op`` then the payload. The first frame of a connection is ``H`` with
the control plane's token (constant-time compare), answered with the log's fd (SCM_RIGHTS,
read-only) and the current ``(revision, tail)``; anything else closes the connection. Ops:
``P`` put-batch ``(u32 n, u32 nd, keys, values, deleted)`` -> ``(revision, server_ns)``;
Puts already waiting on a connection (a pipelining writer) are committed together with the
one read, in one group commit (store.py), each acknowledged with its own revision.
``G`` get ``(key)`` -> ``(found, mod_revision, value)``; ``W`` watch -> ``(revision, tail)``, after
which the connection carries notes only. Limits: the gRPC side's (entries per message, write
rate, watchers) plus ``MAX_CONNECTIONS``; before the token, a hello frame of at most
``MAX_HELLO_FRAME`` bytes within ``HELLO_TIMEOUT_S``, ``MAX_UNAUTHENTICATED`` at once. A note
says "the log's tail is now T", so the latest covers every one before it: a watcher whose
socket buffer is full (about 280 notes behind; one commit per neighbor from a pipelining writer
does that) keeps its connection and gets the latest note once it reads again (a thread waits
for it to be writable). Closing it instead left its agent stopped at the last note it had. The
socket's directory is private (0700, root).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import threading
import time
from typing import TYPE_CHECKING

from swarmscope.core import auth
from swarmscope.core.errors import LoadGenError
from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.shmlog import LogFull, LogWriter

if TYPE_CHECKING:
    from swarmscope.core.grpcauth import RateLimit
    from swarmscope.targets.neighbors.store import Store

FRAME = struct.Struct("<IB")
NOTE = struct.Struct("<QQ")  # revision, tail
PUT = struct.Struct("<II")
ACK = struct.Struct("<QQ")  # revision, server_ns (CLOCK_MONOTONIC after the durable commit)
GOT = struct.Struct("<BQ")  # found, mod_revision (+ value)
MAX_FRAME = 32 << 20
MAX_CONNECTIONS = 80
# Before the token is checked: the hello frame's size, the connections waiting to send it, and
# how long one may wait (a stranger holds a thread and a buffer only this long, this small).
MAX_HELLO_FRAME = 4096
MAX_UNAUTHENTICATED = 8
HELLO_TIMEOUT_S = 5.0
MAX_WATCHERS = 64
MAX_GROUP = 64  # put frames from one connection taken into one group commit


class _Conn:
    """Framed reads over a stream socket with one buffer (few syscalls per small frame)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = bytearray()

    def frame(self, limit: int = MAX_FRAME) -> tuple[int, bytes] | None:
        """(op, payload), or None at a clean end of stream."""
        while True:
            if len(self.buf) >= FRAME.size:
                n, op = FRAME.unpack_from(self.buf)
                if n > limit:
                    raise LoadGenError(f"frame of {n} bytes (most {limit})")
                if len(self.buf) >= FRAME.size + n:
                    body = bytes(self.buf[FRAME.size : FRAME.size + n])
                    del self.buf[: FRAME.size + n]
                    return op, body
                want = FRAME.size + n - len(self.buf)
            else:
                want = FRAME.size - len(self.buf)
            chunk = self.sock.recv(min(max(want, 1 << 16), limit + FRAME.size))
            if not chunk:
                if self.buf:
                    raise LoadGenError("connection ended mid-frame")
                return None
            self.buf += chunk

    def pending_put(self) -> bytes | None:
        """The next frame's payload if it is a put already here (buffered, or readable now
        without waiting), else None; it leaves any other frame in the buffer."""
        while len(self.buf) < FRAME.size + 1 or not self._whole():
            try:
                chunk = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            if not chunk:
                break
            self.buf += chunk
        if len(self.buf) < FRAME.size or not self._whole() or self.buf[4] != ord("P"):
            return None
        f = self.frame()
        return None if f is None else f[1]

    def _whole(self) -> bool:
        n, _ = FRAME.unpack_from(self.buf)
        return n <= MAX_FRAME and len(self.buf) >= FRAME.size + n

    def send(self, op: int, payload: bytes = b"") -> None:
        self.sock.sendall(FRAME.pack(len(payload), op) + payload)


class IpcServer:
    def __init__(self, store: Store, path: str, token: str, writes: RateLimit | None = None):
        self.store, self.path, self.token, self.writes = store, path, token, writes
        self.log = LogWriter()
        self.watchers: list[socket.socket] = []
        # Watchers whose buffer was full at a note: the latest note each has not got (sent by
        # _catch_up when it can take it; under the store's lock, as the watchers list).
        self._behind: dict[socket.socket, bytes] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)  # written under the store's lock: never waits
        self._commit_ns: dict[int, int] = {}
        self.conns = 0
        self.unauthenticated = 0
        self._lock = threading.Lock()
        with store.lock:  # what the store holds already (a reopened db) is the log's first record
            if store.values:
                self.log.append(
                    store.revision, R.pack_keys(list(store.values)), b"".join(store.values.values())
                )
            store.on_commit = self._publish
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chmod(path, 0o600)
        self.sock.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, name="ipc-accept", daemon=True).start()
        threading.Thread(target=self._catch_up, name="ipc-notes", daemon=True).start()

    # -- under the store's lock, after every durable commit ------------------------------------
    def _publish(self, rev: int, keys: bytes, values: bytes, deleted: bytes) -> None:
        # The commit's time, taken before any watcher can act on it (the put's ack carries it).
        if len(self._commit_ns) > 4096:  # commits made over gRPC are never taken: bounded
            self._commit_ns.clear()
        self._commit_ns[rev] = time.monotonic_ns()
        try:
            tail = self.log.append(rev, keys, values, deleted)
        except LogFull:
            for w in self.watchers:  # they cannot follow any more: list again (over gRPC)
                w.close()
            self.watchers.clear()
            self._behind.clear()
            return
        note = FRAME.pack(NOTE.size, ord("w")) + NOTE.pack(rev, tail)
        for w in list(self.watchers):
            if w in self._behind:  # still behind: this note replaces the one it waits for
                self._behind[w] = note
                continue
            try:
                w.send(note, socket.MSG_DONTWAIT)
            except BlockingIOError:  # its buffer is full: the latest note, when it takes one
                self._behind[w] = note
                self._wake()
            except OSError:  # gone: end it
                self._drop(w)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe wakes it already
            os.write(self._wake_w, b"w")

    def _drop(self, w: socket.socket) -> None:
        """End a watch (under the store's lock)."""
        if w in self.watchers:
            self.watchers.remove(w)
        self._behind.pop(w, None)
        with contextlib.suppress(OSError):
            w.shutdown(socket.SHUT_RDWR)

    def _catch_up(self) -> None:
        """Send each watcher that fell behind its latest note once its buffer has room."""
        while not self._closed:
            with self.store.lock:
                behind = {w.fileno(): w for w in self._behind}
            p = select.poll()
            p.register(self._wake_r, select.POLLIN)
            for fd in behind:
                p.register(fd, select.POLLOUT)
            ready = p.poll()
            with self.store.lock:
                for fd, _ev in ready:
                    if fd == self._wake_r:
                        os.read(self._wake_r, 4096)
                        continue
                    w = behind.get(fd)
                    note = self._behind.get(w) if w is not None else None
                    if w is None or note is None:  # caught up or ended meanwhile
                        continue
                    try:
                        w.send(note, socket.MSG_DONTWAIT)
                        del self._behind[w]
                    except BlockingIOError:
                        continue
                    except OSError:
                        self._drop(w)

    # -- connections -----------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                if self.conns >= MAX_CONNECTIONS or self.unauthenticated >= MAX_UNAUTHENTICATED:
                    s.close()
                    continue
                self.conns += 1
                self.unauthenticated += 1
            threading.Thread(target=self._serve, args=(s,), name="ipc-conn", daemon=True).start()

    def _serve(self, s: socket.socket) -> None:
        c = _Conn(s)
        waiting = True  # counted in self.unauthenticated until the token checks
        try:
            s.settimeout(HELLO_TIMEOUT_S)
            first = c.frame(MAX_HELLO_FRAME)
            if first is None or first[0] != ord("H") or not auth.token_matches(self.token, first[1].decode()):
                return
            s.settimeout(None)
            with self._lock:
                self.unauthenticated -= 1
                waiting = False
            rfd = self.log.reader_fd()
            try:
                with self.store.lock:
                    rev, tail = self.store.revision, self.log.tail
                body = FRAME.pack(NOTE.size, ord("h")) + NOTE.pack(rev, tail)
                socket.send_fds(s, [body], [rfd])
            finally:
                os.close(rfd)
            while (f := c.frame()) is not None:
                op, body = f
                if op == ord("P"):
                    # Puts already waiting on this connection go into the same group commit.
                    bodies = [body]
                    while len(bodies) < MAX_GROUP and (more := c.pending_put()) is not None:
                        bodies.append(more)
                    for reply in self._puts(bodies):
                        c.send(*reply)
                elif op == ord("G"):
                    c.send(*self._get(body))
                elif op == ord("W"):
                    with self.store.lock:
                        if len(self.watchers) >= MAX_WATCHERS:
                            c.send(ord("e"), f"at most {MAX_WATCHERS} watchers".encode())
                            continue
                        self.watchers.append(s)  # notes go out under this lock, in order
                        c.send(ord("w"), NOTE.pack(self.store.revision, self.log.tail))
                    while s.recv(1 << 12):  # a watch connection only ever ends
                        pass
                    return
                else:
                    c.send(ord("e"), f"unknown op {op}".encode())
        except (OSError, LoadGenError, UnicodeDecodeError):
            pass
        finally:
            with self.store.lock:
                if s in self.watchers:
                    self.watchers.remove(s)
                self._behind.pop(s, None)
            with self._lock:
                self.conns -= 1
                self.unauthenticated -= waiting
            s.close()

    def _check_put(self, body: bytes) -> tuple[bytes, bytes, bytes] | bytes:
        """(keys, values, deleted) of a well-formed put, or the error to send back."""
        if len(body) < PUT.size:
            return b"short put"
        n, nd = PUT.unpack_from(body)
        if max(n, nd) > R.MAX_BATCH_ENTRIES:
            return f"more than {R.MAX_BATCH_ENTRIES} entries in one message".encode()
        if len(body) != PUT.size + n * (R.KEY_SIZE + R.VALUE_SIZE) + nd * R.KEY_SIZE:
            return b"malformed put"
        if self.writes is not None and not self.writes.take():
            return b"write rate over the server's cap"
        k = PUT.size + n * R.KEY_SIZE
        v = k + n * R.VALUE_SIZE
        return body[PUT.size : k], body[k:v], body[v:]

    def _puts(self, bodies: list[bytes]) -> list[tuple[int, bytes]]:
        """One reply per put, in order; the well-formed ones share one group commit."""
        checked = [self._check_put(b) for b in bodies]
        txs = [c for c in checked if isinstance(c, tuple)]
        revs = iter(self.store.commit_many(txs) if txs else [])
        out = []
        for c in checked:
            if isinstance(c, bytes):
                out.append((ord("e"), c))
                continue
            rev = next(revs)
            out.append((ord("p"), ACK.pack(rev, self._commit_ns.pop(rev, None) or time.monotonic_ns())))
        return out

    def _get(self, body: bytes) -> tuple[int, bytes]:
        if len(body) != R.KEY_SIZE:
            return ord("e"), b"a get is one 4-byte key"
        got = self.store.get(R.unpack_keys(body)[0])
        if got is None:
            return ord("g"), GOT.pack(0, 0) + bytes(R.VALUE_SIZE)
        return ord("g"), GOT.pack(1, got[1]) + got[0]

    def close(self) -> None:
        self._closed = True
        with self.store.lock:
            self.store.on_commit = None
            for w in self.watchers:
                with contextlib.suppress(OSError):
                    w.shutdown(socket.SHUT_RDWR)
            self.watchers.clear()
            self._behind.clear()
        self._wake()  # _catch_up sees _closed and ends (the pipe lives as long as the process)
        self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class IpcClient:
    """One connection to the fast path; ``log_fd`` is the shared log (read-only)."""

    def __init__(self, path: str, token: str, timeout: float = 30.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
            self.conn = _Conn(self.sock)
            self.conn.send(ord("H"), token.encode())
            msg, fds, _, _ = socket.recv_fds(self.sock, FRAME.size + NOTE.size, 1)
        except OSError as e:
            self.sock.close()
            raise LoadGenError(f"control plane socket {path}: {e}") from e
        if len(msg) != FRAME.size + NOTE.size or not fds:
            for fd in fds:
                os.close(fd)
            self.sock.close()
            raise LoadGenError(f"control plane socket {path}: refused (token?)")
        self.log_fd: int = fds[0]
        self.revision, self.tail = NOTE.unpack_from(msg, FRAME.size)
        self.sock.settimeout(None)

    def _call(self, op: str, payload: bytes, want: str) -> bytes:
        self.conn.send(ord(op), payload)
        return self._reply(want)

    def _reply(self, want: str) -> bytes:
        f = self.conn.frame()
        if f is None:
            raise LoadGenError("the control plane closed the connection")
        if f[0] != ord(want):
            raise LoadGenError(f"control plane: {f[1].decode(errors='replace')}")
        return f[1]

    def put_batch(self, keys: bytes, values: bytes, deleted: bytes = b"") -> tuple[int, int]:
        """(revision, server_ns) of the durable commit."""
        n = R.check(keys, values)
        b = self._call("P", PUT.pack(n, len(deleted) // R.KEY_SIZE) + keys + values + deleted, "p")
        rev, ns = ACK.unpack(b)
        return int(rev), int(ns)

    def send_put(self, keys: bytes, values: bytes) -> None:
        """Pipelined writes: send now, take the ack later with :meth:`ack`."""
        self.conn.send(ord("P"), PUT.pack(len(keys) // R.KEY_SIZE, 0) + keys + values)

    def ack(self) -> tuple[int, int]:
        rev, ns = ACK.unpack(self._reply("p"))
        return int(rev), int(ns)

    def get(self, key: bytes) -> tuple[bytes, int] | None:
        b = self._call("G", key, "g")
        found, rev = GOT.unpack_from(b)
        return (b[GOT.size :], int(rev)) if found else None

    def watch(self) -> tuple[int, int]:
        """Turn this connection into a watch; returns (revision, tail) at registration."""
        rev, tail = NOTE.unpack(self._call("W", b"", "w"))
        return int(rev), int(tail)

    def note(self) -> tuple[int, int] | None:
        """The next commit note (blocks); None when the watch ended."""
        try:
            f = self.conn.frame()
        except OSError:
            return None
        if f is None or f[0] != ord("w"):
            return None
        rev, tail = NOTE.unpack(f[1])
        return int(rev), int(tail)

    def cancel(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.cancel()
        self.sock.close()
        with contextlib.suppress(OSError):
            os.close(self.log_fd)
