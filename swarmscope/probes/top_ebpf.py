"""``swarmscope top-ebpf``: every BPF program on the node, what it runs and costs, like ``top``.

    swarmscope top-ebpf                          # live table, refresh every 1 s, sorted by CPU %
    swarmscope top-ebpf -d 2 -s runs --type xdp  # sort by runs in the interval, only XDP
    swarmscope top-ebpf --pid 1234 --name '^trace'
    swarmscope top-ebpf --once --json -d 0.5     # one interval, JSON, for scripts
    swarmscope top-ebpf --by-runs -o custom-columns=id,name,runs,cpu%   # chosen columns
    swarmscope top-ebpf --trend 60               # live: each program's CPU % over 60 refreshes
    swarmscope top-ebpf --prometheus 9648        # headless exporter: /metrics, /healthz

Statistics are switched on with BPF_ENABLE_STATS for as long as the command runs and off when
it exits (unless ``kernel.bpf_stats_enabled`` is set by someone else). Columns: ID, TYPE, NAME
(full BTF name), RUNS and RUN_NS in the interval, AVG_NS per run, CPU% of one core, MISSES
(recursion misses, cumulative), MAP_MEM (memlock of its maps), PIDS (processes holding a prog
or link fd), POD (their pods, ``namespace/pod/container``, on a Kubernetes node: probes/pods.py;
JSON ``pods``); ``-o custom-columns=A,B`` picks and orders them, ``-o json`` is ``--json``. Sort
keys: cpu, runs, avg, time, id, name, mem (``-s KEY`` or ``--by-KEY``). JSON rows also carry the
cumulative ``run_cnt`` / ``run_time_ns`` read at the end of the interval (compare with
``bpftool prog show -j``). The live table ends with CPU_TREND: each program's CPU share over
the last ``--trend`` refreshes as a text sparkline (bpftop's graph), one scale for all rows.

Exporter metrics (cumulative, labels ``id``, ``name``, ``type``):
``swarmscope_probe_prog_run_count_total``, ``swarmscope_probe_prog_run_time_seconds_total``,
``swarmscope_probe_prog_recursion_misses_total``, ``swarmscope_probe_prog_map_memory_bytes``,
and ``swarmscope_probe_prog_info`` (value 1, plus label ``pids``). Filters apply there too.
Live keys (stdin a terminal): c r a t m i n sort by cpu/runs/avg/time/mem/id/name, q quits.
Caveats: the live table is a plain ANSI redraw, a key applies from the next refresh;
the first scrape after start counts only from start; the owner walk reads every process's fd
table, so ``--pid``/PIDS cost grows with the number of open fds on the host.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from swarmscope.core.errors import ConfigError, Problem
from swarmscope.core.sys import bpf
from swarmscope.probes import bpfstats
from swarmscope.probes.bpfstats import ProgRate, ProgStats
from swarmscope.probes.pods import PodIndex

SORT_KEYS = {
    "cpu": lambda r: -r.cpu_pct,
    "runs": lambda r: -r.d_run_cnt,
    "avg": lambda r: -r.avg_ns,
    "time": lambda r: -r.d_run_time_ns,
    "mem": lambda r: -r.prog.map_memlock,
    "id": lambda r: r.prog.id,
    "name": lambda r: r.prog.name,
}


@dataclass
class Filters:
    name: re.Pattern[str] | None = None
    pid: int | None = None
    type: str | None = None

    def keep(self, p: ProgStats) -> bool:
        if self.name is not None and not self.name.search(p.name):
            return False
        if self.type is not None and p.type != self.type:
            return False
        return self.pid is None or any(pid == self.pid for pid, _ in p.owners)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "top-ebpf",
        help="live table of every BPF program's runs and cost (or --once/--json/--prometheus)",
        description="Every BPF program on this node: runs, run time, ns/run, CPU %, map memory, "
        "holding processes. Needs root.",
    )
    p.add_argument("-d", "--delay", type=float, default=1.0, help="refresh / measuring interval seconds")
    p.add_argument("-s", "--sort", default="cpu", choices=sorted(SORT_KEYS), help="sort key (default cpu)")
    for key in sorted(SORT_KEYS):  # the same as flags: --by-runs = -s runs (the last one wins)
        p.add_argument(f"--by-{key}", dest="sort", action="store_const", const=key, help=f"sort by {key}")
    p.add_argument(
        "-o", "--output", default="table",
        help="table (default), json, or custom-columns=ID,NAME,... (of: "
        + ", ".join(COLUMNS).replace("%", "%%") + ")",
    )  # fmt: skip
    p.add_argument(
        "--trend", type=int, default=30, metavar="N",
        help="live mode: a CPU_TREND column, each program's CPU %% over the last N refreshes (0: off)",
    )  # fmt: skip
    p.add_argument("-n", "--iterations", type=int, default=0, help="live mode: stop after N refreshes")
    p.add_argument("--name", help="only programs whose name matches this regular expression")
    p.add_argument("--pid", type=int, help="only programs held by this process")
    p.add_argument("--type", help="only programs of this type (e.g. xdp, tracepoint)")
    p.add_argument("--once", action="store_true", help="measure one interval, print, exit")
    p.add_argument("--json", action="store_true", help="print JSON (implies --once)")
    p.add_argument("--prometheus", type=int, metavar="PORT", help="headless exporter on PORT")
    p.add_argument("--bind", default="127.0.0.1", help="exporter address (default 127.0.0.1; 0.0.0.0: all)")
    p.set_defaults(func=run)


def _filters(args: argparse.Namespace) -> Filters:
    problems: list[Problem] = []
    name = None
    if args.name:
        try:
            name = re.compile(args.name)
        except re.error as e:
            problems.append(Problem("--name", "name", f"bad regular expression: {e}"))
    if args.type and args.type not in bpfstats.PROG_TYPES:
        problems.append(Problem("--type", "type", f"unknown type (known: {', '.join(bpfstats.PROG_TYPES)})"))
    if args.delay <= 0:
        problems.append(Problem("--delay", "delay", "must be > 0"))
    if problems:
        raise ConfigError(problems)
    return Filters(name=name, pid=args.pid, type=args.type)


def measure(delay_s: float, filters: Filters, sort: str = "cpu") -> tuple[list[ProgRate], float]:
    """One interval with statistics on: sorted, filtered per-program rates and the seconds measured."""
    with bpf.stats_enabled():
        before = bpfstats.list_programs(maps=False)
        t0 = time.monotonic_ns()
        time.sleep(delay_s)
        after = bpfstats.list_programs(owners_too=True)
        elapsed = time.monotonic_ns() - t0
    name_pods(after.values(), PodIndex.from_env())
    rows = [r for r in bpfstats.rates(before, after, elapsed) if filters.keep(r.prog)]
    return sorted(rows, key=SORT_KEYS[sort]), elapsed / 1e9


def name_pods(progs: Iterable[ProgStats], index: PodIndex) -> None:
    """Each program's pods: those of the processes holding it (none off Kubernetes)."""
    if not index.available():
        return
    for p in progs:
        refs = (index.of_pid(pid) for pid, _ in p.owners)
        p.pods = list(dict.fromkeys(str(r) for r in refs if r is not None))


