"""Fault injection for whole runs: start `swarmscope run`, kill one of its parts, audit the machine.

    case = CASES["worker"]
    res = run_fault(case, signal.SIGKILL, tmp_path, after_windows=1)
    assert res.ok, res.problems        # acknowledged windows kept, run marked, nothing left

A run is started in its own session; its process tree (pids with start times), the network
namespaces (by inode) and cgroups those processes were in, the owner
claims it makes (swarmscope.core.sys.owners: netns, links), its simulated-node cgroup groups and
the BPF programs its processes hold are sampled while it runs. Once ``after_windows``
iterations are stored (plus a random delay below ``jitter_s``), the part named by the case is
sent the signal. Then the controller is waited for (it goes on alone when a child part died),
the next run's start-of-run sweep is done (swarmscope.app.lifecycle.sweep_stale), and the audit
checks: every iteration stored before the kill is still stored; the run's status is not
``running`` (``interrupted`` when the controller itself was signalled); no process of the tree
lives; no cgroup group, netns or link it made exists; no BPF program it held is loaded.

Used by bench/faults.py (the whole matrix) and tests/test_faults.py (a few cases; tests may import
bench/, benchmarks never import tests/). Caveats:
root only; each case is a real run of a few seconds to a minute.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field

import psutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
OWNERS = pathlib.Path("/run/swarmscope/owners")
SIMNODES = pathlib.Path("/run/swarmscope/simnodes")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _exec_args(extra: tuple[str, ...] = ()) -> list[str]:
    return [
        "scenarios/exec_storm.yaml", "--set", "nodes=2", "--set", "iterations=12",
        "--set", "burst_s=0.4", "--set", "pause_s=0.2", *extra,
    ]  # fmt: skip


def _neigh_args(extra: tuple[str, ...] = ()) -> list[str]:
    return [
        "scenarios/neighbor_writes.yaml", "--set", "neighbors=2000,3000,4000,5000,6000,7000,8000",
        "--set", "page_size=1000", "--set", "batch_size=500", *extra,
    ]  # fmt: skip


def _ingress_args(extra: tuple[str, ...] = ()) -> list[str]:
    return [
        "scenarios/ingress_flood.yaml", "--set", "steps=5,5,5,5,5,5", "--set", "step_duration=2",
        "--set", "restart_delay_s=0.5", "--set", "network_baseline_s=0", *extra,
    ]  # fmt: skip


def _distributed() -> tuple[str, ...]:
    return (
        "--set",
        "mode=distributed",
        "--set",
        "workers=2",
        "--set",
        f"master_bind=127.0.0.1:{_free_port()}",
    )


@dataclass(frozen=True)
class Case:
    """Which run to start, and how to find the part to kill among its processes."""

    target: str
    kind: str
    args: tuple[str, ...]
    match: str  # substring of the victim's command line; "" = the controller itself
    distributed: bool = False

    def argv(self) -> list[str]:
        builders = {"exec_storm": _exec_args, "neighbor_writes": _neigh_args, "ingress_flood": _ingress_args}
        extra = (*self.args, *(_distributed() if self.distributed else ()))
        return builders[self.kind](extra)


CASES: dict[str, Case] = {
    "controller": Case("controller", "exec_storm", (), ""),
    "controller-neighbor": Case("controller", "neighbor_writes", (), ""),
    "controller-ingress": Case("controller", "ingress_flood", (), ""),
    "worker": Case("worker", "exec_storm", (), "-m swarmscope worker", distributed=True),
    "probe": Case("probe", "exec_storm", (), "-m swarmscope probe"),
    "tracer": Case("tracer", "exec_storm", ("--set", "tracer=bpftrace"), "bpftrace"),
    "neighbor-control-plane": Case(
        "neighbor control plane", "neighbor_writes", (), "swarmscope.targets.neighbors.server"
    ),
    # The agent lives in the worker process that programs its XDP map (kinds/neighbor_writes).
    "neighbor-agent": Case("neighbor agent", "neighbor_writes", (), "-m swarmscope worker", distributed=True),
    "nginx": Case("nginx", "ingress_flood", (), "nginx: master"),
}


@dataclass
class FaultResult:
    case: str
    sig: str
    killed: bool = False
    acked: int = 0  # iterations stored when the signal was sent
    stored: int = 0  # iterations stored at the end
    status: str = ""
    leftovers: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.killed and not self.problems and not self.leftovers


def _iterations(db: pathlib.Path) -> int:
    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=5)) as c:
            return int(c.execute("SELECT COUNT(*) FROM iterations").fetchone()[0])
    except sqlite3.Error:
        return 0


def _status(db: pathlib.Path) -> str:
    with contextlib.closing(sqlite3.connect(db, timeout=5)) as c:
        rows = c.execute("SELECT status FROM runs").fetchall()
    return ",".join(r[0] for r in rows) or "no-run"


class _Watch:
    """What the run's process tree owns, sampled while it runs."""

    def __init__(self, root: int):
        self.root = root
        self.procs: dict[int, tuple[float, str]] = {}
        self.claims: set[tuple[str, str]] = set()
        self.groups: set[str] = set()
        self.progs: set[int] = set()
        # Seen from the processes themselves, not from what the code chose to claim: the network
        # namespaces (by inode) and cgroups they lived in. A resource the code forgets to
        # register under /run/swarmscope/owners is still audited.
        self.netns_inodes: set[int] = set()
        # Named namespaces seen holding its processes, name -> inode at that moment: an inode
        # alone is not enough, the kernel reuses a deleted namespace's inode for a new one (other
        # runs on the machine make theirs meanwhile).
        self.netns_names: dict[str, int] = {}
        self.cgroups: set[str] = set()
        self.host_netns = os.stat("/proc/self/ns/net").st_ino  # this process runs in the host's
        self.host_cgroups = set(_cgroups_of(os.getpid()))

    def sample(self) -> None:
        try:
            top = psutil.Process(self.root)
            tree = [top, *top.children(recursive=True)]
        except psutil.Error:
            return
        for p in tree:
            with contextlib.suppress(psutil.Error):
                self.procs.setdefault(p.pid, (p.create_time(), " ".join(p.cmdline())[:120]))
            with contextlib.suppress(OSError):
                self.netns_inodes.add(os.stat(f"/proc/{p.pid}/ns/net").st_ino)
            self.cgroups.update(_cgroups_of(p.pid))
        for d in pathlib.Path("/run/netns").iterdir() if pathlib.Path("/run/netns").is_dir() else []:
            with contextlib.suppress(OSError):
                ino = os.stat(d).st_ino
                if ino in self.netns_inodes and ino != self.host_netns:
                    self.netns_names[d.name] = ino
        pids = set(self.procs)
        for kind in ("netns", "link", "pindir"):
            d = OWNERS / kind
            for f in d.iterdir() if d.is_dir() else []:
                with contextlib.suppress(OSError, ValueError):
                    if json.loads(f.read_text()).get("pid") in pids:
                        self.claims.add((kind, f.name))
        for f in SIMNODES.glob("*.owner"):  # not a writer's temporary file (renamed over it whole)
            with contextlib.suppress(OSError, ValueError):
                if int(f.read_text().split()[0]) in pids:
                    self.groups.add(f.name.removesuffix(".owner"))

    def sample_progs(self) -> None:
        out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout
        with contextlib.suppress(ValueError):
            for prog in json.loads(out or "[]"):
                if any(p.get("pid") in self.procs for p in prog.get("pids", [])):
                    self.progs.add(int(prog["id"]))

    def find(self, match: str) -> psutil.Process | None:
        if not match:
            return psutil.Process(self.root)
        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(self.root).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if match in " ".join(p.cmdline()):
                        return p
        return None


