"""HTTP bench: does swarmscope's orchestration cost throughput? Same nginx, same users, same counter.

    .venv/bin/python bench/http_flood.py --users 50 [--warmup 2 --window 4 --repeat 3]
    .venv/bin/python bench/http_flood.py --paths k6 --repeat 5     # the k6 rows only (~3 min)

Against one local target (targets.ingress.local: nginx LB with 2 workers + 2 backends in our
netns), one after the other and interleaved over ``--repeat`` rounds: swarmscope's Locust path
(``swarmscope run``: a worker driver's FloodUsers) vs plain Locust (``locust --headless``, a
bare FastHttpUser), swarmscope's k6 path (the driver runs k6) vs plain k6 (``k6 run --vus``),
and wrk as the ceiling.

Every path is counted the same way, by the server: nginx's access log stamps each request with
``$msec``; a run's load starts at its 10th line (after swarmscope's one preflight GET), the
first ``--warmup`` seconds are dropped, and the rate is the lines in the next ``--window``
seconds divided by it. So ramp-up, start-up and stop are outside every figure alike. The same
log checks each tool's own count (its total against the lines it caused). CPU is sampled from
/proc (psutil) every 0.1 s and cut to the same window: the generator's own process(es) (the
``swarmscope run`` process, where the Locust users run, or its k6 alone; the probe, and on
the k6 path the swarmscope process, are shown apart as "others") and nginx's, giving each
generator's ceiling per core next to wrk's, and how many one-core Locust workers one saturated
nginx needs. Each path's CPU-ms per 1,000 requests (its generator's CPU in the window over the
requests nginx logged in it) is the figure the machine's load moves least: a generator starved
to a tenth of a core still spends about the same CPU on a request, while its request rate
follows the share it got.

Plain k6 is upstream k6, unmodified (``tools/build_k6.sh``: ``go install go.k6.io/k6@v1.8.1``),
with no ``--out``: what a user who does not need per-request samples runs. The k6 path runs the
same k6 version built with swarmscope's output compiled in (``tools/build_k6.sh --swarmscope``,
same Go, same flags), writing one line per request. ``k6_plain_csv`` is upstream k6 writing
k6's CSV output with the tags the k6 path asks for: what the k6 path cost before it had its own
output (k6's CSV writes ~13 samples per request), in the same run. ``k6_plain_tags`` is upstream
k6 with those tags and no output: the k6 path asks k6 for 3 system tags (scenario, status,
error_code) where plain k6 builds its ~14 default ones, so this row tells that saving apart from
the output's cost (the k6 path against it is the output and the orchestration alone).

The Locust path's users are FastHttpUsers like plain's; per request they also append one tuple
to a buffer that goes into swarmscope's exact HdrHistograms every 2,048 requests
(workers/http_users.py), and the process runs no other thread or per-request hook; in quiet
runs its CPU per request came within 1-9 % of plain's (docs/platform.md). Its request rate
follows the share of the 2 cores it got in its window, which a shared machine's load decides,
so the paired figures say more than the medians: each round runs both paths one after the
other, every other round in reverse order (ABBA, so a load that rises during the bench does
not always hit the second), and the report gives each round's ours/plain request rate and CPU
per request beside the medians' ratio. The goal (issue 32) is CPU per request, ours against
plain, the median of the rounds' pairs: within 5 % over 6 rounds or more (``--paths locust
--repeat 6``). Beside it, what the path adds per request: FloodUser.get on a client that answers
at once (finding the window, the tuple, the batched flush into the histograms) less plain's task
on the same client, timed in its own process.

Prints medians over the rounds, the plain/ours CPU ratio and ours/plain request rate of each
interleaved round, and the load average (bench/http_flood_report.py). Caveats: 2 shared
cores — the machine's other load moves every figure; compare within one run only. Every
tool runs ``--start-allowance`` seconds longer than the window needs, as a starved machine
starts them late; a round whose load still ended early is dropped, with a message. Needs
root (netns). SIGTERM/SIGINT stop the running tool (SIGTERM, then SIGKILL after 10 s) and
remove the target's namespace; a second signal during that is ignored.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from http_flood_report import median, ratios_of, report  # noqa: E402  (bench/ is on sys.path)

from swarmscope.targets.ingress.local import LocalIngress  # noqa: E402
from swarmscope.workers.k6 import k6_binary  # noqa: E402

LOAD_STARTS_AT_LINE = 10  # a run's load starts at its 10th log line (swarmscope sends 1 preflight)

PLAIN_LOCUSTFILE = """
from locust import FastHttpUser, constant, task

