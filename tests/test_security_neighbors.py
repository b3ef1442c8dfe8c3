"""Issue 18, finding 9: the neighbor control plane is authenticated, size- and rate-capped, its
log compacted and its watch queues bounded. Real servers over real sockets.

Before the fix any local process could write or read neighbors (no authentication), send
64 MiB messages, make a List at an old revision replay the whole log, and grow the server's
memory without bound with a watcher that never reads.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import grpc
import pytest
from neighbors_util import TOKEN, control_plane

from swarmscope.core.grpcauth import token_channel
from swarmscope.targets.neighbors import records as R
from swarmscope.targets.neighbors.server import MAX_MESSAGE_BYTES, MAX_WATCHERS, connect, serve
from swarmscope.targets.neighbors.store import Compacted, Store
from swarmscope.v1 import neighbors_pb2 as pb
from swarmscope.v1 import neighbors_pb2_grpc as pbg


def batch(n: int, start: int = 0) -> pb.NeighborBatch:
    k, v = R.make_entries(n, start=start)
    return pb.NeighborBatch(keys=k, values=v)


def every_call(stub: pbg.NeighborStoreStub) -> dict[str, object]:
    """Each method once; the call's result or the RpcError it raised."""
    ip = R.key_of("10.64.0.1")
    calls = {
        "Put": lambda: stub.Put(
            pb.PutRequest(neighbor=pb.Neighbor(ip=ip, value=R.value("02:00:00:00:00:01")))
        ),
        "PutBatch": lambda: list(stub.PutBatch(iter([batch(3)]))),
        "Delete": lambda: stub.Delete(pb.DeleteRequest(ip=ip)),
        "Get": lambda: stub.Get(pb.GetRequest(ip=ip)),
        "List": lambda: list(stub.List(pb.ListRequest())),
        "Watch": lambda: next(iter(stub.Watch(pb.WatchRequest(start_revision=0), timeout=2))),
        "Status": lambda: stub.Status(pb.StatusRequest()),
    }
    out: dict[str, object] = {}
    for name, fn in calls.items():
        try:
            out[name] = fn()
        except grpc.RpcError as e:
            out[name] = e
    return out


def test_every_method_needs_the_token(tmp_path: Path) -> None:
    with control_plane(str(tmp_path / "n.db")) as (_p, addr, stub):
        for channel in (grpc.insecure_channel(addr), connect(addr, "not-the-token")):
            with channel:
                got = every_call(pbg.NeighborStoreStub(channel))
            methods = {m for m in vars(pbg.NeighborStoreServicer) if m[0].isupper()}
            assert set(got) == methods  # every method of the service is tried
            codes = {n: r.code() for n, r in got.items() if isinstance(r, grpc.RpcError)}
            assert codes == dict.fromkeys(got, grpc.StatusCode.UNAUTHENTICATED)
        st = stub.Status(pb.StatusRequest())
        assert (st.revision, st.entries, st.watchers) == (0, 0, 0)  # nothing was written
        got = every_call(stub)  # with the token: all work (Watch: deadline, nothing new to send)
        assert [n for n, r in got.items() if isinstance(r, grpc.RpcError) and n != "Watch"] == []


@pytest.mark.slow
def test_oversized_message_refused_server_stays_up(tmp_path: Path) -> None:
    with control_plane(str(tmp_path / "n.db")) as (proc, _addr, stub):
        n = MAX_MESSAGE_BYTES // 16 + 1
        with pytest.raises(grpc.RpcError) as ei:
            list(stub.PutBatch(iter([batch(n)])))
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert proc.poll() is None and stub.Status(pb.StatusRequest()).entries == 0
        assert [a.count for a in stub.PutBatch(iter([batch(1000)]))] == [1000]


@pytest.mark.slow
def test_call_and_write_rates_are_capped(tmp_path: Path) -> None:
    server, store, port = serve(str(tmp_path / "n.db"), "127.0.0.1:0", TOKEN, calls_per_s=50, writes_per_s=20)
    try:
        with connect(f"127.0.0.1:{port}", TOKEN) as ch:
            stub = pbg.NeighborStoreStub(ch)
            t0 = time.monotonic()
            ok = refused = 0
            for _ in range(300):
                try:
                    stub.Status(pb.StatusRequest())
                    ok += 1
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    refused += 1
            elapsed = time.monotonic() - t0
            assert refused > 0 and ok <= 50 + 50 * elapsed + 1, (ok, refused, elapsed)
            time.sleep(1.2)  # the call bucket refills
            # Writes: one stream may not write faster than the write cap either.
            with pytest.raises(grpc.RpcError) as ei:
                list(stub.PutBatch(iter([batch(1, i) for i in range(200)])))
            assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert store.status()[0] <= 40 + 20 * 2  # burst (2 x rate) + what refilled meanwhile
    finally:
        server.stop(0).wait()
        store.close()