def _cgroups_of(pid: int) -> list[str]:
    """The cgroup directories ``pid`` is in (every hierarchy), as paths under /sys/fs/cgroup."""
    try:
        lines = pathlib.Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        sub = ctrls.split(",")[0].removeprefix("name=") if ctrls else "unified"
        for base in (pathlib.Path("/sys/fs/cgroup") / sub, pathlib.Path("/sys/fs/cgroup")):
            if (base / path.lstrip("/")).is_dir():
                out.append(str(base / path.lstrip("/")))
                break
    return out


def leftovers(w: _Watch) -> list[str]:
    left = [f"process {pid} {w.procs[pid][1]}" for pid in sorted(_alive(w))]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    claimed = {name for kind, name in w.claims if kind == "netns"}
    for d in pathlib.Path("/run/netns").iterdir() if pathlib.Path("/run/netns").is_dir() else []:
        with contextlib.suppress(OSError):
            ino = os.stat(d).st_ino
            if w.netns_names.get(d.name) == ino and d.name not in claimed:
                left.append(f"netns {d.name} (its processes were in it; never claimed)")
    for cg in sorted(w.cgroups - w.host_cgroups):
        if pathlib.Path(cg).is_dir() and "/swarmscope" in cg:
            left.append(f"cgroup {cg}")
    for kind, name in sorted(w.claims):
        if kind == "netns" and name in netns:
            left.append(f"netns {name}")
        if (
            kind == "link"
            and subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0
        ):
            left.append(f"link {name} (with its XDP program)")
        if kind == "pindir" and (OWNERS / kind / name).exists():
            left.append(f"pinned dir {name}")
    from swarmscope.core.sys import cgroups

    for g in sorted(w.groups):
        if (cgroups.cgroup2_mount() / "swarmscope" / g).exists():
            left.append(f"cgroup group {g}")
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout
    live = {int(p["id"]) for p in json.loads(out or "[]")}
    left += [f"bpf prog {i}" for i in sorted(w.progs & live)]
    return left