class Plain(FastHttpUser):
    wait_time = constant(0)

    @task
    def get(self):
        self.client.get("/")
"""

# What swarmscope adds to each request of the Locust path: FloodUser.get as it runs (finding the
# window, one tuple appended, the batched flush into the exact HdrHistograms) on a client that
# answers at once, less plain's task on the same client. Run in its own process: importing the
# users gevent-patches it.
HOOKS = """
import time
from types import SimpleNamespace as NS
from swarmscope.workers.http_users import FloodUser, WindowLoad
from swarmscope.workers.http_stats import StepRecorder

N = 200_000
ok = NS(status_code=200, error=None)
client = NS(get=lambda path, name=None: ok)

def plain_task():  # plain Locust's task around its request
    client.get("/")

best = []
for _ in range(5):
    load = WindowLoad(StepRecorder(30.0, time.time(), n_steps=1), "http://x/", "/", "closed")
    user = object.__new__(FloodUser)  # no Locust environment: only what get() reads
    user.environment = NS(swarmscope=NS(worker=NS(active=load)))
    user.client, user.load_seen, user.slot, user.next_t, user.rate_seen = client, None, -1, None, 0.0
    c0 = time.process_time()
    for _ in range(N):
        user.get()
    load.stop()
    c1 = time.process_time()
    for _ in range(N):
        plain_task()
    c2 = time.process_time()
    assert load.recorded() == N, load.recorded()
    best.append(((c1 - c0) - (c2 - c1)) / N * 1e6)
print(min(best))
"""

PLAIN_K6 = """
import http from 'k6/http';
export const options = { discardResponseBodies: true };
export default function () { http.get(__ENV.TARGET); }
"""


class CpuSampler:
    """CPU seconds (user + system) of a generator's processes and of nginx, every 0.1 s."""

    def __init__(
        self,
        root: int,
        nginx: Callable[[], list[int]],
        generator_names: tuple[str, ...],
        root_gen: bool = True,
    ):
        self.root, self.nginx, self.names, self.root_gen = root, nginx, generator_names, root_gen
        self.samples: list[tuple[float, float, float, float]] = []  # (t, generator, others, nginx)
        self._seen: dict[int, tuple[float, str]] = {}  # pid -> last cpu, kind (dead ones keep it)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _cpu(self, pid: int) -> float | None:
        try:
            c = psutil.Process(pid).cpu_times()
            return c.user + c.system
        except psutil.Error:
            return None

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                root = psutil.Process(self.root)
                kids = root.children(recursive=True)
            except psutil.Error:
                return
            for p in [root, *kids]:
                try:
                    mine = p.pid == self.root and self.root_gen
                    kind = "gen" if mine or p.name() in self.names else "other"
                except psutil.Error:
                    continue
                cpu = self._cpu(p.pid)
                if cpu is not None:
                    self._seen[p.pid] = (cpu, kind)
            gen = sum(c for c, k in self._seen.values() if k == "gen")
            other = sum(c for c, k in self._seen.values() if k == "other")
            ngx = sum(c for c in map(self._cpu, self.nginx()) if c is not None)
            self.samples.append((time.time(), gen, other, ngx))

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=2)

    def between(self, t0: float, t1: float) -> tuple[float, float, float]:
        """CPU seconds used in [t0, t1] (linear between samples): generator, others, nginx."""
        ts = [s[0] for s in self.samples]

        def at(t: float, k: int) -> float:
            i = bisect.bisect_left(ts, t)
            if i == 0 or i >= len(ts):
                return math.nan
            (ta, *a), (tb, *b) = self.samples[i - 1], self.samples[i]
            return a[k] + (b[k] - a[k]) * (t - ta) / (tb - ta)

        return tuple(at(t1, k) - at(t0, k) for k in range(3))  # type: ignore[return-value]


class Target:
    """The local ingress, with its access log read by byte offset: each run its own lines."""

    def __init__(self, t: LocalIngress):
        self.t = t
        self.log = t.dir / "access.log"
        self._off = 0

    def mark(self) -> None:
        self._off = self.log.stat().st_size

    def times(self) -> list[float]:
        """``$msec`` of every line since ``mark`` (the log format starts with it)."""
        with open(self.log, "rb") as fh:
            fh.seek(self._off)
            return sorted(float(line.split(b" ", 1)[0]) for line in fh if line.strip())

    def nginx_pids(self) -> list[int]:
        return [*self.t.lb_pids(), *self.t.backend_pids()]