def to_json(rows: Iterable[ProgRate], seconds: float) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "programs": [
            {
                "id": r.prog.id,
                "type": r.prog.type,
                "name": r.prog.name,
                "tag": r.prog.tag,
                "run_cnt": r.prog.run_cnt,
                "run_time_ns": r.prog.run_time_ns,
                "recursion_misses": r.prog.recursion_misses,
                "runs": r.d_run_cnt,
                "run_ns": r.d_run_time_ns,
                "avg_ns": round(r.avg_ns, 1),
                "cpu_pct": round(r.cpu_pct, 4),
                "map_ids": r.prog.map_ids,
                "map_memlock": r.prog.map_memlock,
                "pids": [{"pid": pid, "comm": comm} for pid, comm in r.prog.owners],
                "pods": list(r.prog.pods),
            }
            for r in rows
        ],
    }


def _mem(n: int) -> str:
    x = float(n)
    for unit in ("B", "K", "M"):
        if x < 1024:
            return f"{x:.0f}{unit}" if unit == "B" else f"{x:.1f}{unit}"
        x /= 1024
    return f"{x:.1f}G"


# The table's columns: name -> (left-aligned, cell). ``-o custom-columns=ID,NAME,CPU%`` picks
# and orders them (names as in the header, any case), as Inspektor Gadget's ``-o`` does.
COLUMNS: dict[str, tuple[bool, Callable[[ProgRate], str]]] = {
    "ID": (False, lambda r: str(r.prog.id)),
    "TYPE": (True, lambda r: r.prog.type),
    "NAME": (True, lambda r: r.prog.name),
    "RUNS": (False, lambda r: str(r.d_run_cnt)),
    "RUN_NS": (False, lambda r: str(r.d_run_time_ns)),
    "AVG_NS": (False, lambda r: f"{r.avg_ns:.0f}"),
    "CPU%": (False, lambda r: f"{r.cpu_pct:.2f}"),
    "MISSES": (False, lambda r: str(r.prog.recursion_misses)),
    "MAP_MEM": (False, lambda r: _mem(r.prog.map_memlock)),
    "PIDS": (True, lambda r: ",".join(f"{pid}/{comm}" for pid, comm in r.prog.owners) or "-"),
    "POD": (True, lambda r: ",".join(r.prog.pods) or "-"),
}
# Shown by default only when some row has one (off Kubernetes a column of "-" is noise).
OPTIONAL_COLUMNS = {"POD"}


