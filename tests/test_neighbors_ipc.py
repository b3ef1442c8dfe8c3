"""The control plane's Unix-socket fast path: shared log, put/get/watch, the agent on a real map.

Real parts: the control plane process (SQLite + gRPC + the Unix socket), a real BPF hash map
programmed by the agent, the agent as its own process opening that map by id.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from neighbors_util import TOKEN, needs_root

from swarmscope.core.errors import LoadGenError
from swarmscope.core.sys import bpf
from swarmscope.probes.map_update import MapUpdateTracer
from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.agent_proc import AgentProcess, _MapTarget, digest
from swarmscope.targets.neighbors.ipc import IpcClient
from swarmscope.targets.neighbors.ipc_agent import LIST_THREADS, PARALLEL_MIN_ENTRIES, IpcAgent
from swarmscope.targets.neighbors.server import ControlPlane, start_server, stop
from swarmscope.targets.neighbors.shmlog import HEADER_SIZE, LogFull, LogReader, LogWriter
from swarmscope.workers.neighbor_writer import write_ipc


@contextmanager
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    cp = start_server(str(tmp_path / "n.db"), TOKEN, socket_path=str(tmp_path / "cp" / "s"))
    try:
        yield cp
    finally:
        stop(cp.proc)


@contextmanager
def hash_map(max_entries: int = 1 << 14) -> Iterator[_MapTarget]:
    """A fresh BPF hash map of neighbor records, as the agent process opens it (by id)."""
    fd = bpf.map_create(1, "ss_test_ipc", R.KEY_SIZE, R.VALUE_SIZE, max_entries)
    t = _MapTarget(bpf.map_info(fd).id)
    try:
        yield t
    finally:
        t.close()
        os.close(fd)


@contextmanager
def written_2500(
    tmp_path: Path,
) -> Iterator[tuple[MapUpdateTracer, _MapTarget, ControlPlane, IpcClient, bytes, bytes]]:
    """A traced map and a control plane holding 2500 entries in 3 transactions (batches of 1000)."""
    tracer = MapUpdateTracer([os.getpid()])
    tracer.load()
    try:
        with hash_map() as t, plane(tmp_path) as cp:
            c = IpcClient(cp.socket, TOKEN)
            k, v = R.make_entries(2500)
            write_ipc(c, k, v, batch=1000)
            yield tracer, t, cp, c, k, v
    finally:
        tracer.close()


@pytest.fixture(scope="module")
def agent_lib() -> str:
    """native/agent_list.c built and cached (cc and libbpf-dev come with tools/setup.sh)."""
    from swarmscope.kinds.neighbor_writes.fastpath import agent_lib

    lib = agent_lib()
    assert lib is not None
    return lib


NATIVE = pytest.mark.parametrize("native", [False, True], ids=["python", "compiled"])


def state(keys: bytes, values: bytes) -> dict[bytes, bytes]:
    return {keys[i : i + 4]: values[i // 4 * 12 : i // 4 * 12 + 12] for i in range(0, len(keys), 4)}


def test_shared_log_records_in_order_and_bounded() -> None:
    w = LogWriter(capacity=4096)
    r = LogReader(w.reader_fd())
    try:
        k, v = R.make_entries(10)
        assert r.tail() == HEADER_SIZE
        w.append(1, k, v)
        w.append(2, b"", b"", k[:8])
        recs = list(r.records(HEADER_SIZE, r.tail()))
        assert [(x.revision, x.n, x.nd) for x in recs] == [(1, 10, 0), (2, 0, 2)]
        assert r.revision() == 2 and recs[-1].end == r.tail() == w.tail
        import ctypes

        assert ctypes.string_at(recs[0].keys, 40) == k and ctypes.string_at(recs[0].values, 120) == v
        big_k, big_v = R.make_entries(300)  # 4800 bytes: more than is left
        with pytest.raises(LogFull):
            w.append(3, big_k, big_v)
        with pytest.raises(LogFull):  # and it stays full: no record after a hole
            w.append(4, k[:4], v[:12])
        assert r.tail() == w.tail  # nothing half-written became visible
    finally:
        r.close()
        w.close()


@pytest.mark.slow
def test_put_get_watch_and_token(tmp_path: Path) -> None:
    with plane(tmp_path) as cp:
        with pytest.raises(LoadGenError, match="refused"):
            IpcClient(cp.socket, "not-the-token")
        assert oct(os.stat(cp.socket).st_mode & 0o777) == "0o600"
        c = IpcClient(cp.socket, TOKEN)
        watcher = IpcClient(cp.socket, TOKEN)
        log = LogReader(watcher.log_fd)
        try:
            assert watcher.watch() == (0, HEADER_SIZE)
            k, v = R.make_entries(7)
            rev, ns = c.put_batch(k, v)
            assert rev == 1 and ns > 0
            note = watcher.note()
            assert note is not None and note[0] == 1
            (rec,) = log.records(HEADER_SIZE, note[1])
            assert (rec.revision, rec.n) == (1, 7)
            assert c.get(k[4:8]) == (v[12:24], 1)
            assert c.get(R.make_keys(1, 100)) is None
            assert c.put_batch(b"", b"", k[:4])[0] == 2  # a delete is a transaction too
            assert watcher.note() == (2, log.tail())
            assert c.get(k[:4]) is None
            with pytest.raises(LoadGenError, match="malformed"):
                c._call("P", b"\x01\x00\x00\x00\x00\x00\x00\x00abc", "p")
        finally:
            log.close()
            watcher.close()
            c.close()


@pytest.mark.slow
@NATIVE
def test_agent_lists_in_pages_and_watches_in_order(tmp_path: Path, native: bool, agent_lib: str) -> None:
    """2500 entries in 3 transactions listed with page 1000: exactly 3 update calls (full pages
    across records), every entry in the map; then a watch applies puts and a delete in order,
    and a new agent's list of that log (deletes in it: the Python walk) gives the same map."""
    lib = agent_lib if native else None
    with written_2500(tmp_path) as (tracer, t, cp, c, k, v):
        a = IpcAgent(cp.socket, TOKEN, t, native=lib)
        assert (a.native is not None) == native
        tracer.events()
        assert a.list_and_program(page_size=1000) == (3, 2500)
        calls = [e for e in tracer.events() if e.processed]
        assert [e.processed for e in calls] == [1000, 1000, 500]
        assert bpf.map_read_all(t.fd) == state(k, v) and t.rev == 3
        done = threading.Event()
        th = threading.Thread(target=lambda: (a.watch(ready=lambda _r: done.set()), None), daemon=True)
        th.start()
        assert done.wait(10)
        k2, v2 = R.make_entries(10, start=5000, gen=1)
        r1, _ = c.put_batch(k2, v2)
        r2, _ = c.put_batch(b"", b"", k[: 4 * 5])  # delete the first 5
        assert a.wait_revision(r2, 10) and r2 == r1 + 1
        want = state(k, v) | state(k2, v2)
        for i in range(5):
            del want[k[i * 4 : i * 4 + 4]]
        assert bpf.map_read_all(t.fd) == want
        assert [(rev, n) for rev, n, _ in a.received] == [(r1, 10), (r2, 0)]
        a.cancel()
        th.join(5)
        a.close()
        with hash_map() as t2:
            b = IpcAgent(cp.socket, TOKEN, t2, native=lib)
            assert b.list_and_program(page_size=1000) == (r2, 2510)
            assert bpf.map_read_all(t2.fd) == want and t2.rev == r2
            b.close()
        c.close()