def run_tool(
    cmd: list[str],
    target: Target,
    gen_names: tuple[str, ...],
    cwd: Path,
    timeout: float,
    root_gen: bool = True,
    env: dict[str, str] | None = None,
) -> tuple[list[float], CpuSampler, subprocess.CompletedProcess[str]]:
    """Run one tool; ``gen_names`` are its child processes that generate load, ``root_gen``
    whether the process started generates too (swarmscope's k6 path: only k6 does)."""
    target.mark()
    # A stop that lands inside Popen (after the fork, before it returns) would leave the started
    # tool with no handle to stop it by: the stop waits until ``p`` exists, then raises here.
    _STOP["defer"] = True
    try:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sampler = CpuSampler(p.pid, target.nginx_pids, gen_names, root_gen)
    except BaseException:
        _STOP["defer"] = False
        raise
    try:
        _STOP["defer"] = False  # inside the try: a stop from here on stops ``p`` below
        if _STOP["pending"]:
            raise KeyboardInterrupt
        out, err = p.communicate(timeout=timeout)
    except BaseException:  # stopped (a signal, a timeout): let the tool tear down its own first
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        raise
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()  # reaped here: gone before the target's teardown and the bench's exit
        sampler.stop()
    time.sleep(0.5)  # nginx writes a line after its response: let the last ones land
    return target.times(), sampler, subprocess.CompletedProcess(cmd, p.returncode, out, err)


def _duration(args: argparse.Namespace) -> float:
    """How long every tool runs: warm-up + window + tail, and the time a starved machine takes
    to get the load going (10 log lines), the same for every path."""
    return args.warmup + args.window + args.tail + args.start_allowance


def measure(
    name: str, lines: list[float], sampler: CpuSampler, own: int | None, args: argparse.Namespace
) -> dict[str, Any] | None:
    """The path's steady rate from the log, its CPU in that window, its own count beside the log."""
    if len(lines) < LOAD_STARTS_AT_LINE:
        raise SystemExit(f"{name}: only {len(lines)} log lines; did the tool run?")
    t0 = lines[LOAD_STARTS_AT_LINE - 1] + args.warmup
    t1 = t0 + args.window
    if lines[-1] < t1:  # a start slower than the tail (a starved machine): not this round
        print(f"{name}: load ended {t1 - lines[-1]:.2f} s before the window's end; round dropped "
              "(longer --tail)", file=sys.stderr)  # fmt: skip
        return None
    n = bisect.bisect_left(lines, t1) - bisect.bisect_left(lines, t0)
    gen, other, ngx = sampler.between(t0, t1)
    rate = n / args.window
    return {
        "rps": rate,
        "gen_cores": gen / args.window,
        "other_cores": other / args.window,
        "nginx_cores": ngx / args.window,
        "rps_per_gen_core": rate / (gen / args.window) if gen > 0 else math.nan,
        # CPU-ms per 1,000 requests (= CPU-µs per request): what a request costs the generator,
        # whatever share of the shared cores it got; "all" adds the path's other processes.
        "gen_ms_per_1k": 1e6 * gen / n if n else math.nan,
        "all_ms_per_1k": 1e6 * (gen + other) / n if n else math.nan,
        "load_avg": os.getloadavg()[0],
        "rps_per_nginx_core": rate / (ngx / args.window) if ngx > 0 else math.nan,
        "log_lines": len(lines),
        "own_count": own,
    }


