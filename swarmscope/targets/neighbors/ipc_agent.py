"""The neighbor agent on the control plane's fast path: shared log -> BPF map, no round trip.

    a = IpcAgent(cp.socket, cp.token, XdpTarget(None))
    a.list_and_program(page_size=65536)     # the committed state now -> map; (revision, entries)
    a.list_only()                           # the same entries copied out, not programmed
    a.watch(ready=...)                      # every later commit -> map, until cancel()
    IpcAgent(..., native="/path/libssagent.so")  # the list's walk compiled (native/agent_list.c)

The agent keeps one connection open (ipc.py): at connect it gets the log's fd and maps it
read-only. A list loads the log's ``tail`` once and programs every record before it with one
``BPF_MAP_UPDATE_BATCH`` per record (or per ``page_size`` entries of a bigger one) straight
from the mapping; a watch reads the 16-byte note each commit sends on the open connection and
programs the records up to the new tail. Records are applied in revision order and puts are
idempotent, so the map converges to the snapshot whatever was overwritten or deleted.
``received`` records, per record, when the agent had it in hand (CLOCK_MONOTONIC): the watch
latency of the master side, note included.

``native``: the path of native/agent_list.c built as a shared library (the worker's driver
builds and caches it). The list is then one ctypes call: the same walk and the same update
calls, in C; a range with deletes still goes through Python, in order. Without it the list is
the Python walk (≈ 20 µs more per list after an idle spell on the 2-core VM). A compiled list
of at least ``PARALLEL_MIN_ENTRIES`` puts is programmed by ``LIST_THREADS`` threads at once,
split by key so a key written twice keeps its last value (agent_list.c). With the library the
watch is compiled too (``ss_watch``): the watch thread waits in C, in recv() on its connection,
and programs the records a note announces before returning to Python for the book-keeping, so
no Python runs between a note's arrival and the update call (a delete goes back to Python).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from swarmscope.core.errors import BpfError, LoadGenError
from swarmscope.core.sys.bpf import map_update_batch_at
from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.ipc import IpcClient
from swarmscope.targets.neighbors.shmlog import HEADER_SIZE, LogReader, Record

# A list of at least this many puts is programmed by LIST_THREADS threads (agent_list.c): the
# kernel's hash update is the whole cost of a big list (~0.7 µs per entry on the 2-core VM, one
# CPU), and two CPUs update one map together. Below it, a thread's start is not worth it.
PARALLEL_MIN_ENTRIES = 4096
NOTE_BUF = 4096  # the compiled watch's buffer for notes (21 bytes each) read but not yet taken
LIST_THREADS = max(1, min(4, len(os.sched_getaffinity(0))))


class _NativeList:
    """native/agent_list.c's ``ss_list`` bound with its argument types, and its page buffers."""

    EAGAIN, EPIPE = 11, 32

    def __init__(self, path: str):
        lib = ctypes.CDLL(path, use_errno=True)
        self.fn = lib.ss_list
        u32, u64, vp = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p
        self.fn.argtypes = [ctypes.c_int, vp, u64, u32, vp, vp, vp]
        self.fn.restype = ctypes.c_long
        self._threads = lib.ss_threads
        self._threads.argtypes = [u32, u32, u32]
        self._threads.restype = ctypes.c_long
        # the compiled watch (ss_watch): blocks in recv() on the watch connection, GIL released
        self.watch = lib.ss_watch
        self.watch.argtypes = [ctypes.c_int, ctypes.c_int, vp, u64, u32, vp, u32, vp]
        self.watch.restype = ctypes.c_long
        self.threads, self.min_entries = LIST_THREADS, PARALLEL_MIN_ENTRIES
        self.out = (ctypes.c_uint64 * 3)()
        self.page = 0
        self.kbuf: Any = None
        self.vbuf: Any = None

    def buffers(self, page: int) -> tuple[int, int]:
        if page > self.page:  # page-sized copies (only for a range of several records)
            self.kbuf = ctypes.create_string_buffer(page * R.KEY_SIZE)
            self.vbuf = ctypes.create_string_buffer(page * R.VALUE_SIZE)
            self.page = page
        # the parallel list's per-thread pages, allocated and touched before any timed call
        if self._threads(self.threads, self.min_entries, page) < 0:
            raise BpfError("agent_list.c: no memory for the list threads' pages", 12)
        return ctypes.addressof(self.kbuf), ctypes.addressof(self.vbuf)


_loaded: dict[str, _NativeList] = {}


def _native(path: str) -> _NativeList:
    """One load per process: a library unloaded with each agent would be mapped, relocated and
    paged in again at every list."""
    if path not in _loaded:
        _loaded[path] = _NativeList(path)
    return _loaded[path]


