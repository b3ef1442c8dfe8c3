"""bench/http_flood.py's report: the paired ratios of each engine and the printed table.

    ratios = {"locust": ratios_of("locust", med, runs)}
    print(report(med, ratios, workers, args))

``med`` is each path's median row and ``runs`` its rows per round, as http_flood.py measured
them (its docstring says what each figure is and how it is counted).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

GOAL = 0.95
CPU_GOAL = 1.05  # the Locust path's CPU per request within 5 % of plain Locust's (issue 32)


def ratios_of(
    eng: str, med: dict[str, dict[str, Any]], runs: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    ours, plain = med[f"{eng}_swarmscope"], med[f"{eng}_plain"]
    return {
        "rps": ours["rps"] / plain["rps"],
        # per generator core: what the orchestration costs the generator itself, whatever share
        # of the 2 shared cores each run happened to get
        "per_core": ours["rps_per_gen_core"] / plain["rps_per_gen_core"],
        # CPU per request, plain / ours (>1: ours is cheaper); the figure the noise moves least
        "cpu": plain["gen_ms_per_1k"] / ours["gen_ms_per_1k"],
        # the request rate of each round's pair (ours / plain, run one after the other) and
        # their median: the machine's load moves both of a pair alike, unlike separate medians
        "rps_rounds": [
            o["rps"] / p["rps"]
            for p in runs[f"{eng}_plain"]
            for o in runs[f"{eng}_swarmscope"]
            if p["round"] == o["round"]
        ],
        # the round-by-round ratios (interleaved pairs), for their spread
        "cpu_rounds": [
            p["gen_ms_per_1k"] / o["gen_ms_per_1k"]
            for p in runs[f"{eng}_plain"]
            for o in runs[f"{eng}_swarmscope"]
            if p["round"] == o["round"]
        ],
    }


def median(xs: list[Any]) -> Any:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else None


def report(med: dict[str, dict[str, Any]], ratios: dict[str, Any], w: dict[str, Any], args: Any) -> str:
    loads = [m["load_avg"] for m in med.values()]
    rows = [
        f"steady window: {args.window:g} s after {args.warmup:g} s warm-up, counted from nginx's "
        f"access log; {args.users} users; medians of {args.repeat} interleaved rounds; "
        f"load average {min(loads):.1f}-{max(loads):.1f}",
        f"{'path':<18} {'req/s (log)':>11} {'own/log':>8} {'gen cores':>9} {'req/s/core':>10} "
        f"{'gen ms/1k':>9} {'all ms/1k':>9} {'nginx cores':>11} {'others':>7}",
    ]
    for k, m in med.items():
        own = f"{m['own_count'] / m['log_lines']:.4f}" if m.get("own_count") else "-"
        rows.append(
            f"{k:<18} {m['rps']:11.0f} {own:>8} {m['gen_cores']:9.2f} {m['rps_per_gen_core']:10.0f} "
            f"{m['gen_ms_per_1k']:9.1f} {m['all_ms_per_1k']:9.1f} {m['nginx_cores']:11.2f} "
            f"{m['other_cores']:7.2f}"
        )
    rows.append("(ms/1k: CPU-ms per 1,000 requests of the generator; all: with the path's other processes)")
    lp = med.get("locust_plain", {})
    if lp.get("csv_count"):
        rows.append(f"(plain Locust's --csv count / log: {lp['csv_count'] / lp['log_lines']:.4f})")
    for k, v in ratios.items():
        verdict = "ok" if v["rps"] >= GOAL else "BELOW"
        spread = ", ".join(f"{x:.2f}" for x in v["cpu_rounds"])
        paired = ", ".join(f"{x:.2f}" for x in v["rps_rounds"])
        rows.append(
            f"ratio {k:<6} swarmscope / plain: {v['rps']:.3f} (goal >= {GOAL}: {verdict}); "
            f"per generator core {v['per_core']:.3f}; CPU per request plain/ours {v['cpu']:.3f} "
            f"(rounds {spread})"
        )
        rows.append(
            f"      {k:<6} req/s ours/plain per round: {paired} (median {median(v['rps_rounds']):.3f})"
        )
        if k == "locust":
            # The goal's figure: CPU per request, ours against plain, the median of the rounds'
            # pairs (each pair run one after the other), within 5 % over 6 rounds or more.
            cpu = median([1 / x for x in v["cpu_rounds"]])
            n = len(v["cpu_rounds"])
            ok = "too few rounds" if n < 6 else "ok" if cpu <= CPU_GOAL else "ABOVE"
            plain_us = med["locust_plain"]["gen_ms_per_1k"]
            rows.append(
                f"      locust CPU per request ours/plain, median of {n} rounds: {cpu:.3f} "
                f"(goal <= {CPU_GOAL} over >= 6 rounds: {ok})"
            )
            rows.append(
                f"      locust per-request bookkeeping (FloodUser.get less plain's task, no request): "
                f"{v['hooks_us']:.2f} CPU-µs per request, {100 * v['hooks_us'] / plain_us:.1f} % of "
                f"plain's {plain_us:.0f}"
            )
    if "k6_plain" in med:
        kc, kp, ks, kt = (med[k] for k in ("k6_plain_csv", "k6_plain", "k6_swarmscope", "k6_plain_tags"))
        p = kp["gen_ms_per_1k"]
        rows.append(
            f"k6 CPU-ms/1k: plain {p:.1f}; swarmscope's k6 path (its own output, one line per "
            f"request) {ks['gen_ms_per_1k']:.1f} (x{ks['gen_ms_per_1k'] / p:.3f}); plain with the "
            f"path's 3 system tags {kt['gen_ms_per_1k']:.1f} (x{kt['gen_ms_per_1k'] / p:.3f}); plain "
            f"with those tags and k6's CSV output (~13 lines per request, the path's old output) "
            f"{kc['gen_ms_per_1k']:.1f} (x{kc['gen_ms_per_1k'] / p:.3f})"
        )
        rows.append(
            f"k6 path against plain k6 with the same tags (the output and orchestration alone): "
            f"req/s {ks['rps'] / kt['rps']:.3f}, CPU per request plain/ours "
            f"{kt['gen_ms_per_1k'] / ks['gen_ms_per_1k']:.3f}"
        )
    if w:
        rows.append(
            f"generator ceiling per core: Locust {lp['rps_per_gen_core']:.0f}, "
            f"k6 {med['k6_plain']['rps_per_gen_core']:.0f}, wrk {med['wrk']['rps_per_gen_core']:.0f} req/s"
        )
        rows.append(
            f"distributed: nginx serves {w['nginx_rps_per_core']:.0f} req/s per nginx core; one Locust "
            f"worker (one core) sends {w['locust_worker_rps']:.0f} -> {w['workers_per_nginx_core']:.1f} "
            f"workers per nginx core; {w['workers_for_this_nginx']} for wrk's "
            f"{med['wrk']['rps']:.0f} req/s here"
        )
    return "\n".join(rows)
