"""The ``ebpf_cost`` reconcile and table: each tool's program cost per phase, as top-ebpf printed it.

    per_window(results, readings, seconds)   # {"programs": [...], "loop": {...}} of one window
    text_table(phase)                        # the write-up's columns, for the terminal

Columns (the write-up's ``kubectl gadget top ebpf -o custom-columns=...``): PROGID TYPE NAME
PID COMM MAPMEMORY CUMULRUNCOUNT CUMULRUNTIME, plus CPU% (runtime over the window's length,
of one CPU) and TOOL. Run count and runtime are the window's deltas of the kernel's BPF run
statistics (``bpf_stats``, read by the probe); map memory is the memlock of the program's maps.

What the statistics do not attribute (said in the table's header, docs/seeds.md):
- **tail calls**: the kernel times a chain of programs as one run of the program at the
  attach point; a program reached by ``bpf_tail_call`` shows 0 runs and 0 time;
- **time before statistics were enabled**: run count and time grow only while BPF statistics
  are on (the probe turns them on when it loads; others may too), so the window's deltas are
  all there is, and the kernel's own timing overhead (tens of ns a run) is included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from swarmscope.controller.model import ProbeReading

CAVEAT = (
    "BPF statistics do not attribute: tail calls (a chain is charged to the program at the attach "
    "point; a tail-called program shows 0), and any run before statistics were enabled; runtime "
    "includes the kernel's timing overhead. Tool seccomp is ours (bpftrace on sys_enter), standing in "
    "for the write-up's seccomp advisor, which ig v0.35 does not have; the write-up's Falco and "
    "Cilium experiments are not run (docs/seeds.md#top-ebpf)"
)
COLUMNS = (
    "PROGID",
    "TYPE",
    "NAME",
    "PID",
    "COMM",
    "MAPMEMORY",
    "CUMULRUNCOUNT",
    "CUMULRUNTIME",
    "CPU%",
    "TOOL",
)


def prog_counters(readings: Sequence[ProbeReading]) -> dict[int, dict[str, int]]:
    """``prog.<id>.<name>.<field>`` counters of host readings -> {id: {field: delta}}."""
    out: dict[int, dict[str, int]] = {}
    for r in readings:
        for key, v in r.counters.items():
            parts = key.split(".")
            if len(parts) >= 4 and parts[0] == "prog" and parts[1].isdigit():
                out.setdefault(int(parts[1]), {})[parts[-1]] = int(v)
    return out


def per_window(
    tools: Sequence[Mapping[str, Any]],
    host: Sequence[ProbeReading],
    loop: Sequence[ProbeReading],
    seconds: float,
) -> dict[str, Any]:
    """One window's rows (the tools' programs, by runtime) and the loop's kernel-side rates."""
    stats = prog_counters(host)
    rows = []
    for t in tools:
        s = stats.get(int(t["id"]))
        rows.append(
            {
                **{k: t[k] for k in ("id", "type", "name", "tool", "pid", "comm", "map_memlock")},
                "run_cnt": None if s is None else s.get("run_cnt", 0),
                "run_time_ns": None if s is None else s.get("run_time_ns", 0),
                "cpu_pct": None
                if s is None or seconds <= 0
                else 100.0 * s.get("run_time_ns", 0) / (seconds * 1e9),
            }
        )
    rows.sort(key=lambda r: -(r["run_time_ns"] or 0))
    syscalls = sum(v for r in loop for k, v in r.counters.items() if k.startswith("sys."))
    execs = sum(int(r.counters.get("exec", 0)) for r in loop)
    return {
        "seconds": seconds,
        "programs": rows,
        "loop": {
            "syscalls": syscalls,
            "execs": execs,
            "syscalls_per_s": syscalls / seconds if seconds > 0 else None,
            "execs_per_s": execs / seconds if seconds > 0 else None,
        },
    }


def mem(n: int) -> str:
    """Sizes as the write-up prints them (509KiB, 1.597MiB, 44B)."""
    if n < 1024:
        return f"{n}B"
    if n < 1024 * 1024:
        return f"{n / 1024:.0f}KiB"
    return f"{n / 1024 / 1024:.3f}MiB"


def runtime(ns: int | None) -> str:
    if ns is None:
        return "-"
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.7g}s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.6g}ms"
    if ns >= 1_000:
        return f"{ns / 1e3:.4g}µs"
    return f"{ns}ns" if ns else "0s"


def cells(r: Mapping[str, Any]) -> list[str]:
    return [
        str(r["id"]),
        str(r["type"]),
        str(r["name"]),
        str(r["pid"]),
        str(r["comm"]),
        mem(int(r["map_memlock"])),
        "-" if r["run_cnt"] is None else str(r["run_cnt"]),
        runtime(r["run_time_ns"]),
        "-" if r["cpu_pct"] is None else f"{r['cpu_pct']:.3f}",
        str(r["tool"]),
    ]


def loop_line(phase: Mapping[str, Any]) -> str:
    lp = phase["loop"]
    rate = lp["syscalls_per_s"] or 0.0
    return (
        f"{phase['phase']}: {phase['seconds']:.2f} s; the loop's node: {lp['syscalls']} syscalls "
        f"({rate:.0f}/s), {lp['execs']} execs ({lp['execs_per_s'] or 0:.0f}/s), counted by the probe"
    )


def text_table(phase: Mapping[str, Any]) -> str:
    """One phase as the write-up printed it (left-aligned text, right-aligned numbers)."""
    body = [cells(r) for r in phase["programs"]]
    widths = [max(len(x) for x in col) for col in zip(COLUMNS, *body, strict=True)]
    right = {"MAPMEMORY", "CUMULRUNCOUNT", "CUMULRUNTIME", "CPU%"}
    lines = [
        "  ".join(
            x.rjust(w) if c in right else x.ljust(w) for c, x, w in zip(COLUMNS, row, widths, strict=True)
        )
        for row in [list(COLUMNS), *body]
    ]
    return "\n".join([loop_line(phase), f"({CAVEAT})", *(ln.rstrip() for ln in lines)])