def swarmscope_path(
    target: Target, engine: str, args: argparse.Namespace, tmp: Path
) -> dict[str, Any] | None:
    out = tmp / f"ss-{engine}"
    dur = _duration(args)
    cmd = [sys.executable, "-m", "swarmscope", "run", str(ROOT / "scenarios" / "ingress_flood.yaml"),
           "--out", str(out), "--set", f"host={target.t.url}", "--set", f"steps={args.users}",
           "--set", f"step_duration={dur}", "--set", f"engine={engine}"]  # fmt: skip
    # The generator: the swarmscope process itself (Locust users run in it), or k6 alone; the
    # rest (the k6 path's swarmscope process, the probe) is shown as "others".
    lines, sampler, p = run_tool(cmd, target, ("k6",), ROOT, dur + 600, root_gen=engine == "locust")
    if p.returncode != 0:
        raise SystemExit(f"swarmscope run ({engine}) failed: {p.stderr[-2000:]}")
    run_dir = max((d for d in out.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
    rep = json.loads((run_dir / "report.json").read_text())
    r = measure(f"swarmscope-{engine}", lines, sampler, int(rep["ingress"]["target_requests"]), args)
    if r is not None:
        r["own_rps"] = float(rep["steps"][0]["rps"])  # the step's own figure (over the whole step)
    return r


def plain_locust(target: Target, args: argparse.Namespace, tmp: Path) -> dict[str, Any] | None:
    f = tmp / "plain_locustfile.py"
    f.write_text(PLAIN_LOCUSTFILE)
    dur = math.ceil(_duration(args))
    cmd = [str(Path(sys.executable).parent / "locust"), "-f", str(f), "--headless", "-u", str(args.users),
           "-r", "10000", "-t", f"{dur}s", "--host", target.t.url.rstrip("/"),
           "--csv", str(tmp / "plain"), "--only-summary", "--stop-timeout", "10"]  # fmt: skip
    lines, sampler, p = run_tool(cmd, target, (), tmp, dur + 60)
    with open(tmp / "plain_stats.csv", encoding="utf-8") as fh:
        agg = {r["Name"]: r for r in csv.DictReader(fh)}["Aggregated"]
    # Locust's own count: its final console summary. Its --csv file is written before the users
    # stopped at -t finish the requests they have in flight, so it misses those (the log has them).
    m = re.search(r"Aggregated\s+(\d+)\s", p.stdout + p.stderr)
    r = measure("locust-plain", lines, sampler, int(m.group(1)) if m else None, args)
    if r is not None:
        r["csv_count"] = int(agg["Request Count"])
    return r


def plain_k6(
    target: Target, args: argparse.Namespace, tmp: Path, csv: bool = False, tags: bool = False
) -> dict[str, Any] | None:
    s = tmp / "plain.js"
    s.write_text(PLAIN_K6)
    summ = tmp / "plain-k6-summary.json"
    dur = math.ceil(_duration(args))
    # csv=True: plain k6 writing the same per-request CSV as swarmscope's k6 path (same tags,
    # same µs stamps): the part of the k6 path's cost that is the per-request samples it needs.
    # tags=True: only the k6 path's system tags, no output.
    out = ["--system-tags", "scenario,status,error_code"] if csv or tags else []
    out += ["--out", f"csv={tmp / 'plain-k6.csv'}"] if csv else []
    k6 = k6_binary(swarmscope=False)  # upstream k6, unmodified
    cmd = [k6, "run", "--quiet", "--no-usage-report", "--vus", str(args.users), "--duration",
           f"{dur}s", "-e", f"TARGET={target.t.url}", "--summary-export", str(summ), *out,
           str(s)]  # fmt: skip
    env = {**os.environ, "K6_CSV_TIME_FORMAT": "unix_micro"} if csv else None
    lines, sampler, p = run_tool(cmd, target, ("k6",), tmp, dur + 60, env=env)
    (tmp / "plain-k6.csv").unlink(missing_ok=True)
    if p.returncode != 0:
        raise SystemExit(f"k6 failed: {p.stderr[-2000:]}")
    own = int(json.loads(summ.read_text())["metrics"]["http_reqs"]["count"])
    return measure("k6-plain", lines, sampler, own, args)


def wrk(target: Target, args: argparse.Namespace, tmp: Path) -> dict[str, Any] | None:
    dur = math.ceil(_duration(args))
    cmd = ["wrk", "-t2", f"-c{args.users}", f"-d{dur}s", target.t.url]
    lines, sampler, p = run_tool(cmd, target, ("wrk",), tmp, dur + 60)
    m = re.search(r"(\d+) requests in", p.stdout)
    return measure("wrk", lines, sampler, int(m.group(1)) if m else None, args)


PATHS = (
    "locust_plain",
    "locust_swarmscope",
    "k6_plain",
    "k6_swarmscope",
    "k6_plain_tags",
    "k6_plain_csv",
    "wrk",
)
GROUPS = {
    "all": PATHS,
    "locust": ("locust_plain", "locust_swarmscope"),
    "k6": ("k6_plain", "k6_swarmscope", "k6_plain_tags", "k6_plain_csv"),
}


# A stop signal's state: ``defer`` while a tool is being started (the stop is then ``pending``
# and raised once the tool can be stopped, in run_tool).
_STOP: dict[str, bool] = {"defer": False, "pending": False}


def _stop_on_signals() -> None:
    """SIGTERM/SIGINT raise KeyboardInterrupt in the main thread, wherever it waits, so every
    ``finally`` and ``with`` runs (the tool is stopped, the target's namespace deleted); a later
    signal is ignored, so that teardown finishes."""

    def handler(sig: int, _frame: Any) -> None:
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        print(f"http_flood: {signal.Signals(sig).name}: stopping, removing the target", file=sys.stderr)
        _STOP["pending"] = True
        if not _STOP["defer"]:
            raise KeyboardInterrupt

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, handler)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds dropped after the load starts")
    ap.add_argument("--window", type=float, default=4.0, help="the steady window counted (seconds)")
    ap.add_argument("--tail", type=float, default=3.0, help="load held after the window (seconds)")
    ap.add_argument("--start-allowance", type=float, default=5.0,
                    help="seconds every tool runs longer (a start slowed by the machine's load)")  # fmt: skip
    ap.add_argument("--repeat", type=int, default=3, help="rounds, interleaved; medians are reported")
    ap.add_argument("--paths", choices=sorted(GROUPS), default="all",
                    help="the rows run: all, or one engine's (k6: with its CSV reference)")  # fmt: skip
    ap.add_argument("--out", default="results/bench_http.json")
    args = ap.parse_args()
    paths = GROUPS[args.paths]
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in paths}
    _stop_on_signals()
    try:
        _rounds(args, paths, runs)
    except KeyboardInterrupt:
        print("http_flood: stopped; the target is removed", file=sys.stderr)
        return 130
    if not all(runs.values()):
        raise SystemExit(f"no valid round for {[k for k, v in runs.items() if not v]}: longer --tail")
    med = {k: {f: median([r.get(f) for r in v]) for f in v[0]} for k, v in runs.items()}
    ratios = {eng: ratios_of(eng, med, runs) for eng in ("locust", "k6") if f"{eng}_plain" in med}
    workers: dict[str, Any] = {}
    if "wrk" in med:
        # One saturated nginx: its requests per nginx core (from the wrk run, where it is
        # busiest), against one Locust worker (one process, one core at most: plain
        # FastHttpUser's ceiling).
        locust_core = med["locust_plain"]["rps_per_gen_core"]
        workers = {
            "nginx_rps_per_core": med["wrk"]["rps_per_nginx_core"],
            "locust_worker_rps": locust_core,
            "workers_per_nginx_core": med["wrk"]["rps_per_nginx_core"] / locust_core,
            "workers_for_this_nginx": math.ceil(med["wrk"]["rps"] / locust_core),
        }
    if "locust" in ratios:
        ratios["locust"]["hooks_us"] = hooks_us()
    out = {"args": vars(args), "when": time.time(), "median": med, "ratios": ratios,
           "distributed": workers, "runs": runs}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(report(med, ratios, workers, args))
    return 0


