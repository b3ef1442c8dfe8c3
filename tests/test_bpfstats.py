"""bpf_stats / top-ebpf against a program whose runs we control exactly: XDP on a veth in our
own namespace sees only the packets we send. Cross-checked with bpftool (installed for tests).
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from net_helpers import send, veth_pair

from swarmscope.core.sys import bpf
from swarmscope.probes import bpfstats
from swarmscope.probes.bpfstats import BpfStats, parse_btf_names
from swarmscope.probes.programs.base import delta_by_node, get_program
from swarmscope.probes.programs.pkt_count import PktCount

SWARMSCOPE = [str(pathlib.Path(sys.executable).parent / "swarmscope")]


@dataclass
class Node:
    name: str
    cgroup_id: int


def btf_blob(types: list[bytes], strings: bytes) -> bytes:
    t = b"".join(types)
    return struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(t), len(t), len(strings)) + t + strings


def test_parse_btf_names() -> None:
    strings = b"\0int\0a_very_long_function_name\0ctx\0"
    types = [
        struct.pack("<III", 1, 1 << 24, 4) + struct.pack("<I", 32),  # 1: INT "int" (+4)
        struct.pack("<III", 0, (13 << 24) | 1, 1) + struct.pack("<II", 29, 1),  # 2: FUNC_PROTO, 1 param
        struct.pack("<III", 5, 12 << 24, 2),  # 3: FUNC "a_very_long_function_name"
    ]
    assert parse_btf_names(btf_blob(types, strings)) == {1: "int", 3: "a_very_long_function_name"}
    assert parse_btf_names(b"\0" * 24) == {}


@pytest.fixture(scope="module")
def xdp() -> Iterator[tuple[str, int]]:
    """(sender namespace, XDP program id) with run statistics on for the whole module."""
    fd = bpf.enable_stats()
    try:
        with veth_pair() as (a, b):
            prog = PktCount(["ssb"], netns=b)
            prog.load()
            try:
                ours = [
                    p
                    for p in bpfstats.list_programs(owners_too=True).values()
                    if any(pid == os.getpid() for pid, _ in p.owners)
                ]
                xdp_ids = [p.id for p in ours if p.type == "xdp"]
                assert len(xdp_ids) == 1, ours
                yield a, xdp_ids[0]
            finally:
                prog.close()
    finally:
        os.close(fd)


def bpftool_prog(prog_id: int) -> dict[str, Any]:
    """bpftool's view of one program (run_cnt, run_time_ns, map_ids): the kernel's, not ours."""
    out = subprocess.run(
        ["bpftool", "-j", "prog", "show", "id", str(prog_id)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    info: dict[str, Any] = json.loads(out.stdout)
    return {"run_cnt": 0, "run_time_ns": 0, **info}  # bpftool leaves them out while 0


@pytest.mark.root
@pytest.mark.bpf
def test_list_programs_counts_exact_runs(xdp: tuple[str, int]) -> None:
    ns, pid = xdp
    before = bpfstats.list_programs()
    tool_before = bpftool_prog(pid)
    send(ns, 300)
    after = bpfstats.list_programs(owners_too=True)
    tool_after = bpftool_prog(pid)  # nothing but our 300 packets runs it (d_run_cnt == 300)
    p = after[pid]
    assert p.name == "pkt_count_xdp" and p.type == "xdp"
    assert p.map_memlock > 0 and p.map_ids
    assert [p.map_ids[0]] == tool_after["map_ids"]
    (r,) = [r for r in bpfstats.rates(before, after, 10**9) if r.prog.id == pid]
    assert r.d_run_cnt == tool_after["run_cnt"] - tool_before["run_cnt"] == 300
    d_ns = tool_after["run_time_ns"] - tool_before["run_time_ns"]  # bpftool's own reading
    assert r.d_run_time_ns == d_ns > 0
    assert r.avg_ns == d_ns / 300
    assert r.cpu_pct == 100 * d_ns / 1e9  # over the 1 s interval given
    fill = bpfstats.map_fill(p.map_ids[0])
    assert fill is not None and fill.name == "pkt_count" and fill.entries == 1 and fill.max_entries == 4096


@pytest.mark.root
@pytest.mark.bpf
def test_bpf_stats_program_window(xdp: tuple[str, int]) -> None:
    ns, pid = xdp
    prog = get_program("bpf_stats")
    assert isinstance(prog, BpfStats)
    prog.load()
    try:
        before = prog.snapshot()
        send(ns, 40)
        after = prog.snapshot()
    finally:
        prog.close()
    got = delta_by_node(before, after, [Node("host", 0)])["host"]
    assert got[f"prog.{pid}.pkt_count_xdp.run_cnt"] == 40
    assert got[f"prog.{pid}.pkt_count_xdp.recursion_misses"] == 0


def test_bpf_stats_keeps_gone_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    progs = {7: bpfstats.ProgStats(7, "xdp", "x", "", 5, 50, 0)}
    monkeypatch.setattr(bpfstats, "list_programs", lambda **_: dict(progs))
    prog = BpfStats()
    prog._fd = -1  # pretend loaded; no syscall
    first = prog.snapshot()
    progs.clear()  # unloaded between snapshots: keeps its last value, the delta is 0 not an error
    assert (
        prog.snapshot()
        == first
        == {0: {"prog.7.x.run_cnt": 5, "prog.7.x.run_time_ns": 50, "prog.7.x.recursion_misses": 0}}
    )
    prog._fd = None


def top_json(*args: str) -> dict:
    out = subprocess.run(
        [*SWARMSCOPE, "top-ebpf", "--json", *args], check=True, capture_output=True, text=True, timeout=60
    )
    return json.loads(out.stdout)


@pytest.mark.root
@pytest.mark.bpf
def test_top_ebpf_json_agrees_with_bpftool(xdp: tuple[str, int]) -> None:
    ns, pid = xdp
    send(ns, 123)
    ours = top_json("-d", "0.1")
    tool = json.loads(
        subprocess.run(["bpftool", "prog", "show", "-j"], check=True, capture_output=True, text=True).stdout
    )
    theirs = {p["id"]: p for p in tool}
    mine = {p["id"]: p for p in ours["programs"]}
    # Our XDP program only runs when we send, so back to back both read the same numbers.
    assert mine[pid]["run_cnt"] == theirs[pid]["run_cnt"] >= 123
    assert mine[pid]["run_time_ns"] == theirs[pid]["run_time_ns"] > 0
    # Every other program: bpftool read later, so it saw at least as much; names and types agree.
    common = set(mine) & set(theirs)
    assert pid in common
    for i in common:
        # bpftool leaves the stats out for a program that never ran while stats were on.
        assert theirs[i].get("run_cnt", 0) >= mine[i]["run_cnt"]
        assert theirs[i].get("run_time_ns", 0) >= mine[i]["run_time_ns"]
        assert theirs[i]["name"] == mine[i]["name"]
        assert theirs[i]["type"] == mine[i]["type"]
        assert theirs[i].get("map_ids", []) == mine[i]["map_ids"]


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_top_ebpf_filters(xdp: tuple[str, int]) -> None:
    _, pid = xdp
    by_pid = top_json("-d", "0.05", "--pid", str(os.getpid()))
    assert [p["id"] for p in by_pid["programs"]] == [pid]
    comm = pathlib.Path(f"/proc/{os.getpid()}/comm").read_text().rstrip("\n")
    assert by_pid["programs"][0]["pids"] == [{"pid": os.getpid(), "comm": comm}]
    assert all(p["type"] == "xdp" for p in top_json("-d", "0.05", "--type", "xdp")["programs"])
    assert top_json("-d", "0.05", "--name", "^no-such-prog$")["programs"] == []
    table = subprocess.run(
        [*SWARMSCOPE, "top-ebpf", "--once", "-d", "0.05", "--pid", str(os.getpid())],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "pkt_count_xdp" in table and "ID" in table.splitlines()[1]
    bad = subprocess.run(
        [*SWARMSCOPE, "top-ebpf", "--once", "--type", "nope"], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "unknown type" in bad.stderr
    # -o custom-columns and a sort flag, on the real program (ours: the only one we hold)
    cols = subprocess.run(
        [*SWARMSCOPE, "top-ebpf", "--once", "-d", "0.05", "--pid", str(os.getpid()), "--by-id",
         "-o", "custom-columns=id,name,type"],
        check=True, capture_output=True, text=True,
    ).stdout.splitlines()  # fmt: skip
    assert [ln.split() for ln in cols[1:]] == [["ID", "NAME", "TYPE"], [str(pid), "pkt_count_xdp", "xdp"]]
    ids = [p["id"] for p in top_json("-d", "0.05", "--by-id")["programs"]]
    assert ids == sorted(ids) and pid in ids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


@pytest.mark.root
@pytest.mark.bpf
def test_top_ebpf_prometheus_exporter(xdp: tuple[str, int]) -> None:
    ns, pid = xdp
    port = free_port()
    proc = subprocess.Popen(
        [*SWARMSCOPE, "top-ebpf", "--prometheus", str(port), "--bind", "127.0.0.1", "--type", "xdp"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert "exporter on" in proc.stdout.readline()
        assert get(f"http://127.0.0.1:{port}/healthz") == "ok\n"
        before = bpfstats.list_programs()[pid].run_cnt
        send(ns, 25)
        text = get(f"http://127.0.0.1:{port}/metrics")
        label = f'{{id="{pid}",name="pkt_count_xdp",type="xdp"}}'
        line = next(
            ln for ln in text.splitlines() if ln.startswith(f"swarmscope_probe_prog_run_count_total{label}")
        )
        assert float(line.split()[-1]) == before + 25
        assert f"swarmscope_probe_prog_map_memory_bytes{label}" in text
        head = f'swarmscope_probe_prog_info{{id="{pid}",'
        info = next(ln for ln in text.splitlines() if ln.startswith(head))
        assert 'pods=""' in info  # not on a Kubernetes node: no pod holds it
        assert "swarmscope_probe_prog_run_time_seconds_total" in text
        assert 'type="tracepoint"' not in text  # --type filter applies to the exporter
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_probe_self_metrics(xdp: tuple[str, int]) -> None:
    # Its own pair of namespaces: a second PktCount instance, so the counts are its own.
    from swarmscope.probes.selfmetrics import ProbeSelfMetrics, serve

    with veth_pair() as (a, b):
        prog = PktCount(["ssb"], netns=b)
        prog.load()
        m = ProbeSelfMetrics(lambda: {"pkt_count": prog})
        server = serve(m.registry, 0, "127.0.0.1")
        try:
            send(a, 11)
            m.window_opened()
            m.window_closed(readings=3)
            text = get(f"http://127.0.0.1:{server.server_address[1]}/metrics")
        finally:
            server.shutdown()
            server.server_close()
            prog.close()
    lines = dict(ln.rsplit(" ", 1) for ln in text.splitlines() if ln and not ln.startswith("#"))
    assert (
        float(lines['swarmscope_probe_program_run_count_total{func="pkt_count_xdp",program="pkt_count"}'])
        == 11
    )
    assert float(lines['swarmscope_probe_map_entries{map="pkt_count",program="pkt_count"}']) == 1
    assert float(lines['swarmscope_probe_map_max_entries{map="pkt_count",program="pkt_count"}']) == 4096
    assert float(lines['swarmscope_probe_map_fill_ratio{map="pkt_count",program="pkt_count"}']) == 1 / 4096
    assert float(lines["swarmscope_probe_windows_opened_total"]) == 1
    assert float(lines["swarmscope_probe_windows_closed_total"]) == 1
    assert float(lines["swarmscope_probe_readings_sent_total"]) == 3
    # The ring-buffer families exist even though no program here uses a ring buffer.
    assert "# TYPE swarmscope_probe_ringbuf_events_total counter" in text
    assert "# TYPE swarmscope_probe_ringbuf_map_ratio gauge" in text


@pytest.mark.root
@pytest.mark.bpf
def test_top_ebpf_live_mode_redraws(xdp: tuple[str, int]) -> None:
    out = subprocess.run(
        [*SWARMSCOPE, "top-ebpf", "-n", "2", "-d", "0.05", "-s", "id", "--type", "xdp"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    frames = out.split("\x1b[H\x1b[2J")
    assert frames[0] == "" and len(frames) == 3
    assert all("pkt_count_xdp" in f and f.startswith("top-ebpf") for f in frames[1:])
    # The live table ends with CPU_TREND (the program is idle here, so its sparkline is blank).
    assert [f.splitlines()[1].split()[-1] for f in frames[1:]] == ["CPU_TREND", "CPU_TREND"]


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_top_ebpf_keys_in_a_terminal(xdp: tuple[str, int]) -> None:
    import pty
    import select

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*SWARMSCOPE, "top-ebpf", "-d", "0.2", "--type", "xdp"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    seen = b""

    def read_until(marker: bytes, timeout: float = 20.0) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while marker not in seen and time.monotonic() < deadline:
            if select.select([leader], [], [], 0.2)[0]:
                seen += os.read(leader, 65536)
        assert marker in seen, seen[-500:]

    try:
        read_until(b"sort: cpu")
        os.write(leader, b"i")
        read_until(b"sort: id")
        os.write(leader, b"q")
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()
        os.close(leader)
