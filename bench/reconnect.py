"""Load held: N simulated probes, a fraction of them disconnecting and reconnecting mid-window.

    .venv/bin/python bench/reconnect.py                       # 1000 probes, 10 % reconnect, 6 windows
    .venv/bin/python bench/reconnect.py --probes 200 --windows 4 --json

Starts N simulated probes (tests/fakeprobe.py: real gRPC, each its own channel and Session,
the mutual challenge on every registration) over a few processes against one in-process
fleet. Every window: open on all probes, then ``--fraction`` of them (picked at random) drop
their session and register again under the same probe id — before the close on even windows;
on odd ones they receive the CloseWindow, leave it unanswered and lose the session while the
close is in flight, so the fleet must send it again on the new session. Prints, per phase, readings
expected and lost (goal 0), reconnects made and reconnects the fleet reported for the window
(goal: equal), and the window-close latency next to its reference: the same fleet and probes,
windows without reconnects, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import statistics
import subprocess
import sys
import threading
import time
from subprocess import PIPE
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from simprobes import end

from swarmscope.controller.fleet import Fleet
from swarmscope.v1 import probe_pb2 as pb

TOKEN = "reconnect-bench-token"


def _probe_host() -> None:
    """One process of probes (``--host``): the address and its names as one JSON line on stdin,
    then a command a line (["silence" or "reconnect", names]), each answered "ack N" on stdout;
    stdin's end stops them."""
    from fakeprobe import FakeProbe

    address, names = json.loads(sys.stdin.readline())
    probes = {n: FakeProbe(address, TOKEN, n, {"exec": 1000}).start() for n in names}
    for line in sys.stdin:
        what, which = json.loads(line)
        for n in which:
            if what == "silence":  # the next commands are received but not answered
                probes[n].silent = True
            else:
                probes[n].silent = False
                probes[n].reconnect()
        print(f"ack {len(which)}", flush=True)
    for p in probes.values():
        p.stop()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Bench:
    def __init__(self, n: int, per_proc: int):
        self.n = n
        self.fleet = Fleet(TOKEN, liveness_s=30.0)
        self.fleet.start()
        self.names = [f"node-{i:05d}" for i in range(n)]
        chunks = [self.names[i : i + per_proc] for i in range(0, n, per_proc)]
        self.owner = {name: i for i, c in enumerate(chunks) for name in c}
        # Plain subprocesses (never a fork of a process that has gRPC running), not
        # multiprocessing's spawn: that starts a resource tracker here, alive as long as we are.
        self.procs = [
            subprocess.Popen([sys.executable, __file__, "--host"], stdin=PIPE, stdout=PIPE, text=True)
            for _ in chunks
        ]
        for p, c in zip(self.procs, chunks, strict=True):
            self._send(p, [self.fleet.address, c])
        self.fleet.wait_for_probes(n, timeout_s=600)
        self.nodes = {h: [pb.NodeInfo(name=h, cgroup_id=1)] for h in self.names}

    def _tell(self, what: str, names: list[str]) -> None:
        by_proc: dict[int, list[str]] = {}
        for name in names:
            by_proc.setdefault(self.owner[name], []).append(name)
        for i, which in by_proc.items():
            self._send(self.procs[i], [what, which])
        done = sum(self._ack(self.procs[i]) for i in by_proc)
        assert done == len(names)

    @staticmethod
    def _send(p: subprocess.Popen[str], msg: list[Any]) -> None:
        assert p.stdin is not None
        p.stdin.write(json.dumps(msg) + "\n")
        p.stdin.flush()

    @staticmethod
    def _ack(p: subprocess.Popen[str], timeout_s: float = 300) -> int:
        assert p.stdout is not None
        # One line per command, read whole: nothing waits in the reader's buffer for select().
        if not select.select([p.stdout], [], [], timeout_s)[0]:
            raise TimeoutError(f"probe host {p.pid} did not answer within {timeout_s:g} s")
        line = p.stdout.readline()
        if not line.startswith("ack "):
            raise RuntimeError(f"probe host {p.pid} said {line!r} (exit status {p.poll()})")
        return int(line.split()[1])

    def window(self, wid: str, reconnect: list[str], during_close: bool) -> dict[str, Any]:
        problems = self.fleet.open_window("bench", wid, self.nodes, timeout_s=120)
        assert problems == {}, problems
        got: dict[str, Any] = {}
        if reconnect:
            # during_close: the CloseWindow reaches these probes and goes unanswered, then they
            # lose the session while the close is in flight.
            self._tell("silence" if during_close else "reconnect", reconnect)
        t0 = time.monotonic()
        closer = threading.Thread(
            target=lambda: got.update(r=self.fleet.close_window("bench", wid, timeout_s=120))
        )
        closer.start()
        if reconnect and during_close:
            time.sleep(0.2)  # the close has gone out
            self._tell("reconnect", reconnect)
        closer.join()
        close_s = time.monotonic() - t0
        readings, missing = got["r"]
        exact = sum(1 for r in readings if r.counters.get("exec") == 1000)
        reported = self.fleet.take_reconnects(wid)
        return {
            "lost": self.n - len({r.node for r in readings}),
            "wrong": len(readings) - exact,
            "missing": len(missing),
            "reconnects_made": len(reconnect),
            "reconnects_reported": sum(reported.values()),
            "reported_exactly": sorted(k.split("@")[1] for k in reported) == sorted(reconnect),
            "close_s": close_s,
        }

    def close(self) -> None:
        end(self.procs, 60)  # each host stops its probes at its stdin's end, then exits
        self.fleet.stop()