def parse_output(spec: str) -> tuple[str, list[str]]:
    """``-o``: ``table`` (default), ``json``, or ``custom-columns=A,B`` (``columns=`` too)."""
    if spec in ("table", "json"):
        return spec, []  # the default columns (format_table)
    key, sep, value = spec.partition("=")
    if not sep or key not in ("custom-columns", "columns"):
        raise ConfigError([Problem("-o", "output", "expected table, json or custom-columns=COL,COL,...")])
    names = [c.strip().upper() for c in value.split(",") if c.strip()]
    bad = [c for c in names if c not in COLUMNS]
    if bad or not names:
        known = ", ".join(COLUMNS)
        raise ConfigError(
            [Problem("-o", "output", f"unknown column(s) {', '.join(bad) or '(none)'}; known: {known}")]
        )
    return "table", names


SPARK = " ▁▂▃▄▅▆▇█"  # 0 and eighths of the scale: one character per interval


def sparkline(values: list[float], top: float) -> str:
    """The time series of a program's CPU share, oldest first, as bpftop draws it (in text):
    one block per interval, its height relative to ``top`` (the same for every row)."""
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(8, math.ceil(v / top * 8))] for v in values)


def format_table(
    rows: list[ProgRate],
    seconds: float,
    columns: list[str] | None = None,
    trend: dict[int, list[float]] | None = None,
) -> str:
    """The table; with ``trend`` (program id -> CPU % per interval) a CPU_TREND column last."""
    header = columns or [
        c for c in COLUMNS if c not in OPTIONAL_COLUMNS or any(COLUMNS[c][1](r) != "-" for r in rows)
    ]
    body = [[COLUMNS[c][1](r) for c in header] for r in rows]
    if trend is not None:
        top = max((v for r in rows for v in trend.get(r.prog.id, [])), default=0.0)
        header = [*header, "CPU_TREND"]
        body = [[*b, sparkline(trend.get(r.prog.id, []), top)] for b, r in zip(body, rows, strict=True)]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    lines = [
        "  ".join(
            x.ljust(w) if c not in COLUMNS or COLUMNS[c][0] else x.rjust(w)
            for c, x, w in zip(header, row, widths, strict=True)
        )
        for row in [header, *body]
    ]
    total = sum(r.cpu_pct for r in rows)
    head = (
        f"top-ebpf  {time.strftime('%H:%M:%S')}  {len(rows)} programs, {seconds:.2f} s, "
        f"total CPU {total:.2f}%"
    )
    return head + "\n" + "\n".join(ln.rstrip() for ln in lines)


def run(args: argparse.Namespace) -> int:
    from swarmscope.probes import bcc_env

    filters = _filters(args)
    output, args.columns = parse_output(args.output)
    args.json = args.json or output == "json"
    bcc_env.ensure_mounts()
    if args.prometheus is not None:
        return _exporter(args.prometheus, args.bind, filters)
    if args.once or args.json:
        rows, secs = measure(args.delay, filters, args.sort)
        print(
            json.dumps(to_json(rows, secs), indent=2) if args.json else format_table(rows, secs, args.columns)
        )
        return 0
    return _live(args, filters)


