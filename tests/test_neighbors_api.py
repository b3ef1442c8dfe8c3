"""NeighborStore API semantics against the real control plane process over gRPC."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest
from neighbors_util import control_plane

from swarmscope.kinds.neighbor_writes.results import entry_latencies, percentile
from swarmscope.targets.neighbors import records as R
from swarmscope.v1 import neighbors_pb2 as pb


def batch(n: int, start: int = 0, gen: int = 0) -> pb.NeighborBatch:
    k, v = R.make_entries(n, start, gen=gen)
    return pb.NeighborBatch(keys=k, values=v)


def listing(stub, revision: int = 0, page_size: int = 0) -> tuple[dict[bytes, bytes], list[pb.NeighborBatch]]:
    pages = list(stub.List(pb.ListRequest(revision=revision, page_size=page_size)))
    state: dict[bytes, bytes] = {}
    for p in pages:
        for i in range(len(p.keys) // 4):
            state[p.keys[i * 4 : i * 4 + 4]] = p.values[i * 12 : i * 12 + 12]
    return state, pages


def test_records_layout() -> None:
    k, v = R.make_entries(3, start=0, ifindex=7)
    assert k[:4] == bytes([10, 64, 0, 1]) and k[8:12] == bytes([10, 64, 0, 3])
    assert R.VALUE.unpack(v[12:24]) == (bytes([2, 0, 10, 64, 0, 2]), 0, 7)
    assert R.ip_of(R.key_of("10.64.0.9")) == "10.64.0.9"
    with pytest.raises(ValueError):
        R.check(k, v[:-1])


def test_put_get_delete_revisions_monotonic(tmp_path: Path) -> None:
    with control_plane(str(tmp_path / "n.db")) as (_p, _a, stub):
        ip = R.key_of("10.64.0.1")
        revs = []
        for gen in range(3):
            r = stub.Put(pb.PutRequest(neighbor=pb.Neighbor(ip=ip, value=R.value(f"02:00:00:00:00:0{gen}"))))
            assert r.existed == (gen > 0)
            revs.append(r.revision)
        got = stub.Get(pb.GetRequest(ip=ip))
        assert got.found and got.neighbor.value == R.value("02:00:00:00:00:02")
        assert got.neighbor.mod_revision == revs[-1]
        acks = list(stub.PutBatch(iter([batch(10), batch(10, 10), batch(5, 100)])))
        revs += [a.revision for a in acks]
        assert [a.count for a in acks] == [10, 10, 5]
        d = stub.Delete(pb.DeleteRequest(ip=ip))
        assert d.existed
        revs.append(d.revision)
        assert revs == sorted(revs) and len(set(revs)) == len(revs), revs
        assert not stub.Get(pb.GetRequest(ip=ip)).found
        st = stub.Status(pb.StatusRequest())
        assert (st.revision, st.entries) == (revs[-1], 24)  # 10.64.0.1 was in batch(10) too
        with pytest.raises(grpc.RpcError) as e:
            list(stub.PutBatch(iter([pb.NeighborBatch(keys=b"\0" * 4, values=b"\0" * 11)])))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_list_at_revision_and_paging(tmp_path: Path) -> None:
    with control_plane(str(tmp_path / "n.db")) as (_p, _a, stub):
        r1 = next(iter(stub.PutBatch(iter([batch(1000)])))).revision
        r2 = list(stub.PutBatch(iter([batch(500, 0, gen=1), batch(300, 5000)])))[-1].revision
        stub.Delete(pb.DeleteRequest(ip=R.key_of("10.64.0.1")))
        old, pages = listing(stub, revision=r1, page_size=128)
        assert len(old) == 1000 and all(v[1] == 0 for v in old.values())
        assert len(pages) == 8 and [p.last for p in pages] == [False] * 7 + [True]
        assert {p.revision for p in pages} == {r1}
        mid, _ = listing(stub, revision=r2)
        assert len(mid) == 1300 and sum(1 for v in mid.values() if v[1] == 1) == 500
        now, pages = listing(stub)
        assert len(now) == 1299 and bytes([10, 64, 0, 1]) not in now
        with pytest.raises(grpc.RpcError) as e:
            listing(stub, revision=10**6)
        assert e.value.code() == grpc.StatusCode.OUT_OF_RANGE


def test_watch_from_revision_history_then_live(tmp_path: Path) -> None:
    with control_plane(str(tmp_path / "n.db")) as (_p, _a, stub):
        acks = list(stub.PutBatch(iter([batch(10), batch(10, 10), batch(10, 20)])))
        call = stub.Watch(pb.WatchRequest(start_revision=acks[0].revision))
        got: list[pb.NeighborBatch] = []
        two = threading.Event()

        def reader() -> None:
            for m in call:
                got.append(m)
                if len(got) == 2:
                    two.set()
                if len(got) == 3:
                    return

        th = threading.Thread(target=reader)
        th.start()
        assert two.wait(10), "history not delivered"
        live = stub.Delete(pb.DeleteRequest(ip=R.key_of("10.64.0.3")))
        th.join(10)
        call.cancel()
        assert [m.revision for m in got] == [acks[1].revision, acks[2].revision, live.revision]
        assert got[0].keys == R.make_keys(10, 10) and got[1].keys == R.make_keys(10, 20)
        assert got[2].deleted == bytes([10, 64, 0, 3]) and not got[2].keys


def test_entry_latency_matching() -> None:
    # two client batches of 3 and 2 entries; kernel wrote 4 then 1
    lat = entry_latencies([(3, 0), (5, 10)], [(4, 100), (5, 200)])
    assert lat == [(100, 3), (90, 1), (190, 1)]
    assert percentile(lat, 0.5) == 100 and percentile(lat, 0.99) == 190


def test_watch_fans_out_to_many_agents(tmp_path: Path) -> None:
    with control_plane(str(tmp_path / "n.db")) as (_p, _a, stub):
        calls = [stub.Watch(pb.WatchRequest(start_revision=0)) for _ in range(4)]
        seen: list[list[int]] = [[] for _ in calls]

        def reader(i: int) -> None:
            for m in calls[i]:
                seen[i].append(m.revision)
                if len(seen[i]) == 20:
                    return

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        acks = list(stub.PutBatch(iter([batch(10, i * 10) for i in range(20)])))
        for t in threads:
            t.join(10)
        for c in calls:
            c.cancel()
        want = [a.revision for a in acks]
        assert seen == [want] * 4


def test_kernel_ends_by_pid_or_by_the_maps_id_only() -> None:
    """agent_filter pid: the worker's pid and its map; cgroup (a pod: the sample's pid is the
    host's, never the worker's): every call of the node's cgroup to the worker's map."""
    from swarmscope.controller.model import ProbeReading, ReadingSample
    from swarmscope.kinds.neighbor_writes.results import SERIES, kernel_ends

    def call(end: int, n: int, pid: int, map_id: int) -> ReadingSample:
        return ReadingSample(
            SERIES, end - 5, end, n, {"pid": str(pid), "cmd": "batch", "map_id": str(map_id)}
        )

    # pid 4242: the agent's host pid (7 in its pod); map 57 the worker's, 58 its meta map.
    samples = [call(10, 100, 4242, 57), call(20, 1, 4242, 58), call(30, 50, 4242, 57), call(40, 9, 7, 99)]
    readings = [ProbeReading("p", "w1-n1", {}, samples=samples)]
    assert kernel_ends(readings, "w1-n1", None, 57) == [[100, 10], [150, 30]]
    assert kernel_ends(readings, "w1-n1", 7, 57) == []  # the pod's pid: nothing
    assert kernel_ends(readings, "w1-n1", 4242, 57) == [[100, 10], [150, 30]]
    assert kernel_ends(readings, "other", None, 57) == []


def test_a_starter_gone_before_the_listening_line_stops_it_quietly(tmp_path: Path) -> None:
    """A Ctrl-C while a run starts closes the pipe the control plane announces its port on: the
    control plane then stops by itself, exit 0, no traceback (it printed a BrokenPipeError)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "SWARMSCOPE_NEIGHBORS_TOKEN": "t" * 32}
    cmd = [sys.executable, "-m", "swarmscope.targets.neighbors.server", "--db", str(tmp_path / "n.db")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # before its imports are done: the line meets a closed pipe
    try:
        err = p.stderr.read().decode()
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert "Traceback" not in err, err
    assert "BrokenPipe" not in err, err
    assert rc == 0, err


def test_a_database_it_cannot_open_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Its database's directory gone (a starter that stopped while it started removes it): one
    line saying so, exit 2, no traceback (a Ctrl-C cell of the worker's run printed
    sqlite3's OperationalError traceback)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "SWARMSCOPE_NEIGHBORS_TOKEN": "t" * 32}
    db = tmp_path / "gone" / "n.db"
    cmd = [sys.executable, "-m", "swarmscope.targets.neighbors.server", "--db", str(db)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert p.stderr == (
        f"neighbor control plane: cannot open its database {db}: unable to open database file\n"
    ), p.stderr
