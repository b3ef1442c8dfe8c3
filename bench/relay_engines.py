"""The relay's CPU per window, Python relay vs native (Go) relay, side by side in one run.

    .venv/bin/python bench/relay_engines.py --probes 2000 --relays 2 --windows 10 --rounds 2

Each round runs bench/fanin_relays.py's fan-in (N simulated probes behind K `swarmscope relay`
processes, one controller in this process) once per engine, engines alternating, and prints per
engine the median over rounds of the relays' CPU-seconds per window per 1,000 probes (user+sys
of the relay processes over the measured windows: the figure a shared machine distorts least),
the controller's, the close latency, and the ratio python / native. Caveat: on two cores the
relays share CPU 1 with every simulated probe (fanin_relays.py pins them), so the close
latency is bounded by that core; the CPU-seconds are not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from fanin import pin_all
from fanin_relays import run_relays

TOKEN = "relay-engines-bench-token"
ENGINES = ("python", "native")
FIGURES = (
    "relays_cpu_s_per_window_per_1k",
    "ctl_cpu_s_per_window_per_1k",
    "close_p50_ms",
    "open_p50_ms",
    "readings_lost",
    "relays_rss_mib",
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probes", type=int, default=2000)
    ap.add_argument("--relays", type=int, default=2)
    ap.add_argument("--windows", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2, help="runs per engine, engines alternating")
    ap.add_argument("--per-process", type=int, default=2500, help="simulated probes per client process")
    ap.add_argument("--per-channel", type=int, default=50, help="simulated probes per HTTP/2 connection")
    ap.add_argument("--heartbeat-s", type=float, default=5.0)
    a = ap.parse_args()
    rows: dict[str, list[dict]] = {e: [] for e in ENGINES}
    load0 = os.getloadavg()
    t0 = time.monotonic()
    for r in range(a.rounds):
        for engine in ENGINES if r % 2 == 0 else reversed(ENGINES):
            row = run_relays(
                a.probes,
                a.relays,
                a.windows,
                a.per_process,
                a.per_channel,
                a.heartbeat_s,
                TOKEN,
                pin_all,
                engine=engine,
            )
            rows[engine].append(row)
            print(json.dumps({"engine": engine, **row}), file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    med = {e: {f: statistics.median(row[f] for row in rows[e]) for f in FIGURES} for e in ENGINES}
    print(
        f"{a.probes} probes, {a.relays} relays, {a.windows} windows x {a.rounds} rounds per engine "
        f"({time.monotonic() - t0:.0f} s); load average before {load0[0]:.2f} {load0[1]:.2f} "
        f"{load0[2]:.2f}, after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}"
    )
    print(f"{'median':32} " + " ".join(f"{e:>10}" for e in ENGINES))
    for f in FIGURES:
        print(f"{f:32} " + " ".join(f"{med[e][f]:10.4g}" for e in ENGINES))
    native = med["native"]["relays_cpu_s_per_window_per_1k"]
    ratio = med["python"]["relays_cpu_s_per_window_per_1k"] / native if native else float("inf")
    print(f"relay CPU per window, python / native: {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