# Single keys in the live table (when stdin is a terminal): sort by ..., q quits.
KEYS = {"c": "cpu", "r": "runs", "a": "avg", "t": "time", "m": "mem", "i": "id", "n": "name"}


def _live(args: argparse.Namespace, filters: Filters) -> int:
    import select
    import termios
    import tty

    sort = args.sort
    interactive = sys.stdin.isatty()
    saved = termios.tcgetattr(sys.stdin) if interactive else None
    if interactive:
        tty.setcbreak(sys.stdin)  # keys arrive one by one, unechoed; Ctrl-C still works
    n = 0
    history: dict[int, deque[float]] = {}  # program id -> CPU % of its last --trend intervals
    try:
        while args.iterations <= 0 or n < args.iterations:
            rows, secs = measure(args.delay, filters, sort)
            for r in rows:
                history.setdefault(r.prog.id, deque(maxlen=max(args.trend, 1))).append(r.cpu_pct)
            trend = {i: list(h) for i, h in history.items()} if args.trend > 0 else None
            # Plain ANSI: home + clear, then the table (works in any terminal and over ssh).
            footer = f"\nsort: {sort}   keys: c r a t m i n = sort by cpu/runs/avg/time/mem/id/name, q = quit"
            sys.stdout.write(
                "\x1b[H\x1b[2J"
                + format_table(rows, secs, args.columns, trend)
                + (footer if interactive else "")
                + "\n"
            )
            sys.stdout.flush()
            n += 1
            # Keys typed during the interval apply to the next frame.
            while interactive and select.select([sys.stdin], [], [], 0)[0]:
                key = sys.stdin.read(1)
                if key == "q":
                    return 0
                sort = KEYS.get(key, sort)
    except KeyboardInterrupt:
        pass
    finally:
        if saved is not None:
            termios.tcsetattr(sys.stdin, termios.TCSADRAIN, saved)
    return 0


class ProgCollector:
    """prometheus_client collector: reads every program on each scrape."""

    def __init__(self, filters: Filters, index: PodIndex | None = None) -> None:
        self.filters = filters
        self.index = index if index is not None else PodIndex.from_env()  # rescans as it ages

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["id", "name", "type"]
        runs = CounterMetricFamily("swarmscope_probe_prog_run_count", "times the program ran", labels=labels)
        secs = CounterMetricFamily(
            "swarmscope_probe_prog_run_time_seconds", "time the program ran (BPF stats)", labels=labels
        )
        miss = CounterMetricFamily(
            "swarmscope_probe_prog_recursion_misses", "runs skipped by recursion protection", labels=labels
        )
        mem = GaugeMetricFamily(
            "swarmscope_probe_prog_map_memory_bytes", "memlock of its maps", labels=labels
        )
        # The pods go on the info metric only: a label added to the counters would change their
        # series (and every query that sums them) whenever a holder's pod came or went.
        info = GaugeMetricFamily(
            "swarmscope_probe_prog_info", "program and its holders", labels=[*labels, "pids", "pods"]
        )
        progs = [p for p in bpfstats.list_programs(owners_too=True).values() if self.filters.keep(p)]
        name_pods(progs, self.index)
        for p in progs:
            lv = [str(p.id), p.name, p.type]
            runs.add_metric(lv, p.run_cnt)
            secs.add_metric(lv, p.run_time_ns / 1e9)
            miss.add_metric(lv, p.recursion_misses)
            mem.add_metric(lv, p.map_memlock)
            info.add_metric([*lv, ",".join(f"{pid}/{c}" for pid, c in p.owners), ",".join(p.pods)], 1)
        yield from (runs, secs, miss, mem, info)


def _exporter(port: int, bind: str, filters: Filters) -> int:
    import signal

    from prometheus_client import CollectorRegistry

    from swarmscope.probes.selfmetrics import serve

    registry = CollectorRegistry()
    registry.register(ProgCollector(filters))  # type: ignore[arg-type]
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with bpf.stats_enabled():
        server = serve(registry, port, bind)
        print(f"top-ebpf exporter on http://{bind}:{server.server_address[1]}/metrics", flush=True)
        try:
            stop.wait()
        finally:
            server.shutdown()
            server.server_close()
    return 0
