"""Every script in bench/ runs in its README form with the smallest arguments that still take its
whole path (one window, a few probes, one round): it exits 0 and prints its table.

    .venv/bin/python -m pytest tests/test_bench_smoke.py -k fanin

The figures are not checked here (a loaded 2-core machine moves them); the table's header line
and a row of it are. bench/http_flood.py and bench/probes.py have their own tests
(test_bench_http.py, test_bench_probes.py), bench/fuzz.py's campaigns test_fuzz.py; here they
run as a user runs them. Not here: bench/cold_tools.sh (a cold `make tools` of ≈ 35 min in a
private cache: there is no small form of it), bench/cluster_sweep.py and bench/cluster_ingress.py
(they start their own real nodes; tests/test_realcluster_sweep.py and
tests/test_realcluster_traefik.py run the same install and runs on the session's).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
root = pytest.mark.root  # namespaces, BPF or cgroups: conftest skips it with "not root"


def case(script: str, args: list[str], table: list[str], *marks: pytest.MarkDecorator) -> object:
    return pytest.param(script, args, table, marks=marks, id=script.removesuffix(".py"))


CASES = [
    case("disk_sync.py", ["--writes", "5"], ["durable 4 KiB write on this disk (median µs): append+fsync"]),
    case("fuzz.py", ["--scenarios", "5", "--fleet", "5", "--neighbors", "5"],
         ["scenario_parser  cases=", "fleet_grpc       cases=", "neighbors_grpc   cases=", "failures: 0"]),
    case("reconnect.py", ["--probes", "20", "--windows", "2", "--per-process", "10"],
         ["phase    windows   expected       lost", "  reference          2         40          0"]),
    case("fanin_bookkeeping.py", ["--probes", "100", "--relays", "2", "--windows", "1", "--repeat", "1"],
         ["readings sent      open      acks     close", "by column (WindowDone.table)"]),
    # The default form: the direct fleet and the old design's baseline row (a git worktree of it).
    case("fanin.py", ["--probes", "20", "--windows", "1", "--baseline-probes", "20"],
         ["design     probes       lost   open p50  close p50  close p99", "grpc.aio, go sims         20"],
         pytest.mark.slow),
    case("fanin.py", ["--relays", "1", "--probes", "20", "--direct-probes", "20", "--windows", "1",
                      "--baseline-ref", "none"], ["design     probes       lost", "relays"]),
    case("exec_storm.py", ["--rounds", "1", "--duration-s", "0.3"],
         ["(a) worker path, run_burst", "(b) plain vfork loop", "(c) exec_count cost"], root,
         pytest.mark.bpf),
    case("neighbors_ab.py", ["-n", "1000", "--rounds", "1"],
         ["list, 1 thread(s):", "store, state applied per commit:"], root, pytest.mark.bpf),
    case("probe_footprint.py", ["--idle", "1", "--execs", "20"],
         ["RSS, steady, process tree at 20 s (MiB)",
          "execs counted per window                    20 20 20  20 each"],
         root, pytest.mark.bpf),
    case("flow_storm.py", ["--flows", "200", "--cache", "1000,100", "--timeouts", "5,1"],
         ["generated == kernel per flow at every point: True",
          "cacheMaxFlows | timeout s | captured flows/s"], root,
         pytest.mark.bpf, pytest.mark.slow),  # 20 s
    case("neighbors.py", ["--set", "repeats=1", "--set", "neighbors=1", "--clock-calls", "100",
                          "--os-neighbors", "5"],
         ["mode                        N rep   total ms  µs/neigh", "\nwrite+watch, durability=os",
          "write_watch [os]            5   1"], root, pytest.mark.bpf,
         pytest.mark.slow),  # the disk-sync table, three modes, then the durability=os run at one N
    case("http_flood.py", ["--paths", "locust", "--users", "2", "--warmup", "0.5", "--window", "1",
                           "--tail", "0.5", "--repeat", "1"],
         ["locust_plain", "locust_swarmscope", "median of 1 rounds",
          "(goal <= 1.05 over >= 6 rounds: too few rounds)",
          "locust per-request bookkeeping (FloodUser.get less plain's task, no request): "],
         root, pytest.mark.slow),
    case("faults.py", ["--only", "probe"], ["part killed", "probe", "SIGKILL", "SIGTERM", "total"], root,
         pytest.mark.bpf, pytest.mark.slow),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("script", "args", "table"), CASES)
def test_bench_runs_and_prints_its_table(
    script: str, args: list[str], table: list[str], tmp_path: pathlib.Path
) -> None:
    argv = [sys.executable, f"bench/{script}", *args]
    if script in ("neighbors.py", "http_flood.py"):
        argv += ["--out", str(tmp_path / "out")]  # not results/ of the checkout
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert p.returncode == 0, f"{' '.join(argv[1:])} exited {p.returncode}:\n{p.stderr[-3000:]}"
    missing = [line for line in table if line not in p.stdout]
    assert not missing, f"{' '.join(argv[1:])}: its table lacks {missing}:\n{p.stdout[-3000:]}"


# The benches' simulated probes as tests/test_relay.py, test_nofile.py and test_fleet_load_held.py
# drive them, in a fresh interpreter that then lists its children still running: none. (Through
# multiprocessing's spawn they left its resource tracker, alive as long as the caller: in a test
# run, to the end, where the reaper found it.)
DRIVER = """
import os, sys
sys.path.insert(0, "bench")
import reconnect
from simprobes import SimProbes
from swarmscope.controller.fleet import Fleet
fleet = Fleet("t", liveness_s=30)
fleet.start()
sims = SimProbes.spawn(fleet.address, "t", ["a", "b", "c"], per_process=2)
sims.wait_registered(timeout_s=60)
sims.stop()
fleet.stop()
reconnect.run(n=4, windows=1, fraction=0.5, per_proc=2, seed=1)
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        ppid = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]
        cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
    except OSError:
        continue
    if ppid == str(os.getpid()):
        print("left running:", p, cmd)
"""


@pytest.mark.slow
def test_simulated_probes_leave_no_process_behind() -> None:
    p = subprocess.run([sys.executable, "-c", DRIVER], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert [line for line in p.stdout.splitlines() if line.startswith("left running:")] == [], p.stdout