def _part(key: bytes, threads: int) -> int:
    """agent_list.c's split of keys among the list's threads (the same arithmetic)."""
    return ((int.from_bytes(key, "little") * 2654435761) % (1 << 32) * threads) >> 32


@pytest.mark.slow
def test_compiled_list_in_parallel_splits_by_key(tmp_path: Path, agent_lib: str) -> None:
    """A big list programmed by 2 threads (min_entries lowered to 1000 here): 2500 entries in 3
    records, then the first 300 written again with new values. Each thread programs its own
    keys, in record order, so the map holds the last values; the update calls are exactly
    ceil(each thread's entries / page), from two threads; then 3 threads list it again."""
    with written_2500(tmp_path) as (tracer, t, cp, c, k, v):
        k2, v2 = R.make_entries(300, gen=7)  # the first 300 keys again, new values
        r4, _ = c.put_batch(k2, v2)
        a = IpcAgent(cp.socket, TOKEN, t, native=agent_lib)
        assert a.native is not None
        a.native.threads, a.native.min_entries = 2, 1000  # the process-wide binding: put back
        tracer.events()
        try:
            assert a.list_and_program(page_size=1000) == (r4, 2800)
            calls = [e for e in tracer.events() if e.processed]
            with hash_map() as t3:  # more threads than before: each gets its own buffers
                b = IpcAgent(cp.socket, TOKEN, t3, native=agent_lib)
                assert b.native is a.native
                b.native.threads = 3
                assert b.list_and_program(page_size=1000) == (r4, 2800)
                assert len({e.tid for e in tracer.events() if e.processed}) == 3
                assert bpf.map_read_all(t3.fd) == state(k, v) | state(k2, v2)
                b.close()
        finally:
            a.native.threads, a.native.min_entries = LIST_THREADS, PARALLEL_MIN_ENTRIES
        per = [0, 0]
        for i in range(0, len(k + k2), 4):
            per[_part((k + k2)[i : i + 4], 2)] += 1
        want_calls = sorted(m for n in per for m in [1000] * (n // 1000) + ([n % 1000] if n % 1000 else []))
        assert min(per) > 0 and sum(per) == 2800
        assert sorted(e.processed for e in calls) == want_calls
        assert len({e.tid for e in calls}) == 2
        assert bpf.map_read_all(t.fd) == state(k, v) | state(k2, v2) and t.rev == r4
        a.close()
        c.close()


@pytest.mark.slow
def test_reopened_store_is_the_logs_first_record(tmp_path: Path) -> None:
    with plane(tmp_path) as cp:
        c = IpcClient(cp.socket, TOKEN)
        k, v = R.make_entries(300)
        write_ipc(c, k, v, batch=100)
        c.close()
    with plane(tmp_path) as cp:  # the same db: a new process, a new shared log
        c = IpcClient(cp.socket, TOKEN)
        log = LogReader(c.log_fd)
        try:
            recs = list(log.records(HEADER_SIZE, log.tail()))
            assert [(x.revision, x.n) for x in recs] == [(3, 300)]
        finally:
            log.close()
            c.close()


@pytest.mark.slow
@NATIVE
def test_agent_process_programs_the_map_by_id(tmp_path: Path, native: bool, agent_lib: str) -> None:
    """The agent as its own process: lists into the map it opened by id, a watch-only list
    receives everything without one update call, and a watch reaches the writer's revision."""
    meta = bpf.map_create(2, "ss_test_meta", 4, 8, 4)
    agent = AgentProcess(native=agent_lib if native else None)
    tracer = MapUpdateTracer([agent.pid])
    tracer.load()
    try:
        with hash_map() as t, plane(tmp_path) as cp:
            maps = {"map_id": bpf.map_info(t.fd).id, "meta_id": bpf.map_info(meta).id}
            c = IpcClient(cp.socket, TOKEN)
            k, v = R.make_entries(1200)
            write_ipc(c, k, v, batch=500)
            tracer.events()
            r = agent.call(op="watch_only", socket=cp.socket, token=TOKEN, **maps)
            assert r["received"] == 1200 and r["digest"] == digest(k, v) and r["t_user"] >= r["t0"]
            assert tracer.events() == [] and bpf.map_read_all(t.fd) == {}
            r = agent.call(op="list", socket=cp.socket, token=TOKEN, page=65536, **maps)
            assert r["programmed"] == 1200 and bpf.map_read_all(t.fd) == state(k, v)
            evs = tracer.events()
            # the prime's scratch-map write, one page, then the revision (meta)
            assert [e.processed for e in evs] == [1, 1200, 1]
            assert bpf.map_lookup_elem(meta, bytes(4), 8) == (3).to_bytes(8, "little")
            agent.call(op="watch", socket=cp.socket, token=TOKEN, **maps)
            k2, v2 = R.make_entries(50, start=9000)
            rev, _ = c.put_batch(k2, v2)
            w = agent.call(op="wait", revision=rev, timeout=10)
            assert [x[:2] for x in w["received"]] == [[rev, 50]]
            assert bpf.map_read_all(t.fd) == state(k, v) | state(k2, v2)
            c.close()
    finally:
        tracer.close()
        agent.close()
        os.close(meta)


@pytest.mark.slow
@NATIVE
def test_stopped_agent_catches_up_per_neighbor(tmp_path: Path, native: bool, agent_lib: str) -> None:
    """One commit per neighbor, the agent process stopped (SIGSTOP) while 2,000 of them are
    written: far more notes than its socket buffer holds (about 280 of 21 bytes). Resumed, the
    agent reaches the last revision with every entry in the map: the control plane keeps a
    watcher that fell behind and sends it the latest tail once it reads again (the bug: it
    closed the watch, and a 10,000-neighbor window stalled at revision 802)."""
    meta = bpf.map_create(2, "ss_test_meta", 4, 8, 4)
    agent = AgentProcess(native=agent_lib if native else None)
    try:
        with hash_map() as t, plane(tmp_path) as cp:
            maps = {"map_id": bpf.map_info(t.fd).id, "meta_id": bpf.map_info(meta).id}
            c = IpcClient(cp.socket, TOKEN)
            agent.call(op="watch", socket=cp.socket, token=TOKEN, **maps)
            os.kill(agent.pid, signal.SIGSTOP)
            try:
                k, v = R.make_entries(2000)
                timing = write_ipc(c, k, v, batch=1)
            finally:
                os.kill(agent.pid, signal.SIGCONT)
            assert timing.revisions == list(range(1, 2001))
            w = agent.call(op="wait", revision=2000, timeout=30)
            assert w["programmed"] == 2000 and w["errors"] == []
            assert sorted(x[0] for x in w["received"]) == list(range(1, 2001))
            assert bpf.map_read_all(t.fd) == state(k, v)
            assert bpf.map_lookup_elem(meta, bytes(4), 8) == (2000).to_bytes(8, "little")
            c.close()
    finally:
        agent.close()
        os.close(meta)


@NATIVE
def test_watch_ended_by_the_plane_is_an_error(tmp_path: Path, native: bool, agent_lib: str) -> None:
    """The control plane stopped under a watching agent: the watch raises with the revision it
    reached, and a wait for a later revision returns then, not at its timeout."""
    with hash_map() as t:
        with plane(tmp_path) as cp:
            a = IpcAgent(cp.socket, TOKEN, t, native=agent_lib if native else None)
            got: list[BaseException] = []
            ready = threading.Event()

            def run() -> None:
                try:
                    a.watch(ready=lambda _r: ready.set())
                except LoadGenError as e:
                    got.append(e)

            th = threading.Thread(target=run, daemon=True)
            th.start()
            assert ready.wait(10)
            c = IpcClient(cp.socket, TOKEN)
            k, v = R.make_entries(3)
            assert c.put_batch(k, v)[0] == 1
            c.close()
        t0 = time.monotonic()
        assert a.wait_revision(2, 30) is False
        assert time.monotonic() - t0 < 5
        th.join(5)
        assert [str(e) for e in got] == ["the control plane ended the watch at revision 1"]
        assert a.ended == "the control plane ended the watch at revision 1"
        a.close()


@pytest.mark.slow
def test_compiled_watch_takes_whole_notes_and_stops_at_deletes(agent_lib: str) -> None:
    """agent_list.c's ss_watch on a socket pair: a note in two pieces is one wake-up, two notes
    sent together are one walk to the later tail (each record its own update call), a record
    with deletes stops the walk before it, and the end of the stream is -EPIPE."""
    import ctypes
    import socket

    from swarmscope.targets.neighbors.ipc import FRAME, NOTE
    from swarmscope.targets.neighbors.ipc_agent import NOTE_BUF, _native

    nat = _native(agent_lib)
    w = LogWriter(capacity=1 << 16)
    r = LogReader(w.reader_fd())
    a, b = socket.socketpair()
    tracer = MapUpdateTracer([os.getpid()])
    tracer.load()
    try:
        with hash_map() as t:
            k, v = R.make_entries(30)
            buf, out = ctypes.create_string_buffer(NOTE_BUF), (ctypes.c_uint64 * 6)()

            def note(rev: int, tail: int) -> bytes:
                return FRAME.pack(NOTE.size, ord("w")) + NOTE.pack(rev, tail)

            def watch(off: int) -> int:
                return int(nat.watch(b.fileno(), t.fd, r.addr, off, 4, buf, NOTE_BUF, out))

            t1 = w.append(1, k[:40], v[:120])
            n1 = note(1, t1)
            a.sendall(n1[:7])
            threading.Timer(0.05, a.sendall, [n1[7:]]).start()
            tracer.events()
            assert watch(HEADER_SIZE) == 10 and list(out) == [t1, 1, 3, out[3], t1, 0]
            assert [e.processed for e in tracer.events() if e.processed] == [4, 4, 2]
            t2 = w.append(2, k[40:60], v[120:180])
            t3 = w.append(3, k[60:80], v[180:240])
            t4 = w.append(4, b"", b"", k[:4])
            a.sendall(note(2, t2) + note(3, t3) + note(4, t4)[:10])
            assert watch(t1) == 10 and (out[0], out[1], out[4], out[5]) == (t3, 3, t3, 10)
            assert [e.processed for e in tracer.events() if e.processed] == [4, 1, 4, 1]
            a.sendall(note(4, t4)[10:])
            assert watch(t3) == 0 and (out[0], out[4], out[5]) == (t3, t4, 0)  # a delete: Python's
            assert bpf.map_read_all(t.fd) == state(k[:80], v[:240])
            a.sendall(b"\x10\x00\x00\x00x" + bytes(16))
            assert watch(t4) == -71  # EPROTO: not a note
            out[5] = 0
            a.close()
            assert watch(t4) == -nat.EPIPE
    finally:
        tracer.close()
        b.close()
        r.close()
        w.close()


pytestmark = [needs_root, pytest.mark.bpf]
