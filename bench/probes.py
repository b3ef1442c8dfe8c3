"""Probe bench: cost per event of each probe program, and the full set's overhead on an exec storm.

    sudo .venv/bin/python bench/probes.py                    # 3 alternating rounds of 1 s
    sudo .venv/bin/python bench/probes.py --rounds 5 --duration-s 2 --json

(a) Cost per event: loads exec_count (and a second copy compiled without its first/last exec
times, the same run's reference for what keeping them costs; attached after it, or before it
with --ref-first), syscall_count (unfiltered: every syscall on the host; and a second copy
filtered to getppid, to show what the in-kernel filter saves), pkt_count (XDP on a veth in a
namespace pair this bench creates and deletes) and bpf_stats,
turns BPF run statistics on, runs one exec storm burst in a simulated node while sending UDP
packets through the veth, and reads each BPF function's run_cnt / run_time_ns
(BPF_OBJ_GET_INFO_BY_FD): ns per run, per program, with bpftool's figures for the same program
ids read before the unload beside them (bench/bpftool_ref.py). (b) Overhead: exec rate of ``run_burst``
without probes vs with the full set loaded (statistics on, as a probe with --metrics-port runs),
in alternating rounds of the same run; medians and the with/without ratio.

Caveats: needs root; the machine is shared and virtualised, so absolute figures are noisy (the
ratio is the figure to compare); syscall_count's runs include every syscall on the host during
the burst (other processes too), which is its real cost; the probes are loaded and unloaded
each round (BCC compiles them, outside the timed burst).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import secrets
import statistics
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from bpftool_ref import bracket, own

from swarmscope.core.sys import bpf
from swarmscope.probes import bcc_env
from swarmscope.probes.programs.base import Program
from swarmscope.probes.programs.exec_count import ExecCount
from swarmscope.probes.programs.pkt_count import PktCount
from swarmscope.probes.programs.syscall_count import SyscallCount
from swarmscope.probes.selfmetrics import bcc_of
from swarmscope.workers.exec_storm import run_burst
from swarmscope.workers.native import ensure_built
from swarmscope.workers.nodes import create_sim_nodes, destroy_sim_nodes

REF_NS_PER_EVENT = 150  # docs/platform.md: per-CPU exec counter, VM-inflated

SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < end:
    s.sendto(b"x" * 64, ("10.199.1.2", 9999)); n += 1
    if n % 100 == 0: time.sleep(0.001)
print(n)
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@contextlib.contextmanager
def veth_netns() -> Iterator[tuple[str, str]]:
    """Namespaces (a, b) joined by veth ssa(10.199.1.1) <-> ssb(10.199.1.2); deleted after."""
    tag = secrets.token_hex(3)
    a, b = f"ss-bench-{tag}-a", f"ss-bench-{tag}-b"
    try:
        _ip("netns", "add", a)
        _ip("netns", "add", b)
        _ip("link", "add", "ssa", "netns", a, "type", "veth", "peer", "name", "ssb", "netns", b)
        for ns, dev, addr in ((a, "ssa", "10.199.1.1/24"), (b, "ssb", "10.199.1.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        yield a, b
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def load_set(netns: str) -> list[Program]:
    progs: list[Program] = [ExecCount(), SyscallCount(), PktCount(["ssb"], netns=netns)]
    loaded: list[Program] = []
    try:
        for p in progs:
            p.load()
            loaded.append(p)
    except BaseException:
        close_set(loaded)
        raise
    return loaded


def close_set(progs: list[Program]) -> None:
    for p in progs:
        p.close()


def func_stats(progs: list[Program]) -> dict[str, tuple[int, int]]:
    """{program: (run_cnt, run_time_ns)} summed over its BPF functions."""
    out: dict[str, tuple[int, int]] = {}
    for p in progs:
        _, cnt, ns = own([fn.fd for fn in _funcs(p)])
        out[p.name] = (cnt, ns)
    return out


def _funcs(p: Program) -> list[Any]:
    return list(dict(getattr(bcc_of(p), "funcs", {}) or {}).values())


class _Filtered(SyscallCount):
    """syscall_count with a one-syscall filter, reported apart: the cost of filtering in-kernel."""

    name = "syscall_count[getppid]"

    def load(self) -> None:
        if self._bpf is None:
            self._bpf = bcc_env.load_program("syscall_count", ["-DSS_FILTER_SYSCALLS=1"])
            self._bpf[b"syscall_filter"][ctypes.c_int(110)] = ctypes.c_uint8(1)


class _CountOnly(ExecCount):
    """exec_count without its first/last times, reported apart: what keeping the times costs."""

    name = "exec_count[count only]"

    def load(self) -> None:
        if self._bpf is None:
            self._bpf = bcc_env.load_program("exec_count", ["-DSS_EXEC_COUNT_ONLY=1"])


def cost_per_event(
    tools: Any, node: Any, a: str, b: str, duration_s: float, conc: int, ref_first: bool = False
) -> dict[str, Any]:
    # Programs on one tracepoint run in attach order and the first pays for cold caches, so
    # the exec_count reference goes last (the difference is an upper bound) or, with
    # --ref-first, first (a lower bound).
    count_only = _CountOnly()
    if ref_first:
        count_only.load()
    try:
        progs = load_set(b)
        filtered = _Filtered(["getppid"])
        filtered.load()
        progs.append(filtered)
        if not ref_first:
            count_only.load()
    except BaseException:
        count_only.close()
        raise
    progs.append(count_only)
    try:
        with bpf.stats_enabled():
            before = func_stats(progs)
            sender = subprocess.Popen(
                ["ip", "netns", "exec", a, sys.executable, "-c", SENDER, str(duration_s)],
                stdout=subprocess.PIPE,
                text=True,
            )
            r = run_burst(tools, node, duration_s, conc)
            sent = int((sender.communicate(timeout=duration_s + 30)[0] or "0").strip())
            after = func_stats(progs)
            ref = bracket({p.name: [fn.fd for fn in _funcs(p)] for p in progs})  # before the unload
    finally:
        close_set(progs)
    res: dict[str, Any] = {"execs": r.execs, "packets_sent": sent, "programs": {}}
    for name, (c1, n1) in after.items():
        c0, n0 = before[name]
        runs, ns = c1 - c0, n1 - n0
        res["programs"][name] = {
            "runs": runs,
            "run_time_ns": ns,
            "ns_per_run": ns / runs if runs else None,
            "end": [c1, n1],  # the cumulative figures the deltas end at, for the bpftool check
            **ref[name],
        }
    return res


def overhead(tools: Any, node: Any, b: str, rounds: int, duration_s: float, conc: int) -> dict[str, Any]:
    without: list[float] = []
    with_: list[float] = []
    for _ in range(rounds):
        without.append(run_burst(tools, node, duration_s, conc).rate)
        progs = load_set(b)
        try:
            with bpf.stats_enabled():
                with_.append(run_burst(tools, node, duration_s, conc).rate)
        finally:
            close_set(progs)
    m0, m1 = statistics.median(without), statistics.median(with_)
    return {
        "without_exec_per_s": without,
        "with_exec_per_s": with_,
        "without_median": m0,
        "with_median": m1,
        "ratio_with_to_without": m1 / m0 if m0 else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds without / with probes")
    ap.add_argument("--duration-s", type=float, default=1.0, help="length of each burst")
    ap.add_argument("--concurrency", type=int, default=os.cpu_count() or 1, help="default: nproc")
    ap.add_argument(
        "--ref-first",
        action="store_true",
        help="attach exec_count's count-only reference before it (default: after it)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench/probes.py: run as root (cgroups, BPF, netns)", file=sys.stderr)
        return 3
    bcc_env.check()
    tools = ensure_built()
    group = f"benchp-{os.getpid()}"
    (node,) = create_sim_nodes(group, ["bench"], pids_max=4 * args.concurrency + 16)
    try:
        with veth_netns() as (a, b):
            cost = cost_per_event(tools, node, a, b, args.duration_s, args.concurrency, args.ref_first)
            ovh = overhead(tools, node, b, args.rounds, args.duration_s, args.concurrency)
    finally:
        destroy_sim_nodes(group)
    res = {
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
        "duration_s": args.duration_s,
        "concurrency": args.concurrency,
        "cost": cost,
        "overhead": ovh,
        "ref_ns_per_event_exec_count": REF_NS_PER_EVENT,
        "exec_count_ref_first": args.ref_first,
    }
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"probe bench: {res['cpus']} CPUs, burst {args.duration_s:g} s, concurrency {args.concurrency}")
    print(f"  (a) cost per event ({cost['execs']:,} execs, {cost['packets_sent']:,} packets sent):")
    for name, p in cost["programs"].items():
        per = f"{p['ns_per_run']:,.0f} ns/run" if p["ns_per_run"] is not None else "n/a"
        ref = f"   ref ~{REF_NS_PER_EVENT} ns/event (docs/platform.md)" if name == "exec_count" else ""
        if name == "exec_count[count only]":
            ref = f"   exec_count without times, attached {'first' if args.ref_first else 'last'} (same run)"
        print(f"      {name:22s} {per:>14s} over {p['runs']:,} runs{ref}")
    ratio = ovh["ratio_with_to_without"]
    print(
        f"  (b) exec rate without probes median {ovh['without_median']:,.0f}/s, with the full set "
        f"{ovh['with_median']:,.0f}/s, ratio {ratio:.3f}"
    )
    print(
        f"      per round without={[round(x) for x in ovh['without_exec_per_s']]}"
        f" with={[round(x) for x in ovh['with_exec_per_s']]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
