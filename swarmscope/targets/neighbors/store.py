"""Durable neighbor store: a SQLite (WAL) transaction log, compacted, plus the state in memory.

    st = Store("/tmp/neigh.db")
    rev = st.commit(keys, values)            # durable when it returns (fsync'd WAL commit)
    revs = st.commit_many([(k1, v1, b""), (k2, v2, b"")])   # one fsync, two revisions
    rev, keys, values = st.snapshot(revision=rev - 10)   # the state at a recent revision
    w, upto = st.watch(start_revision=rev)   # Watcher: history after rev, then live batches

Each put-batch is one row (the packed key/value byte strings as blobs), so writing 10k
entries is one INSERT and one fsync, not 10k. Revisions are per transaction and strictly
increasing (``rev INTEGER PRIMARY KEY``).

Group commit: writers that arrive while a commit is being fsync'd are written together by
the next one, in one SQLite transaction and one fsync, each with its own revision; none is
answered before the fsync that covers its write (:meth:`Store.commit_many`).
``durability="os"`` (not the default) answers once the commit is in the OS (:data:`DURABILITY`).

The state in memory (``values``, ``revs``: for get, status and a List of now) is applied
lazily: a commit only queues its batch, and the first read after it applies what is queued
(or a commit, once ``UNAPPLIED_MAX_BYTES`` are queued). A read still sees every acknowledged
write; the write path pays SQLite and the fan-out only, not a dict update per entry (1M
entries: ~1 s of the server's CPU on the 2-core VM, more than SQLite's part).

Compaction (like etcd's): once ``2 * keep`` transactions are in the log, the state as of
``revision - keep`` becomes the ``base`` row and the log rows up to it are deleted, so opening
the store, a List at an old revision and a Watch's history replay at most ``2 * keep`` rows
after the base, never the whole history. A List or Watch from before the base is refused
(:class:`Compacted`): the caller lists the current state and watches from there.

A watcher's queue is bounded (``watch_queue_bytes`` of pending batches): a watcher that falls
that far behind is dropped (``Watcher.overflowed``), and its Watch ends with an error instead
of the server's memory growing without bound.
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
import struct
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

from swarmscope.targets.neighbors import records as R

Batch = tuple[int, bytes, bytes, bytes]  # (revision, keys, values, deleted keys)
BATCH_OVERHEAD = 64  # bytes a queued batch costs beyond its blobs (an empty one is not free)
# What "durable" means when a commit returns. fsync (the default): the WAL is fsync'd before
# the writer is answered, so an acknowledged write survives power loss. os: SQLite's NORMAL in
# WAL mode, the commit is in the OS's page cache when answered (it survives a killed server,
# not a machine that loses power); fsyncs happen at checkpoints only.
DURABILITY = {"fsync": "FULL", "os": "NORMAL"}
UNAPPLIED_MAX_BYTES = 64 << 20  # batches queued for the in-memory state before a commit applies them


class Compacted(ValueError):
    """The revision asked for is older than the compacted base."""


@dataclass
class _Pending:
    """One writer's transactions waiting for the group commit that covers them."""

    txs: list[tuple[bytes, bytes, bytes]]
    revs: list[int] = field(default_factory=list)
    done: bool = False
    error: BaseException | None = None


@dataclass
class Watcher:
    """One watch: ``q`` receives committed batches after ``start`` (history first)."""

    start: int
    q: queue.SimpleQueue[Batch | None] = field(default_factory=queue.SimpleQueue)
    closed: bool = False
    overflowed: bool = False
    pending: int = 0  # bytes queued and not yet taken


