"""Restart behaviour: control plane SIGKILLed mid-write, agent SIGKILLed mid-program."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest
from neighbors_util import agent_cmd, control_plane, needs_root, pin_dir

from swarmscope.core.sys import bpf
from swarmscope.targets.neighbors import records as R
from swarmscope.v1 import neighbors_pb2 as pb


def state_of(stub) -> tuple[int, dict[bytes, bytes]]:
    state: dict[bytes, bytes] = {}
    rev = 0
    for p in stub.List(pb.ListRequest()):
        rev = p.revision
        state.update(zip(_ch(p.keys, 4), _ch(p.values, 12), strict=True))
    return rev, state


def _ch(b: bytes, n: int) -> list[bytes]:
    return [b[i : i + n] for i in range(0, len(b), n)]


@pytest.mark.slow
def test_control_plane_sigkill_keeps_every_acknowledged_entry(tmp_path: Path) -> None:
    db = str(tmp_path / "n.db")
    acked: dict[bytes, bytes] = {}
    last_rev = 0
    with control_plane(db) as (proc, _addr, stub):
        sent = []

        def requests():
            for i in range(2000):  # far more than get acknowledged before the kill
                k, v = R.make_entries(100, start=i * 100)
                sent.append((k, v))
                yield pb.NeighborBatch(keys=k, values=v)

        with pytest.raises(grpc.RpcError):
            for i, ack in enumerate(stub.PutBatch(requests())):
                k, v = sent[i]
                acked.update(zip(_ch(k, 4), _ch(v, 12), strict=True))
                last_rev = ack.revision
                if i == 50:
                    os.kill(proc.pid, signal.SIGKILL)  # batches are still in flight
        proc.wait(10)
    assert len(acked) >= 5100 and len(sent) > 51
    with control_plane(db) as (_p, _a, stub):
        rev, state = state_of(stub)
        assert rev >= last_rev
        missing = [k for k, v in acked.items() if state.get(k) != v]
        assert not missing, f"{len(missing)} acknowledged entries lost"
        assert len(state) % 100 == 0  # whole transactions only: no torn batch


@pytest.mark.slow
@needs_root
@pytest.mark.bpf
def test_agent_sigkill_resumes_and_converges(tmp_path: Path) -> None:
    with control_plane(str(tmp_path / "n.db")) as (_p, addr, stub), pin_dir() as pins:
        agent = subprocess.Popen(agent_cmd(addr, pins), stdout=subprocess.PIPE, text=True)
        try:
            lines = [agent.stdout.readline().strip() for _ in range(2)]
            assert lines == ["LISTED 0 0", "WATCHING 0"], lines
            meta = bpf.obj_get(f"{pins}/neigh_meta")

            def programmed() -> int:
                v = bpf.map_lookup_elem(meta, b"\0\0\0\0", 8)
                return int.from_bytes(v or b"\0" * 8, "little")

            done = threading.Event()

            def write() -> None:
                def reqs():
                    for i in range(300):
                        k, v = R.make_entries(1000, start=i * 1000)
                        yield pb.NeighborBatch(keys=k, values=v)
                        time.sleep(0.002)

                list(stub.PutBatch(reqs()))
                done.set()

            w = threading.Thread(target=write)
            w.start()
            deadline = time.monotonic() + 60
            while programmed() < 20 and time.monotonic() < deadline:
                time.sleep(0.005)
            agent.kill()  # mid-program: the writer is still writing
            agent.wait(10)
            killed_at = programmed()
            assert 20 <= killed_at and not done.is_set()
            w.join(120)
            final = stub.Status(pb.StatusRequest()).revision
            assert final == 300 and killed_at < final
            agent = subprocess.Popen(agent_cmd(addr, pins), stdout=subprocess.PIPE, text=True)
            resumed = agent.stdout.readline().strip()
            assert resumed == f"WATCHING {killed_at}", resumed  # no re-list: resumed from its revision
            deadline = time.monotonic() + 60
            while programmed() < final and time.monotonic() < deadline:
                time.sleep(0.02)
            assert programmed() == final
            _rev, want = state_of(stub)
            got = bpf.map_read_all(bpf.obj_get(f"{pins}/neighbors"))
            assert len(want) == 300_000 and got == want
        finally:
            agent.kill()
            agent.wait(10)
