"""Run the real k6 binary on scenarios/ingress_flood.js and fold its samples into a StepRecorder.

    res = run_k6(url, steps=[50, 100], step_duration_s=10, model="closed", out_dir=run_dir)
    res = run_k6(url, [50], 30, iterations=[1000])   # boom's -n: exactly 1000 requests, 30 s at most
    res.recorder.summary()      # same per-step rows as the Locust path
    res.summary_export          # k6's own --summary-export JSON (cross-check)

Per-step exact percentiles come from k6's raw per-sample output: every ``http_req_duration``
sample, tagged with its step (the script runs one k6 scenario per step), goes into the step's
HdrHistogram. The output is CSV (``--out csv=``, µs timestamps), not JSON: k6 writes ≈ 10
samples per request, and encoding them as JSON cost k6 about a quarter of its request rate
(bench/http_flood.py); CSV with only the tags the fold reads costs little. The file is deleted
afterwards unless ``keep_points``.

Caveats: k6 measures from the actual send; in the open model (constant-arrival-rate) it starts
iterations on schedule while VUs are free and counts the rest as ``dropped_iterations`` (reported
here), so give it enough ``max_vus``. The binary comes from tools/build_k6.sh (cached by version).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from swarmscope.errors import LoadGenError, SetupError
from swarmscope.sys import owners
from swarmscope.workers.http_stats import StepRecorder

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scenarios" / "ingress_flood.js"
K6_VERSION = "v1.8.1"


def k6_binary(build: bool = True) -> str:
    """Path of the cached k6; builds it with tools/build_k6.sh when missing and ``build``."""
    cached = (
        Path(os.environ.get("SWARMSCOPE_CACHE", "/var/cache/swarmscope"))
        / "tools"
        / f"k6-{K6_VERSION}"
        / "k6"
    )
    if cached.is_file() and os.access(cached, os.X_OK):
        return str(cached)
    if not build:
        raise SetupError(f"k6 not built: run tools/build_k6.sh (expects {cached})")
    try:
        out = subprocess.run(
            [str(ROOT / "tools" / "build_k6.sh")], check=True, capture_output=True, text=True
        )
    except subprocess.CalledProcessError as e:
        raise SetupError(f"building k6 failed: {e.stderr.strip()[-2000:]}") from e
    return out.stdout.strip().splitlines()[-1]


@dataclass
class K6Result:
    recorder: StepRecorder
    summary_export: dict[str, Any] = field(default_factory=dict)
    dropped_iterations: int = 0
    wall_s: float = 0.0
    exit_code: int = 0


def fold_points(path: Path, rec: StepRecorder) -> int:
    """Add every http_req_duration sample of a k6 CSV output file to ``rec``; returns dropped its.

    The CSV (µs timestamps, ``K6_CSV_TIME_FORMAT=unix_micro``) carries only the tags asked for
    with ``--system-tags``; a sample's time is its end, its value the duration in ms."""
    dropped = 0
    with open(path, encoding="utf-8", newline="") as fh:
        rows = csv.reader(fh)
        col = {name: i for i, name in enumerate(next(rows, []))}
        name_i, t_i, v_i = col["metric_name"], col["timestamp"], col["metric_value"]
        sc_i, st_i, err_i = col["scenario"], col["status"], col["error_code"]
        for row in rows:
            name = row[name_i]
            if name == "http_req_duration":
                sc = row[sc_i]
                step = int(sc[4:]) if sc.startswith("step") and sc[4:].isdigit() else 0
                done = int(row[t_i]) / 1e6
                status = int(row[st_i] or 0) or None
                err = row[err_i] or None
                rec.record(
                    done - float(row[v_i]) / 1000.0, done, status, err and f"k6 error {err}", step=step
                )
            elif name == "dropped_iterations":
                dropped += round(float(row[v_i]))
    return dropped


def run_k6(
    url: str,
    steps: list[float],
    step_duration_s: float,
    model: str = "closed",
    out_dir: Path | None = None,
    max_vus: int = 1000,
    keep_points: bool = False,
    keep_timeline: bool = False,
    script: Path = SCRIPT,
    iterations: list[int] | None = None,
) -> K6Result:
    """Run k6 over ``steps``; with ``iterations`` (boom's -n, closed model) each step sends exactly
    that many requests (k6's shared-iterations executor), ``step_duration_s`` being its limit."""
    k6 = k6_binary()
    out_dir = Path(out_dir or ".")
    out_dir.mkdir(parents=True, exist_ok=True)
    points, summary = out_dir / "k6-points.csv", out_dir / "k6-summary.json"
    env = {
        **os.environ,
        "K6_NO_USAGE_REPORT": "true",
        "K6_CSV_TIME_FORMAT": "unix_micro",  # the default (whole seconds) cannot place a request
    }
    cmd = [
        k6, "run", "--quiet", "--no-usage-report", "--no-color",
        "-e", f"TARGET={url}", "-e", f"MODEL={model}",
        "-e", "STEPS=" + ",".join(str(int(s)) for s in steps),
        "-e", f"STEP_DURATION={step_duration_s:g}", "-e", f"MAX_VUS={max_vus}",
        # Only the tags the fold needs: shorter lines, less of k6's time spent writing them.
        *(("-e", "ITERATIONS=" + ",".join(str(int(n)) for n in iterations)) if iterations else ()),
        "--system-tags", "scenario,status,error_code",
        "--summary-export", str(summary), "--out", f"csv={points}", str(script),
    ]  # fmt: skip
    t0 = time.time()
    rec = StepRecorder(step_duration_s, t0, keep_timeline=keep_timeline, n_steps=len(steps))
    # k6 logs a warning per failed request (thousands during an outage): to a file, never to a
    # pipe nobody reads while it runs (a full pipe blocks k6).
    logf = open(out_dir / "k6.log", "w+", encoding="utf-8")
    proc = subprocess.Popen(
        cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, text=True, preexec_fn=owners.die_with_parent
    )
    # Generator honesty: k6's own CPU, attributed to steps by wall time.
    ps = psutil.Process(proc.pid)
    last = 0.0
    while proc.poll() is None:
        time.sleep(0.25)
        try:
            c = ps.cpu_times()
            now = c.user + c.system + c.children_user + c.children_system
        except psutil.NoSuchProcess:
            break
        st = rec.step_of(time.time())
        rec.cpu_s[st] = rec.cpu_s.get(st, 0.0) + (now - last)
        last = now
    proc.wait()
    wall = time.time() - t0
    logf.seek(0)
    tail = logf.read()[-2000:]
    logf.close()
    if proc.returncode not in (0, 99):  # 99: thresholds failed, still a valid run
        raise LoadGenError(f"k6 exited {proc.returncode}: {tail.strip()}")
    if not points.exists():
        raise LoadGenError("k6 wrote no CSV output")
    dropped = fold_points(points, rec)
    if not keep_points:
        points.unlink()
    summ = json.loads(summary.read_text()) if summary.exists() else {}
    return K6Result(rec, summ, dropped, wall, proc.returncode)
