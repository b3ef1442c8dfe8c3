"""Ingress flood: real nginx in our own netns, real Locust and k6, real faults.

Runs go through ``swarmscope run`` (embedded and distributed) and ``locust -f`` as
subprocesses, because Locust monkey-patches the process with gevent, which must not leak into
the rest of the suite.
"""

from __future__ import annotations

import http.server
import json
import pathlib
import random
import re
import subprocess
import sys
import threading
import time

import prebuilt
import pytest
from hdrh.histogram import HdrHistogram
from helpers import free_port, load_report, only_run_dir, run_cli

from swarmscope.core.config import Config
from swarmscope.core.errors import ConfigError
from swarmscope.kinds.ingress_flood import KIND
from swarmscope.kinds.ingress_flood.config import preflight
from swarmscope.probes.procstat import ProcSampler
from swarmscope.targets.faults import API_TIMEOUT_S, make_fault, names
from swarmscope.workers.http_stats import PERCENTILES, StepRecorder, downtime, new_histogram, pct_key

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "ingress_flood.yaml"
needs_root = pytest.mark.root  # conftest skips it with "not root" (CI is root)


# The iperf3 network baseline (2 s and its set-up before the first step) only where a test
# asks for it (test_network_baseline_iperf3_beside_the_http_figures): the rest never read it.
NO_BASELINE = "network_baseline_s=0"


def flood(tmp: pathlib.Path, *sets: str, expect_rc: int = 0) -> dict:
    """``swarmscope run scenarios/ingress_flood.yaml --set ...`` (no network baseline unless
    ``sets`` ask: the last --set wins); its report (run_dir added)."""
    out = tmp / "results"
    sets = (NO_BASELINE, *sets)
    p = run_cli(
        "run", str(SCENARIO), "--out", str(out), *(a for s in sets for a in ("--set", s)), timeout=180
    )
    assert p.returncode == expect_rc, p.stderr[-3000:]
    if expect_rc:
        return {"stderr": p.stderr}
    run_dir = only_run_dir(out)
    return {**load_report(run_dir), "run_dir": run_dir}