def _rounds(args: argparse.Namespace, paths: tuple[str, ...], runs: dict[str, list[dict[str, Any]]]) -> None:
    """Run ``paths`` in interleaved rounds against one target (removed however this ends)."""
    with LocalIngress(lb_workers=2) as t, tempfile.TemporaryDirectory() as d:
        print(f"http_flood: target {t.url} in netns {t.netns}", file=sys.stderr, flush=True)
        tmp, target = Path(d), Target(t)
        fns: dict[str, Callable[[], dict[str, Any] | None]] = {
            "locust_plain": lambda: plain_locust(target, args, tmp),
            "locust_swarmscope": lambda: swarmscope_path(target, "locust", args, tmp),
            "k6_plain": lambda: plain_k6(target, args, tmp),
            "k6_swarmscope": lambda: swarmscope_path(target, "k6", args, tmp),
            "k6_plain_tags": lambda: plain_k6(target, args, tmp, tags=True),
            "k6_plain_csv": lambda: plain_k6(target, args, tmp, csv=True),
            "wrk": lambda: wrk(target, args, tmp),
        }
        # Interleaved rounds: the machine is shared, so each pair sees similar background load.
        # Every other round runs the paths in reverse order (ABBA): a load that rises or falls
        # during the bench would otherwise always hit the path that runs second.
        for i in range(args.repeat):
            for name in paths if i % 2 == 0 else paths[::-1]:
                got = fns[name]()
                if got is not None:
                    runs[name].append({**got, "round": i})
                    print(f"round {i + 1} {name:<18} {got['rps']:9.0f} req/s", file=sys.stderr)


def hooks_us() -> float:
    """CPU-µs swarmscope's Locust path adds to a request (best of 5 × 200,000)."""
    p = subprocess.run([sys.executable, "-c", HOOKS], cwd=ROOT, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"the hooks' measurement failed: {p.stderr[-2000:]}")
    return float(p.stdout.split()[-1])


if __name__ == "__main__":
    sys.exit(main())
