"""The exec storm's ``load: stress-ng``: a node's burst made by Debian's ``stress-ng --exec``.

    sng = StressNg.create()                       # finds stress-ng, makes a private dir
    h = sng.start_burst(node, duration_s=1, instances=2, max_execs=100_000, comm="s1a2b-n1")
    r = h.wait()      # r.bogo_ops (stress-ng's own count), r.execs = bogo_ops + STARTUP_EXECS
    sng.close()

What runs: ``stress-ng --exec N --exec-fork-method vfork --exec-method execve --timeout T``
(or ``--exec-ops K``), as the published exec-storm scaling test ran stress-ng ("as many exec()
as it can during 1 second on all the node CPUs"). The process joins the node's cgroup(s) and
drops to ``nobody`` between fork and exec (stress-ng's exec stressor refuses root), so
everything it execs, its own start included, is counted under the node by the probe.

What the kernel counts, exactly (docs/seeds.md#exec-scaling-test, measured here):

- **stress-ng's own exec into the node: 1** (``STARTUP_EXECS``). It forks its stressor
  instances without exec, and execs nothing else at start-up.
- **one exec per bogo op.** Each bogo op is a reaped child that ran ``execve`` of stress-ng
  itself with ``--exec-exit`` (which exits at once). With ``vfork`` + ``execve`` every child
  execs the same valid binary, so bogo ops == successful execs. With stress-ng's *default*
  methods (fork, "all") they are not equal: a quarter of the children deliberately exec a
  garbage file (ENOEXEC) and an eighth pass an oversized argv/env (E2BIG), and those children
  are still bogo ops. Measured: 1,000 bogo ops, 727 execs. That is the "bogo ops do not equal
  real execs" seen before, and why this module pins the methods.

So generated = bogo ops + 1 == kernel in every window; an exec that failed anyway shows up as
a harness mismatch, never hidden.

``comm``: stress-ng execs ``/proc/self/exe``, so the children's comm is the executable's file
name. To let comm-only tracers (ig) tell nodes apart, the binary is copied once into a private
root-owned directory and hard-linked there under each node's comm.

Bounds: ``--timeout`` takes whole seconds only (a fraction means "no timeout" to stress-ng
0.15), so time-bounded bursts need an integer ``duration_s`` >= 1; ``--exec-ops`` caps the
count (``max_execs``) in both modes, and the process group is killed past duration + grace.
With ``ops`` the batch size is 1 (``--exec-max 1``) so the cap is exact: stress-ng checks it
only between batches.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass

from swarmscope.core.errors import LoadGenError, SetupError
from swarmscope.workers.nodes import SimNode, joiner

STARTUP_EXECS = 1  # stress-ng's own exec, made after joining the node
USER = "nobody"
MAX_DURATION_S = 60
MAX_INSTANCES = 64
MAX_EXECS = 1_000_000
GRACE_S = 10.0
_BOGO_RE = re.compile(r"^\s*bogo-ops:\s*(\d+)\s*$", re.M)
_WALL_RE = re.compile(r"^\s*wall-clock-time:\s*([0-9.]+)\s*$", re.M)


@dataclass(frozen=True)
class StressNgResult:
    node: str
    bogo_ops: int  # stress-ng's own count (metrics "bogo-ops")
    execs: int  # bogo_ops + STARTUP_EXECS: what the kernel counts in the node
    failed: int
    elapsed_s: float
    rate: float  # bogo ops per second of stress-ng's wall-clock time
    startup_execs: int = STARTUP_EXECS


def parse_yaml_metrics(text: str) -> tuple[int, float]:
    """(bogo ops, wall-clock s) of the exec stressor from stress-ng's ``--yaml`` file."""
    ops, wall = _BOGO_RE.search(text), _WALL_RE.search(text)
    if ops is None or wall is None:
        raise LoadGenError(f"stress-ng wrote no exec metrics: {text[-400:]!r}")
    return int(ops.group(1)), float(wall.group(1))