def test_log_is_compacted_and_old_revisions_refused(tmp_path: Path) -> None:
    db = str(tmp_path / "n.db")
    st = Store(db, keep=10)
    ref: dict[int, dict[int, bytes]] = {0: {}}
    state: dict[int, bytes] = {}
    for i in range(100):
        k, v = R.make_entries(5, start=i * 3)  # overlapping: later revisions replace entries
        dels = R.pack_keys([R.unpack_keys(k)[0]]) if i % 7 == 0 else b""
        rev = st.commit(k, v, dels)
        Store._apply(state, None, rev, k, v, dels)
        ref[rev] = dict(state)
    rows = sqlite3.connect(db).execute("SELECT COUNT(*) FROM log").fetchone()[0]
    assert rows < 2 * 10 and st.compacted >= 100 - 2 * 10 and st.compactions >= 4
    for rev in range(st.compacted, 101):
        got_rev, keys, values = st.snapshot(rev)
        assert (
            got_rev == rev and dict(zip(R.unpack_keys(keys), R.split_values(values), strict=True)) == ref[rev]
        )
    with pytest.raises(Compacted):
        st.snapshot(st.compacted - 1)
    with pytest.raises(Compacted):
        list(st.history(0, 100))
    mods = {k: st.get(k) for k in st.values}
    st.close()
    again = Store(db, keep=10)  # reopened: base + the rest of the log, the same state
    assert again.revision == 100 and {k: again.get(k) for k in again.values} == mods
    again.close()


def test_list_and_watch_from_a_compacted_revision_are_out_of_range(tmp_path: Path) -> None:
    server, store, port = serve(str(tmp_path / "n.db"), "127.0.0.1:0", TOKEN)
    store.keep = 5
    try:
        with connect(f"127.0.0.1:{port}", TOKEN) as ch:
            stub = pbg.NeighborStoreStub(ch)
            list(stub.PutBatch(iter([batch(2, i) for i in range(40)])))
            assert store.compacted > 1
            for call in (lambda: list(stub.List(pb.ListRequest(revision=1))),
                         lambda: next(iter(stub.Watch(pb.WatchRequest(start_revision=0))))):  # fmt: skip
                with pytest.raises(grpc.RpcError) as ei:
                    call()
                assert ei.value.code() == grpc.StatusCode.OUT_OF_RANGE
            pages = list(stub.List(pb.ListRequest(revision=store.compacted)))
            assert pages[-1].revision == store.compacted
    finally:
        server.stop(0).wait()
        store.close()


@pytest.mark.slow
def test_a_watcher_that_does_not_read_is_dropped_not_buffered(tmp_path: Path) -> None:
    server, store, port = serve(str(tmp_path / "n.db"), "127.0.0.1:0", TOKEN)
    store.watch_queue_bytes = 256 << 10
    try:
        # No BDP probing: the client's receive window stays small, as a slow reader's would.
        with token_channel(f"127.0.0.1:{port}", TOKEN, [("grpc.http2.bdp_probe", 0)]) as ch:
            stub = pbg.NeighborStoreStub(ch)
            call = stub.Watch(pb.WatchRequest(start_revision=0))
            deadline = time.monotonic() + 10
            while store.status()[2] != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            w = store.watchers[0]
            # 100 x 160 KB, never read: gRPC's flow-control window fills, then the queue.
            list(stub.PutBatch(iter([batch(10_000, i * 10_000) for i in range(100)])))
            assert w.overflowed and store.status()[2] == 0
            assert w.pending <= store.watch_queue_bytes
            with pytest.raises(grpc.RpcError) as ei:
                for _ in call:
                    pass
            assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "fell too far behind" in (ei.value.details() or "")
    finally:
        server.stop(0).wait()
        store.close()


def test_watchers_are_capped(tmp_path: Path) -> None:
    with control_plane(str(tmp_path / "n.db")) as (proc, _addr, stub):
        calls = [stub.Watch(pb.WatchRequest(start_revision=0)) for _ in range(MAX_WATCHERS)]
        deadline = time.monotonic() + 30
        while stub.Status(pb.StatusRequest()).watchers < MAX_WATCHERS and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stub.Status(pb.StatusRequest()).watchers == MAX_WATCHERS
        with pytest.raises(grpc.RpcError) as ei:
            next(iter(stub.Watch(pb.WatchRequest(start_revision=0), timeout=10)))
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # The watchers hold threads, yet writes still go through.
        assert [a.count for a in stub.PutBatch(iter([batch(10)]))] == [10]
        for c in calls:
            c.cancel()
        assert proc.poll() is None