def _alive(w: _Watch) -> list[int]:
    live = []
    for pid, (created, _) in w.procs.items():
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if abs(p.create_time() - created) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
                live.append(pid)
    return live


def _wait_tree_gone(w: _Watch, timeout_s: float) -> None:
    """Until every process of the run's tree has exited (bounded: a survivor is then a leftover)."""
    deadline = time.monotonic() + timeout_s
    while _alive(w) and time.monotonic() < deadline:
        time.sleep(0.05)


def run_fault(
    case: Case, sig: int, workdir: pathlib.Path, after_windows: int = 2, jitter_s: float = 1.0,
    rng: random.Random | None = None, timeout_s: float = 240.0,
) -> FaultResult:  # fmt: skip
    """One run of ``case`` with ``sig`` sent to its part; see the module doc for the audit."""
    from swarmscope.app.lifecycle import sweep_stale

    rng = rng or random.Random()
    res = FaultResult(case.target if case.kind == "exec_storm" else f"{case.target} ({case.kind})", sig.name)
    out = workdir / f"out-{case.kind}-{sig.name}-{os.getpid()}-{time.monotonic_ns()}"
    db = out / "swarmscope.sqlite"
    t0 = time.monotonic()
    log = open(workdir / f"{out.name}.log", "w")
    p = subprocess.Popen(
        [str(BIN / "swarmscope"), "run", *case.argv(), "--out", str(out)],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    w = _Watch(p.pid)
    try:
        delay = rng.uniform(0, jitter_s)
        fire_at = None
        while p.poll() is None and time.monotonic() - t0 < timeout_s:
            w.sample()
            if fire_at is None and _iterations(db) >= after_windows:
                fire_at = time.monotonic() + delay
                w.sample_progs()
            if fire_at is not None and time.monotonic() >= fire_at and not res.killed:
                victim = w.find(case.match)
                if victim is not None:
                    w.sample_progs()
                    res.acked = _iterations(db)
                    with contextlib.suppress(psutil.Error):
                        victim.send_signal(sig)
                        res.killed = True
                if not case.match and res.killed:
                    break
            time.sleep(0.05)
        try:
            p.wait(timeout=max(10.0, timeout_s - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            res.problems.append("the controller did not finish")
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if not res.killed:
            log.flush()  # why it ended: the run's own output, for the test's failure message
            tail = pathlib.Path(log.name).read_text(errors="replace")[-1500:]
            res.problems.append(f"the part to kill was never seen (run ended first); its output:\n{tail}")
        _wait_tree_gone(w, 15.0)  # PR_SET_PDEATHSIG deliveries: until no process of the tree lives
        sweep_stale()  # what the next run's start does
        res.stored = _iterations(db)
        res.status = _status(db) if db.exists() else "no-db"
        if res.stored < res.acked:
            res.problems.append(f"lost iterations: {res.acked} stored before the kill, {res.stored} after")
        if "running" in res.status:
            res.problems.append("run left at status running")
        if not case.match and res.status != "interrupted":
            res.problems.append(f"controller signalled but status is {res.status}")
        res.leftovers = leftovers(w)
    finally:
        log.close()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    res.seconds = time.monotonic() - t0
    return res
