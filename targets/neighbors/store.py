"""Durable neighbor store: a SQLite (WAL) transaction log plus the current state in memory.

    st = Store("/tmp/neigh.db")
    rev = st.commit(keys, values)           # durable when it returns (fsync'd WAL commit)
    pages = st.list(revision=0, page=65536) # [(keys, values)], the state at a revision
    w = st.watch(start_revision=rev)        # Watcher: history after rev, then live batches

Each put-batch is one row (the packed key/value byte strings as blobs), so writing 10k
entries is one INSERT and one fsync, not 10k. Revisions are per transaction and strictly
increasing (``rev INTEGER PRIMARY KEY``). On open the log is replayed into the in-memory state.
Caveats: the log is never compacted; list at an old revision replays the log up to it.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from swarmscope.targets.neighbors import records as R

Batch = tuple[int, bytes, bytes, bytes]  # (revision, keys, values, deleted keys)


@dataclass
class Watcher:
    """One watch: ``q`` receives committed batches after ``start`` (history first)."""

    start: int
    q: queue.SimpleQueue[Batch | None]
    closed: bool = False


class Store:
    def __init__(self, path: str, synchronous: str = "FULL"):
        self.path = path
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        # FULL: the WAL is fsync'd at every commit, so an acknowledged batch survives power loss,
        # not only a killed process (NORMAL would be enough for SIGKILL).
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS log (rev INTEGER PRIMARY KEY, keys BLOB, vals BLOB, dels BLOB)"
        )
        self.lock = threading.Lock()
        self.values: dict[int, bytes] = {}
        self.revs: dict[int, int] = {}
        self.revision = 0
        self.watchers: list[Watcher] = []
        for rev, k, v, d in self.db.execute("SELECT rev, keys, vals, dels FROM log ORDER BY rev"):
            self._apply(self.values, self.revs, rev, k, v, d)
            self.revision = rev

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
        R.check(keys, values)
        if len(deleted) % R.KEY_SIZE:
            raise ValueError("malformed deleted keys")
        with self.lock:
            rev = self.revision + 1
            self.db.execute("INSERT INTO log VALUES (?, ?, ?, ?)", (rev, keys, values, deleted))
            self.revision = rev
            self._apply(self.values, self.revs, rev, keys, values, deleted)
            for w in self.watchers:
                w.q.put((rev, keys, values, deleted))
        return rev

    def get(self, key: int) -> tuple[bytes, int] | None:
        with self.lock:
            v = self.values.get(key)
            return None if v is None else (v, self.revs[key])

    def status(self) -> tuple[int, int, int]:
        with self.lock:
            return self.revision, len(self.values), len(self.watchers)

    def snapshot(self, revision: int = 0) -> tuple[int, bytes, bytes]:
        """(revision, keys, values) of the state at ``revision`` (0 = now)."""
        with self.lock:
            cur = self.revision
            if revision == 0 or revision >= cur:
                return cur, R.pack_keys(list(self.values)), b"".join(self.values.values())
        state: dict[int, bytes] = {}
        rows = self.db.execute(
            "SELECT rev, keys, vals, dels FROM log WHERE rev <= ? ORDER BY rev", (revision,)
        )
        for rev, k, v, d in rows:
            self._apply(state, None, rev, k, v, d)
        return revision, R.pack_keys(list(state)), b"".join(state.values())

    def history(self, after: int, upto: int) -> Iterator[Batch]:
        # A second connection: the WAL lets it read committed rows while writers go on.
        db = sqlite3.connect(self.path)
        try:
            q = "SELECT rev, keys, vals, dels FROM log WHERE rev > ? AND rev <= ? ORDER BY rev"
            yield from db.execute(q, (after, upto))
        finally:
            db.close()

    def watch(self, start_revision: int) -> tuple[Watcher, int]:
        """Register a watcher; returns it and the revision up to which history must be read."""
        with self.lock:
            w = Watcher(start_revision, queue.SimpleQueue())
            self.watchers.append(w)
            return w, self.revision

    def unwatch(self, w: Watcher) -> None:
        with self.lock:
            if w in self.watchers:
                self.watchers.remove(w)
            w.closed = True
            w.q.put(None)

    def close(self) -> None:
        with self.lock:
            for w in self.watchers:
                w.q.put(None)
            self.watchers.clear()
            self.db.close()