def run(n: int, windows: int, fraction: float, per_proc: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    b = Bench(n, per_proc)
    try:
        base = [b.window(f"base-{w}", [], False) for w in range(windows)]
        k = round(n * fraction)
        rec = [b.window(f"rec-{w}", rng.sample(b.names, k), during_close=w % 2 == 1) for w in range(windows)]
    finally:
        b.close()

    def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
        closes = [r["close_s"] for r in rows]
        return {
            "windows": len(rows),
            "readings_expected": n * len(rows),
            "readings_lost": sum(r["lost"] for r in rows),
            "readings_wrong": sum(r["wrong"] for r in rows),
            "probes_missing": sum(r["missing"] for r in rows),
            "reconnects_made": sum(r["reconnects_made"] for r in rows),
            "reconnects_reported": sum(r["reconnects_reported"] for r in rows),
            "every_reconnect_named": all(r["reported_exactly"] for r in rows),
            "close_p50_ms": 1000 * statistics.median(closes),
            "close_p99_ms": 1000 * pct(closes, 0.99),
        }

    return {"probes": n, "fraction": fraction, "reference": summary(base), "reconnecting": summary(rec)}


def main() -> None:
    if sys.argv[1:] == ["--host"]:
        return _probe_host()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", type=int, default=1000)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--fraction", type=float, default=0.10)
    ap.add_argument("--per-process", type=int, default=100)
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = run(a.probes, a.windows, a.fraction, a.per_process, a.seed)
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(f"{res['probes']} probes, {100 * res['fraction']:.0f} % reconnect per window "
          "(even windows: before the close; odd: close unanswered, then reconnect)")  # fmt: skip
    head = ("phase", "windows", "expected", "lost", "wrong", "missing", "reconn", "reported", "named",
            "close p50", "close p99")  # fmt: skip
    print("".join(f"{h:>11}" for h in head))
    for phase in ("reference", "reconnecting"):
        r = res[phase]
        cells = (phase[:11], r["windows"], r["readings_expected"], r["readings_lost"], r["readings_wrong"],
                 r["probes_missing"], r["reconnects_made"], r["reconnects_reported"],
                 "yes" if r["every_reconnect_named"] else "NO", f"{r['close_p50_ms']:.0f}ms",
                 f"{r['close_p99_ms']:.0f}ms")  # fmt: skip
        print("".join(f"{c!s:>11}" for c in cells))


if __name__ == "__main__":
    main()
