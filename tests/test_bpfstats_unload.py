"""A real program unloaded while bpf_stats and top-ebpf watch it (the counterpart of
test_bpfstats.py::test_bpf_stats_keeps_gone_programs, which monkeypatches list_programs).

An XDP counter on a veth in our own namespace sees exactly the packets we send; closing it
unloads it from the kernel between two readings.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time

import pytest
from net_helpers import send, veth_pair

from swarmscope.core.sys import bpf
from swarmscope.probes import bpfstats
from swarmscope.probes.bpfstats import BpfStats
from swarmscope.probes.programs.pkt_count import PktCount

SWARMSCOPE = [str(pathlib.Path(sys.executable).parent / "swarmscope")]
pytestmark = [pytest.mark.root, pytest.mark.bpf]


def _our_xdp_ids() -> set[int]:
    return {
        p.id
        for p in bpfstats.list_programs(owners_too=True).values()
        if p.type == "xdp" and any(pid == os.getpid() for pid, _ in p.owners)
    }


def test_bpf_stats_keeps_a_really_unloaded_program() -> None:
    stats_fd = bpf.enable_stats()
    watcher = BpfStats()
    watcher.load()
    try:
        with veth_pair() as (a, b):
            before = _our_xdp_ids()
            prog = PktCount(["ssb"], netns=b)
            prog.load()
            try:
                (pid,) = _our_xdp_ids() - before
                send(a, 17)
                first = watcher.snapshot()[0]
            finally:
                prog.close()
            # The pinned link and program go when their last reference does; the kernel frees
            # the program after an RCU grace period, so wait for it to be gone from the list.
            deadline = time.monotonic() + 10
            while pid in bpfstats.list_programs() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert pid not in bpfstats.list_programs(), "closing the program did not unload it"
            second = watcher.snapshot()[0]
    finally:
        watcher.close()
        os.close(stats_fd)
    key = f"prog.{pid}.pkt_count_xdp"
    assert first[f"{key}.run_cnt"] == 17, {k: v for k, v in first.items() if k.startswith(key)}
    assert first[f"{key}.run_time_ns"] > 0
    # Gone between the readings: its last values stay (a delta of 0), not an error or a drop.
    assert {k: v for k, v in second.items() if k.startswith(key + ".")} == {
        k: v for k, v in first.items() if k.startswith(key + ".")
    }


@pytest.mark.slow
def test_top_ebpf_live_mode_survives_an_unload() -> None:
    stats_fd = bpf.enable_stats()
    try:
        with veth_pair() as (a, b):
            before = _our_xdp_ids()
            prog = PktCount(["ssb"], netns=b)
            prog.load()
            (pid,) = _our_xdp_ids() - before
            top = subprocess.Popen(
                [*SWARMSCOPE, "top-ebpf", "-n", "8", "-d", "0.5", "-s", "id", "--type", "xdp"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert top.stdout is not None
            try:
                send(a, 5)
                # Unload only once top-ebpf has drawn a frame with the program (its start-up
                # can take seconds on a busy machine).
                seen = b""
                deadline = time.monotonic() + 60
                while not re.search(rb"(?m)^\s*%d\s" % pid, seen):
                    assert time.monotonic() < deadline, seen[-2000:]
                    chunk = os.read(top.stdout.fileno(), 65536)
                    assert chunk, seen[-2000:]
                    seen += chunk
                prog.close()
                rest, err_b = top.communicate(timeout=60)
                out, err = (seen + rest).decode(), err_b.decode()
            finally:
                top.kill()
                top.wait()
    finally:
        os.close(stats_fd)
    assert top.returncode == 0, err
    assert "Traceback" not in err, err
    frames = out.split("\x1b[H\x1b[2J")[1:]
    assert len(frames) == 8 and all(f.startswith("top-ebpf") for f in frames), out[-2000:]
    rows = [[ln.split()[0] for ln in f.splitlines()[2:] if ln.strip()[:1].isdigit()] for f in frames]
    assert str(pid) in rows[0], frames[0]
    assert str(pid) not in rows[-1], frames[-1]  # gone from the last refresh, and no crash
