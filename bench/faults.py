"""The fault matrix: kill each part of a run with SIGKILL and SIGTERM at random points; audit.

    sudo python bench/faults.py                     # every part x both signals, once
    sudo python bench/faults.py --repeat 3 --seed 7 --only controller,worker

Each cell is a real `swarmscope run` (bench/fault_harness.py says what runs and how the victim
is found). The signal goes out after a random number of stored windows plus a random delay.
Afterwards the start-of-run sweep of the next run is done, and the audit checks that every
window stored before the kill is still stored, that the run is marked (not ``running``;
``interrupted`` when the controller was signalled), and that nothing is left: processes of
the run's tree, its cgroups, netns, links (with their XDP programs), pinned dirs, and the BPF
programs its processes held. Prints one row per part and signal, then the totals; the
reference in the same run is the unfaulted case, a run with no kill (``none``).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import signal
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # swarmscope, run from anywhere

from fault_harness import CASES, Case, FaultResult, run_fault


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1, help="runs per part and signal")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--json", default="", help="also write every result here")
    ns = ap.parse_args()
    seed = ns.seed if ns.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    names = [n for n in CASES if not ns.only or n in ns.only.split(",")]
    rows: list[FaultResult] = []
    work = pathlib.Path(tempfile.mkdtemp(prefix="ss-faults-"))
    print(f"seed {seed}; work dir {work}", file=sys.stderr)
    for name in names:
        for sig in (signal.SIGKILL, signal.SIGTERM):
            for _ in range(ns.repeat):
                case: Case = CASES[name]
                r = run_fault(case, sig, work, after_windows=rng.randint(1, 3), jitter_s=1.5, rng=rng)
                print(
                    f"  {r.case:<42} {r.sig:<8} acked {r.acked:>3} stored {r.stored:>3} "
                    f"status {r.status:<12} {'ok' if r.ok else 'FAIL'} {r.problems + r.leftovers}",
                    file=sys.stderr,
                    flush=True,
                )
                rows.append(r)
    t0 = time.monotonic()
    ref = run_fault(CASES["controller"], signal.SIGKILL, work, after_windows=10**6, jitter_s=0, rng=rng)
    ref_s = time.monotonic() - t0
    print(f"\nfault matrix (seed {seed})")
    print(f"{'part killed':<42} {'signal':<8} {'runs':>4} {'survived':>8} {'leftovers':>9}  statuses")
    by: dict[tuple[str, str], list[FaultResult]] = {}
    for r in rows:
        by.setdefault((r.case, r.sig), []).append(r)
    for (case, sig), rs in by.items():
        statuses = ",".join(sorted({r.status for r in rs}))
        left = sum(len(r.leftovers) for r in rs)
        print(f"{case:<42} {sig:<8} {len(rs):>4} {sum(r.ok for r in rs):>8} {left:>9}  {statuses}")
    total_left = sum(len(r.leftovers) for r in rows)
    print(f"{'total':<42} {'':<8} {len(rows):>4} {sum(r.ok for r in rows):>8} {total_left:>9}")
    print(
        f"reference: the same exec_storm run with no kill: status {ref.status}, "
        f"{ref.stored} windows stored, leftovers {len(ref.leftovers)}, {ref_s:.0f} s"
    )
    for r in rows:
        if not r.ok:
            print(f"  not survived: {r.case} {r.sig}: {r.problems + r.leftovers}")
    if ns.json:
        pathlib.Path(ns.json).write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