def exec_max_for(node: SimNode, instances: int) -> int:
    """Children per batch per instance that fit the node's pids limit (stress-ng's default 4096)."""
    if node.pids_max is None:
        return 4096
    # main + instances + their children, with slack for stress-ng's helper threads.
    return max(1, min(4096, (node.pids_max - 8 - instances) // instances))


def check_bounds(duration_s: float, instances: int, max_execs: int, ops: int) -> None:
    bad = []
    if ops == 0 and (duration_s != int(duration_s) or not 1 <= duration_s <= MAX_DURATION_S):
        bad.append(f"duration_s={duration_s} (stress-ng's --timeout takes whole seconds 1..{MAX_DURATION_S})")
    if not 1 <= instances <= MAX_INSTANCES:
        bad.append(f"instances={instances} (must be 1..{MAX_INSTANCES})")
    if not 1 <= max_execs <= MAX_EXECS:
        bad.append(f"max_execs={max_execs} (must be 1..{MAX_EXECS})")
    if not 0 <= ops <= MAX_EXECS:
        bad.append(f"ops={ops} (must be 0..{MAX_EXECS})")
    if bad:
        raise LoadGenError("stress-ng burst out of bounds: " + "; ".join(bad))


def stress_args(duration_s: float, instances: int, ops: int, exec_max: int, count_bound: bool) -> list[str]:
    """stress-ng's arguments: time-bounded (``--timeout``) or count-bounded (``--exec-ops``)."""
    timeout = MAX_DURATION_S if count_bound else int(duration_s)
    return [
        "--exec", str(instances),
        "--exec-fork-method", "vfork",
        "--exec-method", "execve",
        "--exec-ops", str(ops),
        "--exec-max", str(exec_max),
        "--timeout", str(timeout),
        "--metrics-brief",
    ]  # fmt: skip


def command_line(
    duration_s: float, instances: int, ops: int = 0, pids_max: int = 256, max_execs: int = MAX_EXECS
) -> str:
    """The command a node runs, for the report (the per-run paths left out)."""
    node = SimNode("n", None, 0, None, pids_max)
    exec_max = 1 if ops else exec_max_for(node, instances)
    args = stress_args(duration_s, instances, min(ops, max_execs) or max_execs, exec_max, bool(ops))
    return " ".join(["stress-ng", *args])


class StressNgHandle:
    """A running stress-ng burst: ``stop()`` asks it to end (SIGINT: it still writes its
    metrics), ``wait()`` returns its count."""

    def __init__(self, node: SimNode, proc: subprocess.Popen[str], workdir: pathlib.Path, limit_s: float):
        self.node, self.proc, self.workdir, self.limit_s = node, proc, workdir, limit_s
        self._result: StressNgResult | None = None

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout_s: float | None = None) -> StressNgResult:
        if self._result is not None:
            return self._result
        try:
            try:
                _, err = self.proc.communicate(timeout=self.limit_s if timeout_s is None else timeout_s)
            except subprocess.TimeoutExpired as e:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.communicate()
                raise LoadGenError(f"stress-ng on node {self.node.name} overran its bound; killed") from e
            try:
                text = (self.workdir / "metrics.yaml").read_text()
            except OSError as e:
                raise LoadGenError(
                    f"stress-ng on node {self.node.name} failed (exit {self.proc.returncode}): "
                    f"{err.strip()[-400:]}"
                ) from e
            ops, wall = parse_yaml_metrics(text)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._result = StressNgResult(
            node=self.node.name,
            bogo_ops=ops,
            execs=ops + STARTUP_EXECS,
            failed=0,
            elapsed_s=wall,
            rate=ops / wall if wall > 0 else 0.0,
        )
        return self._result


class StressNg:
    """stress-ng, found once, with a private directory for the per-comm copies and work dirs."""

    def __init__(self, binary: pathlib.Path, root: pathlib.Path, uid: int, gid: int):
        self.binary, self.root, self.uid, self.gid = binary, root, uid, gid

    @classmethod
    def create(cls) -> StressNg:
        path = shutil.which("stress-ng")
        if not path:
            raise SetupError("stress-ng is not installed: run tools/setup.sh (Debian package stress-ng)")
        try:
            pw = pwd.getpwnam(USER)
        except KeyError as e:
            raise SetupError(f"user {USER!r} is missing: stress-ng's exec stressor refuses root") from e
        root = pathlib.Path(tempfile.mkdtemp(prefix="swarmscope-stressng-"))
        root.chmod(0o755)  # nobody must reach the copies; only root writes here
        return cls(pathlib.Path(path), root, pw.pw_uid, pw.pw_gid)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def binary_for(self, comm: str | None) -> pathlib.Path:
        """The executable to run so the execs' comm is ``comm`` (a root-owned copy)."""
        if not comm:
            return self.binary
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", comm) or comm.startswith("."):
            raise LoadGenError(f"invalid comm {comm!r} for stress-ng")
        # One private copy, hard-linked under each comm: a hard link is a name of its own, so
        # /proc/self/exe (and the children's comm) is that name, at no extra space per node.
        master = self.root / ".stress-ng"
        if not master.exists():
            tmp = self.root / ".stress-ng.tmp"
            shutil.copyfile(self.binary, tmp)
            tmp.chmod(0o755)
            tmp.rename(master)
        d = self.root / comm
        exe = d / comm
        if not exe.exists():
            d.mkdir(mode=0o755, exist_ok=True)
            os.link(master, exe)
        return exe

    def argv(
        self,
        exe: pathlib.Path,
        node: SimNode,
        duration_s: float,
        instances: int,
        max_execs: int,
        ops: int,
        workdir: pathlib.Path,
    ) -> list[str]:
        exec_max = 1 if ops else exec_max_for(node, instances)
        args = stress_args(duration_s, instances, min(ops, max_execs) or max_execs, exec_max, bool(ops))
        return [str(exe), *args, "--yaml", str(workdir / "metrics.yaml"), "--temp-path", str(workdir)]

    def start_burst(
        self,
        node: SimNode,
        duration_s: float = 1.0,
        instances: int = 2,
        max_execs: int = MAX_EXECS,
        ops: int = 0,
        comm: str | None = None,
    ) -> StressNgHandle:
        """Start stress-ng in ``node`` (its cgroup, as nobody) and return at once."""
        check_bounds(duration_s, instances, max_execs, ops)
        exe = self.binary_for(comm)
        workdir = pathlib.Path(tempfile.mkdtemp(prefix="run-", dir=self.root))
        os.chown(workdir, self.uid, self.gid)
        cmd = self.argv(exe, node, duration_s, instances, max_execs, ops, workdir)
        join = joiner(node)
        uid, gid = self.uid, self.gid

        def enter_node() -> None:
            # Between fork and exec: join the node first (as root), then drop to nobody, so
            # stress-ng's own exec is the first thing counted in the node (STARTUP_EXECS).
            join()
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                cwd=workdir,
                start_new_session=True,
                env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
                preexec_fn=enter_node,  # only syscalls (open/write/set*id): fork-safe
            )
        except (OSError, subprocess.SubprocessError) as e:
            shutil.rmtree(workdir, ignore_errors=True)
            raise LoadGenError(f"cannot start stress-ng in node {node.name}: {e}") from e
        limit = (MAX_DURATION_S if ops else float(duration_s)) + GRACE_S
        return StressNgHandle(node, proc, workdir, limit)