def locust_f(tmp: pathlib.Path, *opts: str, workers: int = 0) -> dict:
    """``locust -f scenarios/ingress_flood.py --headless``, alone or as a master with
    ``workers`` worker processes, no network baseline; its report (with run_dir)."""
    locust = str(pathlib.Path(sys.executable).parent / "locust")
    common = [locust, "-f", str(ROOT / "scenarios" / "ingress_flood.py")]
    out = tmp / "results"
    port = str(free_port())
    dist = ["--master", "--expect-workers", str(workers), "--master-bind-host", "127.0.0.1",
            "--master-bind-port", port] if workers else []  # fmt: skip
    main = subprocess.Popen(
        [*common, "--headless", *dist, "--ss-out", str(out), "--only-summary", "--stop-timeout", "5",
         "--ss-network-baseline-s", "0", *opts],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    procs = [
        subprocess.Popen(
            [*common, "--worker", "--master-host", "127.0.0.1", "--master-port", port],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    try:
        _, err = main.communicate(timeout=120)
        for w in procs:
            w.wait(timeout=30)
    finally:
        for p in (main, *procs):
            if p.poll() is None:
                p.kill()
    assert main.returncode == 0, err[-3000:]
    run_dir = only_run_dir(out)
    return {**load_report(run_dir), "run_dir": run_dir, "stderr": err}


def windows(rep: dict) -> list[dict]:
    """Each window's reconciled data (extra), in step order."""
    return [p["iterations"][0]["extra"] for p in rep["points"]]


def assert_exact_per_step(rep: dict, killed_at_users: int = 0) -> None:
    """Every window: client successes == the access-log lines nginx wrote in it.

    ``killed_at_users``: the window where the LB was SIGKILLed may lack the lines of requests
    answered just before the kill (nginx logs after replying), at most one per user in flight;
    the report names that count, and every other window stays exact."""
    for w, p in zip(windows(rep), rep["points"], strict=True):
        flags = p["iterations"][0]["flags"]
        assert w["successes"] > 0
        assert sum(n["generated"] for n in p["iterations"][0]["per_node"]) == w["successes"]
        assert not [f for f in flags if f.startswith("server-mismatch")]
        cut = w["server_log_cut_by_kill"]
        if w["faults_struck"] and killed_at_users:  # its record may go with a later window
            assert 0 <= cut <= killed_at_users, w
            named = f"server-log-cut-by-kill:{cut} answered requests unlogged (SIGKILL after the reply)"
            assert [f for f in flags if f.startswith("server-log-cut-by-kill")] == ([named] if cut else [])
        else:
            assert cut == 0, w
        assert w["server_requests"] + cut == w["successes"], w


def assert_merged_equals_one_histogram(steps: list[dict], recorders: list[dict]) -> None:
    """Merged per-step percentiles == those of one HdrHistogram of every worker's samples."""
    for row in steps:
        key = str(row["step"]) if any(len(b["steps"]) > 1 for b in recorders) else "0"
        single = new_histogram()
        for blob in recorders:
            if key in blob["steps"]:
                single.add(HdrHistogram.decode(blob["steps"][key]["hist"]))
        assert single.get_total_count() == row["requests"]
        for p in PERCENTILES:
            assert row["latency_ms"][pct_key(p)] == single.get_value_at_percentile(p) / 1000.0
        assert row["latency_ms"]["max"] == single.get_max_value() / 1000.0


def share_above(step: dict, ms: float) -> float:
    h = step["histogram"]
    return sum(c for b, c in h if b > ms) / max(1, sum(c for _, c in h))


# -- pure units --------------------------------------------------------------------------------
def test_merged_histograms_equal_one_histogram_of_all_samples() -> None:
    rng = random.Random(7)
    t0 = 1000.0
    recs = [StepRecorder(10, t0) for _ in range(3)]
    single = new_histogram()
    for _ in range(30000):
        lat = rng.lognormvariate(-6, 1.2)  # seconds, ~2.5 ms median with a long tail
        r = rng.choice(recs)
        r.record(t0 + 1, t0 + 1 + lat, 200, None)
        single.record_value(max(1, round(lat * 1e6)))
    merged = StepRecorder.merge(json.loads(json.dumps(r.encode())) for r in recs)
    h = merged.steps[0].hist
    assert h.get_total_count() == single.get_total_count() == 30000
    for p in (*PERCENTILES, 99.99, 100.0):
        assert h.get_value_at_percentile(p) == single.get_value_at_percentile(p)
    row = merged.summary()[0]
    assert row["requests"] == 30000 and row["failures"] == 0
    assert row["latency_ms"][pct_key(50)] == single.get_value_at_percentile(50) / 1000


def test_failures_by_reason_and_steps() -> None:
    rec = StepRecorder(1.0, 0.0, n_steps=2)
    rec.record(0.1, 0.2, 200, None)
    rec.record(0.5, 0.6, 503, None)
    rec.record(1.5, 1.6, None, "ConnectionRefusedError")
    rec.record(2.5, 2.6, 200, None)  # after the last step: counted in it
    rows = rec.summary()
    assert [r["requests"] for r in rows] == [2, 2]
    assert rows[0]["failures_by_reason"] == {"HTTP 503": 1}
    assert rows[1]["failures_by_reason"] == {"ConnectionRefusedError": 1}


def test_downtime_from_timeline() -> None:
    tl = [(t / 100, True) for t in range(0, 300)]  # 100 ok/s until 3.0
    tl += [(3.0 + t / 100, False) for t in range(1, 150)]  # failing until 4.5
    tl += [(4.5 + t / 100, True) for t in range(0, 300)]
    d = downtime(tl, fault_t=2.995)
    # last success 2.99, first success after 4.5; its 1-s bin [4.5, 5.5) has all 100 again
    assert (d["last_success_before"], d["first_success_after"]) == (2.99, 4.5)
    assert d["downtime_s"] == pytest.approx(4.5 - 2.99)
    assert d["failed_requests"] == 149
    assert d["recovery_s"] == pytest.approx(4.5 - 2.995)


def test_fault_registry_and_kill_pod_with_fake_api() -> None:
    assert {"kill-lb-local", "kill-pod", "stall-backends-local"} <= set(names())
    calls: list[tuple] = []

    class Meta:
        name = "ingress-nginx-controller-abc"

    class Pod:
        metadata = Meta()

    class Api:
        def list_namespaced_pod(self, ns: str, label_selector: str, _request_timeout: float) -> object:
            calls.append(("list", ns, label_selector, _request_timeout))
            return type("L", (), {"items": [Pod()]})()

        def delete_namespaced_pod(
            self, name: str, ns: str, grace_period_seconds: int, _request_timeout: float
        ) -> None:
            calls.append(("delete", name, ns, grace_period_seconds, _request_timeout))

    inj = make_fault("kill-pod", at_s=0.0, namespace="ing", api=Api(), grace_period_s=30)
    inj.arm(time.time())
    deadline = time.monotonic() + 10
    while not inj.records and time.monotonic() < deadline:  # the fault's own thread records it
        time.sleep(0.01)
    inj.cancel()
    assert inj.records and inj.records[0]["detail"]["pod"] == "ingress-nginx-controller-abc"
    assert ("delete", "ingress-nginx-controller-abc", "ing", 30, API_TIMEOUT_S) in calls
    assert calls[0][-1] == API_TIMEOUT_S  # the listing is bounded too
    with pytest.raises(ConfigError, match="unknown fault"):
        make_fault("unplug-everything", at_s=1)


def test_procstat_sees_a_busy_process() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        s = ProcSampler(pids=[busy.pid], interval_s=0.5).start()
        time.sleep(1.8)
        samples = s.stop()
    finally:
        busy.kill()
        busy.wait()
    assert len(samples) >= 3
    assert max(x["cpu_pct"] for x in samples) > 40  # a spinning process (machine is shared)
    assert all(x["rss_kib"] > 1000 and x["name"].startswith("python") for x in samples)


# -- bad input is rejected before any load ------------------------------------------------------
def test_hosts_outside_loopback_need_allow_list() -> None:
    with pytest.raises(ConfigError, match="allow_hosts"):
        KIND.schema.load(env={}, sets=["host=http://192.0.2.10/"])
    cfg: Config = KIND.schema.load(env={}, sets=["host=http://192.0.2.10/", "allow_hosts=192.0.2.10"])
    assert cfg.host == "http://192.0.2.10/"
    with pytest.raises(ConfigError, match="http:// or https://"):
        KIND.schema.load(env={}, sets=["host=ftp://127.0.0.1/"])
    with pytest.raises(ConfigError, match="needs the local target"):
        KIND.schema.load(env={}, sets=["host=http://127.0.0.1/", "fault=kill-lb-local"])


def test_preflight_unreachable_and_tls_errors() -> None:
    with pytest.raises(ConfigError, match="unreachable"):
        preflight("http://127.0.0.1:1/", timeout=2)
    # A plain-HTTP server spoken to with https: a TLS error, reported as one.
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        with pytest.raises(ConfigError, match="TLS error"):
            preflight(f"https://127.0.0.1:{srv.server_address[1]}/", timeout=3)
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.slow
def test_cli_rejects_bad_host_before_load(tmp_path: pathlib.Path) -> None:
    r = flood(tmp_path, "host=http://203.0.113.5/", "steps=10", "step_duration=1", expect_rc=2)
    assert "allow_hosts" in r["stderr"]
    r = flood(tmp_path, "host=http://127.0.0.1:1/", "steps=10", "step_duration=1", expect_rc=2)
    assert "unreachable" in r["stderr"]


# -- real runs against the local nginx target ---------------------------------------------------
@pytest.mark.slow
@needs_root
def test_embedded_steps_exact_per_step_with_proxy_from_the_probe(tmp_path: pathlib.Path) -> None:
    r = flood(tmp_path, "steps=5,10", "step_duration=2", "lb_workers=2")
    steps = r["steps"]
    assert [s["users"] for s in steps] == [5, 10]
    assert_exact_per_step(r)
    assert r["ingress"]["server_requests"] == r["ingress"]["successes"] == r["ingress"]["requests"]
    assert r["ingress"]["exact"] is True and r["ingress"]["url"].startswith("http://10.201.")
    for s in steps:
        assert s["requests"] > 100 and s["failures"] == 0
        lat = s["latency_ms"]
        assert 0 < lat["p10"] <= lat["p50"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
        assert s["generator_cpu_pct"][0] > 0
        # From the probe's procstat on the LB's pids: master + 2 workers, sampled in the window.
        assert s["proxy"]["processes"] == 3 and s["proxy"]["ticks"] >= 1
        assert s["proxy"]["rss_kib_max"] > 0
        # pidstat's table per process: the master first, then its 2 workers (the LB's pids).
        procs = s["proxy_processes"]
        assert [p["role"] for p in procs] == ["master", "worker", "worker"]
        assert sum(p["RSS"] for p in procs) == s["proxy"]["rss_kib_max"]
        assert all(p["VSZ"] >= p["RSS"] > 0 and 0 < p["%MEM"] < 100 for p in procs)
        # pidstat's rows: each process each second, the step's row their mean (sizes: largest)
        per_s = s["proxy_per_second"]
        assert len(per_s) == 3 * s["proxy"]["ticks"]
        assert [p["role"] for p in per_s[:3]] == ["master", "worker", "worker"]
        for p in procs:
            mine = [r for r in per_s if r["pid"] == p["pid"]]
            assert p["%CPU"] == sum(r["%CPU"] for r in mine) / len(mine)
            assert p["RSS"] == max(r["RSS"] for r in mine)
    assert any(s["proxy"]["cpu_pct"] > 0 for s in steps)
    assert any(p["%CPU"] > 0 for s in steps for p in s["proxy_processes"] if p["role"] == "worker")
    page = (r["run_dir"] / "report.html").read_text()
    assert "<th>minflt/s</th>" in page and "Proxy processes per second" in page
    assert r["faults"] == []
    for f in ("latency_percentiles.png", "latency_histograms.png", "rps.png", "proxy_cpu_rss.png"):
        assert (r["run_dir"] / f).stat().st_size > 1000


@pytest.mark.slow
@needs_root
@pytest.mark.parametrize("workers", [1, 2])
def test_request_count_steps_send_exactly_n(tmp_path: pathlib.Path, workers: int) -> None:
    """boom's -n: a step of N requests sends exactly N, and nginx logs exactly N for it (an odd
    count over two workers: split 501/500)."""
    dist = ("mode=distributed", "workers=2", f"master_bind=127.0.0.1:{free_port()}") if workers == 2 else ()
    r = flood(tmp_path, "steps=5,20", "requests=300,1001", "step_duration=30", *dist)
    assert [s["request_count"] for s in r["steps"]] == [300, 1001]
    assert [s["requests"] for s in r["steps"]] == [300, 1001]
    assert [s["users"] for s in r["steps"]] == [5, 20]
    for w, s in zip(windows(r), r["steps"], strict=True):
        assert s["failures"] == 0 and w["server_requests"] == w["successes"] == s["request_count"]
        assert 0 < s["elapsed_s"] < 30 and s["rps"] == s["requests"] / s["elapsed_s"]
        # The generators' CPU over the time the count took, not over the 30-s limit: Locust
        # sending as fast as it can uses a good share of a core (2 cores, shared machine).
        assert len(s["generator_cpu_pct"]) == workers and max(s["generator_cpu_pct"]) > 20
    assert_exact_per_step(r)
    assert r["ingress"]["server_requests"] == 1301


@pytest.mark.slow
@needs_root
def test_backend_replicas_per_step_serve_round_robin(tmp_path: pathlib.Path) -> None:
    """backends=1,2,4: each step the LB proxies to that many replicas (each its own nginx), and
    the mean latency vs concurrency and replicas is tabled and plotted."""
    r = flood(tmp_path, "steps=4,4,8", "requests=400", "backends=1,2,4", "step_duration=30")
    assert [s["backends"] for s in r["steps"]] == [1, 2, 4]
    assert [s["requests"] for s in r["steps"]] == [400, 400, 400]
    assert all(s["latency_ms"]["mean"] > 0 for s in r["steps"])
    assert_exact_per_step(r)
    assert (r["run_dir"] / "mean_latency_backends.png").stat().st_size > 1000
    assert "mean_latency_backends.png" in (r["run_dir"] / "report.html").read_text()


def test_backends_only_for_the_local_target() -> None:
    with pytest.raises(ConfigError, match="local target"):
        KIND.schema.load(env={}, sets=["host=http://127.0.0.1:9/", "backends=2"])
    with pytest.raises(ConfigError, match="one per step"):
        KIND.schema.load(env={}, sets=["steps=1,2,3", "backends=1,2"])


@needs_root
def test_local_target_reloads_onto_n_replicas() -> None:
    """Which replicas serve, from their own answers: exactly the first n after use_backends(n)."""
    import urllib.request

    from swarmscope.targets.ingress.local import LocalIngress

    with LocalIngress(backends=4) as t:
        for n in (1, 4, 2):
            t.use_backends(n)
            assert len(t.lb_pids()) == 2  # master + the one new worker, the old one gone
            bodies = set()
            for _ in range(4 * n):
                with urllib.request.urlopen(t.url, timeout=5) as resp:
                    bodies.add(resp.read().decode().strip())
            assert bodies == {f"backend-{i}" for i in range(1, n + 1)}
        assert len(t.backend_pids()) == 8  # 4 replicas, a master and a worker each


def test_request_counts_are_checked_against_steps_model_and_engine() -> None:
    cfg = KIND.schema.load(env={}, sets=["steps=5,10", "requests=1000"])
    assert cfg.requests == [1000]
    assert [p.params for p in KIND.points(cfg)] == [
        {"users": 5, "request_count": 1000},
        {"users": 10, "request_count": 1000},
    ]
    with pytest.raises(ConfigError) as e:
        KIND.schema.load(env={}, sets=["steps=5,10,20", "requests=1,2", "model=open", "engine=k6"])
    assert "one per step (3)" in str(e.value) and "closed model" in str(e.value)


@needs_root
@pytest.mark.slow  # two workers and a master: ~20 s
def test_distributed_two_workers_exact_and_merged_equals_one_histogram(tmp_path: pathlib.Path) -> None:
    r = flood(
        tmp_path, "steps=5,10", "step_duration=2", "mode=distributed", "workers=2",
        f"master_bind=127.0.0.1:{free_port()}",
    )  # fmt: skip
    assert r["status"] == "ok"
    assert_exact_per_step(r)
    for row, w in zip(r["steps"], windows(r), strict=True):
        assert sorted(w["recorders"]) == ["w1-n1", "w2-n1"]  # two worker processes, one node each
        assert all(b["steps"]["0"]["requests"] > 0 for b in w["recorders"].values())
        assert len(row["generator_cpu_pct"]) == 2
        assert_merged_equals_one_histogram([row], list(w["recorders"].values()))


@needs_root
@pytest.mark.slow  # two runs, one with a stalled backend: ~20 s
def test_open_model_shows_a_stall_the_closed_model_hides(tmp_path: pathlib.Path) -> None:
    stall = ("fault=stall-backends-local", "fault_at=1.0", "stall_s=1.5", "step_duration=4")
    closed = flood(tmp_path / "c", "steps=10", *stall)
    opened = flood(tmp_path / "o", "model=open", "steps=200", "open_users=50", *stall)
    c, o = closed["steps"][0], opened["steps"][0]
    assert o["rate"] == 200
    assert o["latency_ms"]["max"] >= 1300 and c["latency_ms"]["max"] >= 1300  # both saw it once…
    # …but only the open model counts every request that should have been sent during the stall.
    assert share_above(o, 500) >= 0.10, o["latency_ms"]
    assert share_above(c, 500) < share_above(o, 500) / 5, (c["latency_ms"], o["latency_ms"])
    assert_exact_per_step(opened)
    assert_exact_per_step(closed)


@needs_root
@pytest.mark.slow  # two 4 s steps, the kill and the restart: ~20 s
@pytest.mark.parametrize("engine", ["locust", "k6"])
def test_kill_lb_downtime_matches_restart_delay(
    tmp_path: pathlib.Path, engine: str, request: pytest.FixtureRequest
) -> None:
    if engine == "k6":
        request.getfixturevalue("k6_bin")
    r = flood(
        tmp_path, f"engine={engine}", "steps=10,20", "step_duration=4", "fault=kill-lb-local",
        "fault_at=2", "restart_delay_s=1.0",
    )  # fmt: skip
    (f,) = r["faults"]  # struck on the target's worker, sent back with its results
    assert f["name"] == "kill-lb-local" and len(f["restarts"]) == 1
    # Client-observed outage: the restart delay, nginx's start and the clients reconnecting.
    assert 1.0 <= f["downtime_s"] <= 1.0 + 0.5, f
    assert f["failed_requests"] > 0 and f["first_success_after"] is not None
    assert f["recovery_s"] is not None and f["recovery_s"] >= f["downtime_s"] - 0.5
    # It struck in step 0's window, though its record (which waits for the recovery) may come
    # with step 1's: the unlogged replies are named in the window of the kill.
    assert [w["faults_struck"] for w in windows(r)] == [["kill-lb-local"], []]
    assert_exact_per_step(r, killed_at_users=10)  # fault_at=2 s: in step 0, 10 users
    assert r["ingress"]["exact"] is True
    assert (r["run_dir"] / "fault_0.png").exists()


@pytest.fixture(scope="session")
def k6_bin() -> str:
    from swarmscope.workers.k6 import k6_binary

    return prebuilt.found(lambda: k6_binary(build=False))


@pytest.mark.slow
@needs_root
def test_k6_path_runs_the_real_binary(tmp_path: pathlib.Path, k6_bin: str) -> None:
    assert pathlib.Path(k6_bin).is_file()
    r = flood(tmp_path, "engine=k6", "steps=5", "step_duration=2")
    (step,) = r["steps"]
    assert step["users"] == 5 and step["requests"] > 50 and step["failures"] == 0
    assert_exact_per_step(r)
    assert r["ingress"]["engine"] == "k6" and r["ingress"]["k6_dropped_iterations"] == 0
    assert step["generator_cpu_pct"][0] > 0 and step["proxy"]["processes"] == 3  # master + lb_workers (2)


FAKE_K6_BUILD = """#!/bin/sh
# Stands in for tools/build_k6.sh: takes BUILD_S seconds, then "builds" the real k6 (a copy:
# a cached tool that is a symlink is refused before it runs, docs/security.md).
[ "$2" = --path ] && { echo "$DIR/k6"; exit 0; }
sleep "$BUILD_S"; cp "$REAL_K6" "$DIR/k6"; echo "$DIR/k6"
"""


@pytest.mark.slow
@needs_root
@pytest.mark.timeout(1800)
def test_first_k6_run_builds_before_the_first_window(tmp_path: pathlib.Path, k6_bin: str) -> None:
    """No k6 cached: the build runs (progress lines) before the first window opens, so the
    window is as long as its step, not step + build (issue 28: a 329 s window for a 5 s step)."""
    script = tmp_path / "build_k6.sh"
    script.write_text(FAKE_K6_BUILD)
    script.chmod(0o755)
    env = {"SWARMSCOPE_BUILD_K6": str(script), "DIR": str(tmp_path), "REAL_K6": k6_bin, "BUILD_S": "4"}
    out = tmp_path / "results"
    p = run_cli("run", str(SCENARIO), "--out", str(out), "--set", "engine=k6", "--set", "steps=5",
                "--set", "step_duration=2", "--set", NO_BASELINE, timeout=180, env=env)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("swarmscope: ") and "k6" in ln]
    assert said[0] == (
        "swarmscope: building k6 v1.8.1 with swarmscope's output before any measurement window "
        f"(first use here, ≈ 4.5 min on 2 cores; cached as {tmp_path}/k6)"
    )
    assert re.fullmatch(
        rf"swarmscope: built k6 v1.8.1 with swarmscope's output in [45] s \({tmp_path}/k6\)", said[1]
    )
    rep = load_report(only_run_dir(out))
    (it,) = rep["points"][0]["iterations"]
    span_s = (it["ended_ns"] - it["started_ns"]) / 1e9
    assert 2.0 <= span_s < 2.0 + 1.5, span_s  # the step (2 s) and its close; the 4 s build is not in it
    assert it["started_ns"] > rep["started_ns"]
    assert rep["steps"][0]["requests"] > 50  # the real k6 ran the step


def test_kill_pod_without_a_cluster_says_so(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from swarmscope.core.errors import SwarmscopeError
    from swarmscope.targets.faults import KillPod

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SwarmscopeError, match="no cluster"):
        KillPod(at_s=0).inject()


@pytest.mark.slow
@needs_root
def test_locustfile_distributed_master_merges_workers_exactly(tmp_path: pathlib.Path) -> None:
    """locust -f scenarios/ingress_flood.py --master + 2 --worker: a worker starts the target;
    merged steps == one histogram of both workers' samples, successes == nginx's log lines."""
    rep = locust_f(tmp_path, "--ss-steps", "5,10", "--ss-step-duration", "2", workers=2)
    (w,) = windows(rep)  # one test start/stop: one window holding both steps
    steps = rep["steps"]
    assert [s["step"] for s in steps] == [0, 1] and [s["users"] for s in steps] == [5, 10]
    assert all(len(s["generator_cpu_pct"]) == 2 for s in steps)  # one entry per worker
    assert all(s["requests"] > 100 and s["failures"] == 0 for s in steps)
    assert sorted(w["recorders"]) == ["w1-n1", "w2-n1"]
    assert_merged_equals_one_histogram(steps, list(w["recorders"].values()))
    assert w["server_requests"] == w["successes"] == sum(s["requests"] for s in steps)
    assert w["proxy"]["processes"] == 3  # master + lb_workers (2)


@pytest.mark.slow
@needs_root
@pytest.mark.root
def test_locustfile_honours_locust_users_spawn_rate_and_run_time(tmp_path: pathlib.Path) -> None:
    """locust -f … -u 2 -r 2 -t 3s: one step of 2 users for 3 s (not the scenario's ten 30-s
    steps), and Locust does not warn that the options are ignored."""
    rep = locust_f(tmp_path, "-u", "2", "-r", "2", "-t", "3s")
    assert [(s["step"], s["users"]) for s in rep["steps"]] == [(0, 2)]
    assert (rep["config"]["steps"], rep["config"]["step_duration"]) == ([2.0], 3.0)
    assert "will be ignored" not in rep["stderr"]
    assert_exact_per_step(rep)


def test_generator_bound_flag_from_worker_cpu() -> None:
    rec = StepRecorder(2.0, 0.0, n_steps=2)
    rec.record(0.5, 0.6, 200, None)
    rec.record(2.5, 2.6, 200, None)
    rec.cpu_s = {0: 0.4, 1: 1.9}  # 20 % and 95 % of a core over 2-s steps
    rows = StepRecorder.merge([rec.encode()]).summary(cpu_bound_pct=90)
    assert [r["generator_bound"] for r in rows] == [False, True]
    assert rows[1]["generator_cpu_pct"] == [pytest.approx(95.0)]


@pytest.mark.slow
@needs_root
def test_k6_open_model_keeps_the_arrival_rate(tmp_path: pathlib.Path, k6_bin: str) -> None:
    r = flood(tmp_path, "engine=k6", "model=open", "steps=100,300", "step_duration=2", "open_users=100")
    steps = r["steps"]
    assert [s["rate"] for s in steps] == [100, 300]
    for s in steps:  # constant-arrival-rate: rate × duration iterations, each one request
        assert abs(s["requests"] - s["rate"] * 2) <= 0.05 * s["rate"] * 2, s["requests"]
    assert_exact_per_step(r)


def test_downtime_is_the_outage_not_a_stray_success() -> None:
    """A success stamped a few ms after the first refused connection (a load generator's
    timestamps out of order, as k6's under load) does not shorten a 1 s outage to 4 ms."""
    tl = [(t / 100, True) for t in range(0, 300)]  # 100 ok/s until 2.99
    tl += [(3.0 + t / 1000, False) for t in range(0, 4)]  # the kill: refused at once
    tl += [(3.004, True)]  # a response completed before the kill, stamped late
    tl += [(3.005 + t / 100, False) for t in range(0, 100)]  # refused until 3.995
    tl += [(4.0 + t / 100, True) for t in range(0, 300)]
    d = downtime(tl, fault_t=2.995)
    assert d["last_success_before"] == 3.004 and d["first_success_after"] == 4.0
    assert d["downtime_s"] == pytest.approx(0.996) and d["failed_requests"] == 100
    assert d["recovery_s"] == pytest.approx(4.0 - 2.995)  # [4.0, 5.0) holds all 100 again
    # no success after the fault: the outage runs to the end of the load
    d = downtime([(1.0, True), (2.0, False), (2.5, False)], fault_t=1.5)
    assert (d["downtime_s"], d["failed_requests"], d["first_success_after"]) == (1.5, 2, None)
