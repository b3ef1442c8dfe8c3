"""Group commit and the durability option of the neighbor store (targets/neighbors/store.py).

Real parts: SQLite in WAL mode on disk, real threads racing for the commit, the Unix-socket
server in this process with a real client on its socket.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from neighbors_util import TOKEN

from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.ipc import ACK, FRAME, PUT, IpcClient, IpcServer
from swarmscope.targets.neighbors.store import Store


def _wait(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_writers_that_arrive_together_share_one_commit(tmp_path: Path) -> None:
    st = Store(str(tmp_path / "g.db"))
    got: dict[int, int] = {}

    def write(i: int) -> None:
        k, v = R.make_entries(3, start=i * 3)
        got[i] = st.commit(k, v)

    try:
        # The first writer's commit is written, then waits for the state lock we hold: it
        # still leads, so the four writers after it queue and must not be answered.
        with st.lock:
            first = threading.Thread(target=write, args=(0,))
            first.start()
            _wait(lambda: st.groups == 1)
            rest = [threading.Thread(target=write, args=(i,)) for i in range(1, 5)]
            for t in rest:
                t.start()
            _wait(lambda: sum(len(p.txs) for p in st._queue) == 4)
            time.sleep(0.05)
            assert got == {} and all(t.is_alive() for t in [first, *rest])
        for t in [first, *rest]:
            t.join(10)
        assert got[0] == 1 and sorted(got[i] for i in range(1, 5)) == [2, 3, 4, 5]
        assert st.groups == 2  # two fsyncs for five writes
        assert st.revision == 5 and len(st.values) == 15
        assert [r for (r,) in st.db.execute("SELECT rev FROM log ORDER BY rev")] == [1, 2, 3, 4, 5]
        txs = [(R.make_keys(1, 100), bytes(12), b""), (b"", b"", R.make_keys(1, 0))]
        assert st.commit_many(txs) == [6, 7]
        (k100,), (k0,) = R.unpack_keys(R.make_keys(1, 100)), R.unpack_keys(R.make_keys(1, 0))
        assert st.groups == 3 and k0 not in st.values and st.get(k100) == (bytes(12), 6)
    finally:
        st.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        st.commit(*R.make_entries(1))
    st = Store(str(tmp_path / "g.db"))  # what was acknowledged is what a reopen finds
    try:
        assert st.revision == 7 and len(st.values) == 15
    finally:
        st.close()


def test_durability_option(tmp_path: Path) -> None:
    for name, level in (("fsync", 2), ("os", 1)):  # FULL, NORMAL
        st = Store(str(tmp_path / f"{name}.db"), durability=name)
        try:
            assert st.db.execute("PRAGMA synchronous").fetchone() == (level,)
        finally:
            st.close()
    with pytest.raises(ValueError, match="durability"):
        Store(str(tmp_path / "x.db"), durability="none")


def test_pipelined_puts_on_one_connection_share_one_commit(tmp_path: Path) -> None:
    st = Store(str(tmp_path / "p.db"))
    srv = IpcServer(st, str(tmp_path / "cp" / "s"), TOKEN)
    c = IpcClient(srv.path, TOKEN)
    try:
        frames = []
        for i in range(10):
            k, v = R.make_entries(2, start=2 * i)
            body = PUT.pack(2, 0) + k + v
            if i == 4:
                body = body[:-1]  # malformed: answered with an error, the others still commit
            frames.append(FRAME.pack(len(body), ord("P")) + body)
        before = st.groups
        c.sock.sendall(b"".join(frames))  # all of them are on the socket when the server reads
        replies = [c.conn.frame() for _ in range(10)]
        assert [f[0] if f else None for f in replies] == [ord("p")] * 4 + [ord("e")] + [ord("p")] * 5
        revs = [ACK.unpack(f[1])[0] for f in replies if f and f[0] == ord("p")]
        assert revs == list(range(1, 10))
        assert st.groups - before == 1 and st.revision == 9 and len(st.values) == 18
    finally:
        c.close()
        srv.close()
        st.close()


def test_state_is_applied_at_the_first_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit only queues its batch for the in-memory state; the next read applies every
    queued batch in order (a put, then a delete of part of it), so reads see each acknowledged
    write. Past UNAPPLIED_MAX_BYTES a commit applies the queue itself."""
    import swarmscope.targets.neighbors.store as S

    st = Store(str(tmp_path / "s.db"))
    try:
        k, v = R.make_entries(4)
        k2, v2 = R.make_entries(2, start=10, gen=3)
        assert st.commit(k, v) == 1 and st.commit(b"", b"", k[:4]) == 2
        assert len(st._unapplied) == 2 and st._values == {}  # queued, nothing applied yet
        key1, key0 = R.unpack_keys(k[4:8])[0], R.unpack_keys(k[:4])[0]
        assert st.get(key1) == (v[12:24], 1) and st.get(key0) is None
        assert st._unapplied == [] and len(st._values) == 3
        monkeypatch.setattr(S, "UNAPPLIED_MAX_BYTES", 1)
        assert st.commit(k2, v2) == 3
        assert st._unapplied == [] and st._values[R.unpack_keys(k2[:4])[0]] == v2[:12]
        assert st.status() == (3, 5, 0) and st.snapshot()[0] == 3
    finally:
        st.close()
