"""Run k6 on scenarios/ingress_flood.js and fold its samples into a StepRecorder.

    res = run_k6(url, steps=[50, 100], step_duration_s=10, model="closed", out_dir=run_dir)
    res = run_k6(url, [50], 30, iterations=[1000])   # boom's -n: exactly 1000 requests, 30 s at most
    res.recorder.summary()      # same per-step rows as the Locust path
    res.summary_export          # k6's own --summary-export JSON (cross-check)

Per-step exact percentiles come from k6's raw per-sample output: every ``http_req_duration``
sample, tagged with its step (the script runs one k6 scenario per step), goes into the step's
HdrHistogram. The samples come from swarmscope's own k6 output (``--out swarmscope=``,
workers/k6out, compiled into k6 by ``tools/build_k6.sh --swarmscope``): one short line per
request (end in µs, duration in ns, scenario, status, error code) and one per
``dropped_iterations`` sample. k6's CSV output wrote all ~13 samples of each request (it cannot
write one metric, grafana/k6#1321), which cost k6 about a fifth of its CPU per request
(bench/http_flood.py prints both). The file is deleted afterwards unless ``keep_points``.

Caveats: k6 measures from the actual send; in the open model (constant-arrival-rate) it starts
iterations on schedule while VUs are free and counts the rest as ``dropped_iterations`` (reported
here), so give it enough ``max_vus``. The binary is upstream k6 v1.8.1 plus that output, cached
by version and the output's source hash; ``k6_binary(swarmscope=False)`` is unmodified k6.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from swarmscope.core.errors import LoadGenError, SetupError
from swarmscope.core.paths import SCENARIOS, TOOLS
from swarmscope.core.sys import owners
from swarmscope.core.sys.gobuild import build_script, tool_binary
from swarmscope.workers.http_stats import StepRecorder

SCRIPT = SCENARIOS / "ingress_flood.js"
K6_VERSION = "v1.8.1"


def k6_binary(build: bool = True, swarmscope: bool = True) -> str:
    """Path of the cached k6 (with swarmscope's output unless ``swarmscope=False``: upstream k6);
    builds it with tools/build_k6.sh (or ``$SWARMSCOPE_BUILD_K6``) when missing and ``build``,
    with a progress line. Called at set-up, before any window (the kind's ``prepare``)."""
    script = [build_script("k6", TOOLS / "build_k6.sh"), *(["--swarmscope"] if swarmscope else [])]
    env = {**os.environ, "K6_VERSION": K6_VERSION}
    try:
        cached = subprocess.run([*script, "--path"], check=True, capture_output=True, text=True, env=env)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SetupError(f"cannot locate k6 with {script[0]}: {getattr(e, 'stderr', '') or e}") from e
    path = Path(cached.stdout.strip())
    if not build and not (path.is_file() and os.access(path, os.X_OK)):
        raise SetupError(f"k6 not built: run {' '.join(script)} (expects {path})")
    what = f"k6 {K6_VERSION}" + (" with swarmscope's output" if swarmscope else "")
    return tool_binary(what, path, script, "4.5 min on 2 cores", env=env)


@dataclass
class K6Result:
    recorder: StepRecorder
    summary_export: dict[str, Any] = field(default_factory=dict)
    dropped_iterations: int = 0
    wall_s: float = 0.0
    exit_code: int = 0


POINTS_HEADER = "# swarmscope-k6out 1 kind,time_us,value,scenario,status,error_code"


def fold_points(path: Path, rec: StepRecorder) -> int:
    """Add every http_req_duration sample of a swarmscope k6 output file to ``rec``; returns the
    dropped iterations. A request line is ``r,<end µs>,<duration ns>,<scenario>,<status>,<error>``
    (workers/k6out/output.go); its start is its end minus its duration."""
    dropped = 0
    with open(path, encoding="utf-8") as fh:
        head = fh.readline().rstrip("\n")
        if head != POINTS_HEADER:
            raise LoadGenError(f"{path}: not swarmscope's k6 output (first line {head[:80]!r})")
        for line in fh:
            kind, t, v, sc, st, err = line.rstrip("\n").split(",")
            step = int(sc[4:]) if sc.startswith("step") and sc[4:].isdigit() else 0
            if kind == "r":
                done = int(t) / 1e6
                error = f"k6 error {err}" if err else None
                rec.record(done - int(v) / 1e9, done, int(st or 0) or None, error, step=step)
            elif kind == "d":
                dropped += int(v)
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
    k6: str = "",
) -> K6Result:
    """Run k6 over ``steps``; with ``iterations`` (boom's -n, closed model) each step sends exactly
    that many requests (k6's shared-iterations executor), ``step_duration_s`` being its limit."""
    k6 = k6 or k6_binary()  # the driver passes the one it found or built at set-up
    out_dir = Path(out_dir or ".")
    out_dir.mkdir(parents=True, exist_ok=True)
    points, summary = out_dir / "k6-points.txt", out_dir / "k6-summary.json"
    env = {**os.environ, "K6_NO_USAGE_REPORT": "true"}
    cmd = [
        k6, "run", "--quiet", "--no-usage-report", "--no-color",
        "-e", f"TARGET={url}", "-e", f"MODEL={model}",
        "-e", "STEPS=" + ",".join(str(int(s)) for s in steps),
        "-e", f"STEP_DURATION={step_duration_s:g}", "-e", f"MAX_VUS={max_vus}",
        *(("-e", "ITERATIONS=" + ",".join(str(int(n)) for n in iterations)) if iterations else ()),
        # Only the tags the fold needs: smaller tag sets for k6 to build and intern per request.
        "--system-tags", "scenario,status,error_code",
        "--summary-export", str(summary), "--out", f"swarmscope={points}", str(script),
    ]  # fmt: skip
    t0 = time.time()
    rec = StepRecorder(step_duration_s, t0, keep_timeline=keep_timeline, n_steps=len(steps))
    # k6 logs a warning per failed request (thousands during an outage): to a file, never to a
    # pipe nobody reads while it runs (a full pipe blocks k6).
    logf = open(out_dir / "k6.log", "w+", encoding="utf-8")
    proc = subprocess.Popen(
        owners.dying_with_us(cmd, env), env=env, stdout=logf, stderr=subprocess.STDOUT, text=True
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
        raise LoadGenError(f"k6 wrote no samples ({points})")
    dropped = fold_points(points, rec)
    if not keep_points:
        points.unlink()
    summ = json.loads(summary.read_text()) if summary.exists() else {}
    return K6Result(rec, summ, dropped, wall, proc.returncode)