class IpcAgent:
    def __init__(self, path: str, token: str, target: Any, native: str | None = None):
        self.client = IpcClient(path, token)
        self.log = LogReader(self.client.log_fd)
        self.target = target
        self.offset = HEADER_SIZE  # next record to apply
        self.revision = 0
        self.programmed = 0
        self.received: list[tuple[int, int, int]] = []  # (revision, entries, t_ns) in watch
        self.cond = threading.Condition()
        self.cancelled = False
        self.ended = ""  # why the watch ended before cancel() (wait_revision stops waiting)
        self._fd = getattr(target, "fd", None)  # an XDP map: program from the mapping directly
        self.native = _native(native) if native and self._fd is not None else None

    def _apply(self, rec: Record, page: int) -> None:
        if rec.n:
            if self._fd is not None:
                for a in range(0, rec.n, page):
                    m = min(page, rec.n - a)
                    self.programmed += map_update_batch_at(
                        self._fd, rec.keys + a * R.KEY_SIZE, rec.values + a * R.VALUE_SIZE, m
                    )
            else:
                keys = ctypes.string_at(rec.keys, rec.n * R.KEY_SIZE)
                self.programmed += self.target.apply(keys, ctypes.string_at(rec.values, rec.n * R.VALUE_SIZE))
        if rec.nd:
            self.target.apply(b"", b"", ctypes.string_at(rec.deleted, rec.nd * R.KEY_SIZE))

    def _upto(self, tail: int, page: int, stamp: bool = False) -> None:
        rec = None
        for rec in self.log.records(self.offset, tail):
            if stamp:
                self.received.append((rec.revision, rec.n, time.monotonic_ns()))
            self._apply(rec, page)
        if rec is not None:
            self._done(rec)

    def _done(self, rec: Record) -> None:
        self.offset = rec.end
        self.target.set_revision(rec.revision)
        with self.cond:
            self.revision = rec.revision
            self.cond.notify_all()

    def prime(self, scratch_fd: int | None = None) -> None:
        """Warm the path before a timed list, with O(1) work whatever N: load the tail, parse
        the first record's header (nothing applied), look one key up in the map (a read) and,
        given ``scratch_fd``, write one entry into that private scratch map (the update path;
        the probe sees that call under the scratch map's id, never the neighbor map's). On this
        VM the first bpf() update after an idle spell costs tens of µs more than the next
        (docs/neighbors.md); an agent that is busy does not pay it."""
        for _rec in self.log.records(self.offset, self.log.tail()):
            break
        if self.native is not None:  # the same ctypes call, page 0: reads only, programs nothing
            args = self.native_args(1)
            self.native.fn(*args[:3], 0, *args[4:])
        if self._fd is not None:
            from swarmscope.core.sys.bpf import map_lookup_elem, map_update_batch

            map_lookup_elem(self._fd, bytes(R.KEY_SIZE), R.VALUE_SIZE)
            if scratch_fd is not None:
                map_update_batch(scratch_fd, bytes(R.KEY_SIZE), bytes(R.VALUE_SIZE))

    def list_and_program(self, page_size: int = 65536) -> tuple[int, int]:
        """Program every committed record (from scratch) in pages of ``page_size`` entries
        (one update call each, as a List page was); returns (revision, entries)."""
        before, page = self.programmed, max(1, page_size)
        if self.native is not None:
            got = self.native_done(self.native.fn(*self.native_args(page)))
            if got is not None:
                return self.revision, got
        recs = list(self.log.records(self.offset, self.log.tail()))
        if self._fd is None or len(recs) == 1 or any(r.nd for r in recs):
            for rec in recs:  # zero-copy per record (and deletes in their order)
                self._apply(rec, page)
        else:  # puts only: copy into full pages so the calls are ceil(N / page_size)
            keys, vals, fill = bytearray(page * R.KEY_SIZE), bytearray(page * R.VALUE_SIZE), 0
            for rec in recs:
                done = 0
                while done < rec.n:
                    m = min(page - fill, rec.n - done)
                    keys[fill * 4 : (fill + m) * 4] = ctypes.string_at(rec.keys + done * 4, m * 4)
                    vals[fill * 12 : (fill + m) * 12] = ctypes.string_at(rec.values + done * 12, m * 12)
                    fill, done = fill + m, done + m
                    if fill == page:
                        self.programmed += self._flush(keys, vals, fill)
                        fill = 0
            self.programmed += self._flush(keys, vals, fill)
        if recs:
            self._done(recs[-1])
        return self.revision, self.programmed - before

    def native_args(self, page: int) -> tuple[Any, ...]:
        """``ss_list``'s arguments, all known before the list starts (the C side loads the
        tail): a timed list is then ``native.fn(*args)`` and :meth:`native_done` after it."""
        nat = self.native
        assert nat is not None and self._fd is not None
        k, v = nat.buffers(max(1, page))
        return (self._fd, self.log.addr, self.offset, max(1, page), k, v, nat.out)

    def native_done(self, n: int) -> int | None:
        """Book-keeping after ``ss_list``; None when the range has deletes (Python's turn)."""
        nat = self.native
        assert nat is not None
        if n == -nat.EAGAIN:
            return None
        if n < 0:
            raise BpfError(f"bpf_map_update_batch (agent_list.c) failed: {os.strerror(-n)}", -n)
        self.programmed += n
        tail = int(nat.out[0])
        if tail > self.offset:
            self.offset = tail
            self.target.set_revision(int(nat.out[1]))
            with self.cond:
                self.revision = int(nat.out[1])
                self.cond.notify_all()
        return n

    def _flush(self, keys: bytearray, vals: bytearray, n: int) -> int:
        if not n or self._fd is None:
            return 0
        k = (ctypes.c_char * len(keys)).from_buffer(keys)
        v = (ctypes.c_char * len(vals)).from_buffer(vals)
        return map_update_batch_at(self._fd, ctypes.addressof(k), ctypes.addressof(v), n)

    def list_only(self) -> tuple[int, bytes, bytes]:
        """The committed puts copied into this process, not programmed (watch-only points)."""
        ks, vs = [], []
        for rec in self.log.records(HEADER_SIZE, self.log.tail()):
            ks.append(ctypes.string_at(rec.keys, rec.n * R.KEY_SIZE))
            vs.append(ctypes.string_at(rec.values, rec.n * R.VALUE_SIZE))
        return self.log.revision(), b"".join(ks), b"".join(vs)

    def watch(self, ready: Callable[[int], None] | None = None, page_size: int = 65536) -> None:
        """Apply every commit after the target's programmed revision until :meth:`cancel`;
        LoadGenError if the control plane ends the watch first (waiters are woken with it)."""
        try:
            self._watch(ready, page_size)
        except Exception as e:
            self._end(f"{type(e).__name__}: {e}")
            raise
        if not self.cancelled:
            self._end(f"the control plane ended the watch at revision {self.revision}")
            raise LoadGenError(self.ended)

    def _end(self, why: str) -> None:
        with self.cond:
            self.ended = why
            self.cond.notify_all()

    def _watch(self, ready: Callable[[int], None] | None, page_size: int) -> None:
        programmed = self.target.revision()  # resume after it (a restarted agent does)
        _, tail = self.client.watch()
        for rec in self.log.records(self.offset, tail):
            if rec.revision > programmed:
                break
            self.offset, self.revision = rec.end, rec.revision
        if ready:
            ready(self.revision)
        page = max(1, page_size)
        self._upto(tail, page, stamp=True)
        if self.native is not None:
            self._watch_native(page)
            return
        while (note := self.client.note()) is not None:
            self._upto(note[1], page, stamp=True)

    def _watch_native(self, page: int) -> None:
        """The watch loop with its wait and walk compiled (agent_list.c ``ss_watch``): from a
        note's arrival to the update call no Python runs; the book-keeping (stamps, the
        revision record, waiters) follows each call, after the entries are in the map."""
        nat = self.native
        assert nat is not None and self._fd is not None
        buf = ctypes.create_string_buffer(NOTE_BUF)
        out = (ctypes.c_uint64 * 6)()
        pre = bytes(self.client.conn.buf)  # notes read with the watch's reply
        self.client.conn.buf.clear()
        ctypes.memmove(buf, pre, len(pre))
        out[5] = len(pre)
        sock = self.client.sock.fileno()
        while True:
            n = nat.watch(sock, self._fd, self.log.addr, self.offset, page, buf, NOTE_BUF, out)
            if n == -nat.EPIPE:
                return
            if n < 0:
                raise BpfError(f"agent_list.c watch failed: {os.strerror(-n)}", -n)
            self.programmed += n
            end, t_ns, note_tail = int(out[0]), int(out[3]), int(out[4])
            rec = None
            for rec in self.log.records(self.offset, end):
                self.received.append((rec.revision, rec.n, t_ns))
            if rec is not None:
                self._done(rec)
            if end < note_tail:  # a record with deletes: the Python walk, in order
                self._upto(note_tail, page, stamp=True)

    def wait_revision(self, rev: int, timeout: float) -> bool:
        """True once ``rev`` is programmed; False at the timeout or when the watch ended."""
        with self.cond:
            self.cond.wait_for(lambda: self.revision >= rev or bool(self.ended), timeout)
            return self.revision >= rev

    def cancel(self) -> None:
        self.cancelled = True
        self.client.cancel()

    def close(self) -> None:
        self.client.close()
        self.log.close()