class Store:
    def __init__(
        self, path: str, durability: str = "fsync", keep: int = 1000, watch_queue_bytes: int = 64 << 20
    ):
        self.path = path
        self.keep = max(1, keep)
        self.watch_queue_bytes = watch_queue_bytes
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        if durability not in DURABILITY:
            raise ValueError(f"durability must be one of {sorted(DURABILITY)}, not {durability!r}")
        self.durability = durability
        self.db.execute(f"PRAGMA synchronous={DURABILITY[durability]}")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS log (rev INTEGER PRIMARY KEY, keys BLOB, vals BLOB, dels BLOB)"
        )
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS base (id INTEGER PRIMARY KEY CHECK (id = 0), rev INTEGER,"
            " keys BLOB, vals BLOB, revs BLOB)"
        )
        self._warm_wal()
        self.lock = threading.RLock()  # the state, watchers and compaction (reentrant: values)
        self._group = threading.Condition()  # group commit: the queue and who leads
        self._queue: list[_Pending] = []
        self._leading = False
        self._closed = False
        self.groups = 0  # group commits (SQLite transactions, so fsyncs) written so far
        self.watchers: list[Watcher] = []
        self._readers = 0  # history / old-snapshot reads in progress: no compaction meanwhile
        self.compactions = 0
        # Called under the lock after each commit is durable and applied (the Unix-socket fast
        # path publishes it to its shared log there, so the log is in revision order).
        self.on_commit: Callable[[int, bytes, bytes, bytes], None] | None = None
        self.compacted, self._values, self._revs = self._read_base(self.db)
        self._unapplied: list[Batch] = []  # committed, not yet in _values (see the module doc)
        self._unapplied_bytes = 0
        self.revision = self.compacted
        for rev, k, v, d in self.db.execute(
            "SELECT rev, keys, vals, dels FROM log WHERE rev > ? ORDER BY rev", (self.compacted,)
        ):
            self._apply(self._values, self._revs, rev, k, v, d)
            self.revision = rev

    def _warm_wal(self, size: int = 1 << 20) -> None:
        """Grow the WAL once and restart it, so the first commits reuse its space: a fresh WAL
        that grows pays a file-size (metadata) sync per commit, and the restart after a
        checkpoint an extra header sync; a long-lived server pays neither on its hot path."""
        self.db.execute("CREATE TABLE IF NOT EXISTS scratch (b BLOB)")
        self.db.execute("INSERT INTO scratch VALUES (zeroblob(?))", (size,))
        self.db.execute("DELETE FROM scratch")
        self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        self.db.execute("INSERT INTO scratch VALUES (NULL)")  # the restart happens here
        self.db.execute("DELETE FROM scratch")

    # -- state -----------------------------------------------------------------------------
    @property
    def values(self) -> dict[int, bytes]:
        """key -> value now (every acknowledged write applied)."""
        with self.lock:
            self._materialize()
            return self._values

    @property
    def revs(self) -> dict[int, int]:
        """key -> the revision that last wrote it."""
        with self.lock:
            self._materialize()
            return self._revs

    def _materialize(self) -> None:
        """Apply the queued batches to the state, in order (under the lock)."""
        for rev, k, v, d in self._unapplied:
            self._apply(self._values, self._revs, rev, k, v, d)
        self._unapplied.clear()
        self._unapplied_bytes = 0

    @staticmethod
    def _read_base(db: sqlite3.Connection) -> tuple[int, dict[int, bytes], dict[int, int]]:
        row = db.execute("SELECT rev, keys, vals, revs FROM base WHERE id = 0").fetchone()
        if row is None:
            return 0, {}, {}
        rev, k, v, r = row
        keys = R.unpack_keys(k)
        values = dict(zip(keys, R.split_values(v), strict=True))
        revs = dict(zip(keys, struct.unpack(f"<{len(keys)}Q", r), strict=True))
        return int(rev), values, revs

    @staticmethod
    def _apply(
        values: dict[int, bytes], revs: dict[int, int] | None, rev: int, k: bytes, v: bytes, d: bytes
    ) -> None:
        if k:
            ks = R.unpack_keys(k)
            values.update(zip(ks, R.split_values(v), strict=True))
            if revs is not None:
                revs.update(dict.fromkeys(ks, rev))
        for key in R.unpack_keys(d) if d else ():
            values.pop(key, None)
            if revs is not None:
                revs.pop(key, None)

    def commit(self, keys: bytes = b"", values: bytes = b"", deleted: bytes = b"") -> int:
        """Write one transaction durably, apply it, fan it out; return its revision."""
        return self.commit_many([(keys, values, deleted)])[0]

    def commit_many(self, txs: list[tuple[bytes, bytes, bytes]]) -> list[int]:
        """Commit transactions (keys, values, deleted), each its own revision, in order; they
        return once the fsync that covers them is done. Group commit: the first writer to find
        no commit in progress leads; it takes every transaction queued so far (its own and
        those of writers that arrived while the previous fsync ran) and writes them in one
        SQLite transaction, one fsync, then wakes each writer with its revisions. A writer
        alone pays one fsync as before; writers that arrive together share one."""
        for keys, values, deleted in txs:
            R.check(keys, values)
            if len(deleted) % R.KEY_SIZE:
                raise ValueError("malformed deleted keys")
        req = _Pending(txs)
        with self._group:
            if self._closed:
                raise sqlite3.ProgrammingError("the neighbor store is closed")
            self._queue.append(req)
            while self._leading and not req.done:
                self._group.wait()
            if not req.done:  # nobody is committing: lead, with everything queued meanwhile
                self._leading = True
                group, self._queue = self._queue, []
        if not req.done:
            try:
                self._commit_group(group)
            finally:
                with self._group:
                    self._leading = False
                    self._group.notify_all()
        if req.error is not None:
            raise req.error
        return req.revs

    def _commit_group(self, group: list[_Pending]) -> None:
        """The leader's part: one SQLite transaction (one fsync) for every queued transaction,
        then, under the lock, apply and publish them in revision order."""
        rev = self.revision  # only the leader changes it, so reading it here is safe
        rows = []
        for req in group:
            for keys, values, deleted in req.txs:
                rev += 1
                req.revs.append(rev)
                rows.append((rev, keys, values, deleted))
        try:
            with self._tx():
                self.db.executemany("INSERT INTO log VALUES (?, ?, ?, ?)", rows)
        except BaseException as e:
            for req in group:
                req.error, req.revs = e, []
            raise
        finally:
            for req in group:
                req.done = True
        self.groups += 1
        with self.lock:
            for row in rows:
                self._publish(*row)
            if rev - self.compacted >= 2 * self.keep and self._readers == 0:
                self._compact(rev - self.keep)

    def _publish(self, rev: int, keys: bytes, values: bytes, deleted: bytes) -> None:
        """One durable transaction: queue it for the state, fan it out (under the lock)."""
        cost = len(keys) + len(values) + len(deleted) + BATCH_OVERHEAD
        self.revision = rev
        self._unapplied.append((rev, keys, values, deleted))  # applied at the next read
        self._unapplied_bytes += cost
        if self._unapplied_bytes > UNAPPLIED_MAX_BYTES:
            self._materialize()
        for w in list(self.watchers):
            if w.pending + cost > self.watch_queue_bytes:
                # Too far behind: drop it rather than hold its backlog in memory.
                w.overflowed = w.closed = True
                self.watchers.remove(w)
                w.q.put(None)
                continue
            w.pending += cost
            w.q.put((rev, keys, values, deleted))
        if self.on_commit is not None:
            self.on_commit(rev, keys, values, deleted)

    def _compact(self, upto: int) -> None:
        """Make the state at ``upto`` the base and drop the log rows up to it (under the lock)."""
        _, values, revs = self._read_base(self.db)
        rows = self.db.execute(
            "SELECT rev, keys, vals, dels FROM log WHERE rev > ? AND rev <= ? ORDER BY rev",
            (self.compacted, upto),
        )
        for rev, k, v, d in rows:
            self._apply(values, revs, rev, k, v, d)
        keys = list(values)
        blob_revs = struct.pack(f"<{len(keys)}Q", *(revs[k] for k in keys))
        with self._tx():
            self.db.execute(
                "INSERT OR REPLACE INTO base VALUES (0, ?, ?, ?, ?)",
                (upto, R.pack_keys(keys), b"".join(values.values()), blob_revs),
            )
            self.db.execute("DELETE FROM log WHERE rev <= ?", (upto,))
        self.compacted = upto
        self.compactions += 1

    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    @contextlib.contextmanager
    def _reading(self, since: int) -> Iterator[None]:
        """Hold compaction off while rows after ``since`` are read; Compacted if they are gone."""
        with self.lock:
            if since < self.compacted:
                raise Compacted(f"revision {since} is compacted (oldest kept: {self.compacted})")
            self._readers += 1
        try:
            yield
        finally:
            with self.lock:
                self._readers -= 1

    # -- reads -----------------------------------------------------------------------------
    def get(self, key: int) -> tuple[bytes, int] | None:
        with self.lock:
            self._materialize()
            v = self._values.get(key)
            return None if v is None else (v, self._revs[key])

    def status(self) -> tuple[int, int, int]:
        with self.lock:
            self._materialize()
            return self.revision, len(self._values), len(self.watchers)

    def snapshot(self, revision: int = 0) -> tuple[int, bytes, bytes]:
        """(revision, keys, values) of the state at ``revision`` (0 = now); Compacted when the
        revision is older than the base. Replays at most ``2 * keep`` log rows."""
        with self.lock:
            cur = self.revision
            if revision == 0 or revision >= cur:
                self._materialize()
                return cur, R.pack_keys(list(self._values)), b"".join(self._values.values())
        with self._reading(revision):
            db = sqlite3.connect(self.path)
            try:
                base, state, _ = self._read_base(db)
                rows = db.execute(
                    "SELECT rev, keys, vals, dels FROM log WHERE rev > ? AND rev <= ? ORDER BY rev",
                    (base, revision),
                )
                for rev, k, v, d in rows:
                    self._apply(state, None, rev, k, v, d)
            finally:
                db.close()
        return revision, R.pack_keys(list(state)), b"".join(state.values())

    def history(self, after: int, upto: int) -> Generator[Batch, None, None]:
        """The transactions in (after, upto]; Compacted (at the first step) when they are gone."""
        with self._reading(after):
            # A second connection: the WAL lets it read committed rows while writers go on.
            db = sqlite3.connect(self.path)
            try:
                q = "SELECT rev, keys, vals, dels FROM log WHERE rev > ? AND rev <= ? ORDER BY rev"
                yield from db.execute(q, (after, upto))
            finally:
                db.close()

    # -- watchers ----------------------------------------------------------------------------
    def watch(self, start_revision: int) -> tuple[Watcher, int]:
        """Register a watcher; returns it and the revision up to which history must be read."""
        with self.lock:
            w = Watcher(start_revision)
            self.watchers.append(w)
            return w, self.revision

    def taken(self, w: Watcher, batch: Batch) -> None:
        """The watcher's reader took ``batch`` off its queue: it no longer counts as pending."""
        _, k, v, d = batch
        with self.lock:
            w.pending -= len(k) + len(v) + len(d) + BATCH_OVERHEAD

    def unwatch(self, w: Watcher) -> None:
        with self.lock:
            if w in self.watchers:
                self.watchers.remove(w)
            w.closed = True
            w.q.put(None)

    def close(self) -> None:
        with self._group:  # a commit in progress finishes; writers still queued are refused
            while self._leading:
                self._group.wait()
            self._closed = True
            for req in self._queue:
                req.error, req.done = sqlite3.ProgrammingError("the neighbor store is closed"), True
            self._queue = []
            self._group.notify_all()
        with self.lock:
            for w in self.watchers:
                w.q.put(None)
            self.watchers.clear()
            self.db.close()
