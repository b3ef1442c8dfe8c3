"""Simulated nodes: one cgroup v2 child per node, so the kernel can count each node's execs.

    nodes = create_sim_nodes("run-1a2b", ["n1", "n2"], pids_max=256)
    nodes[0].cgroup_id      # == bpf_get_current_cgroup_id() of anything running inside
    ...
    destroy_sim_nodes("run-1a2b")     # kills leftovers, removes the dirs; idempotent
    cleanup_stale()                   # groups whose creating process is gone

Layout: ``<v2 mount>/swarmscope/<group>/<name>`` (the v2 mount is found in /proc/mounts:
``/sys/fs/cgroup/unified`` on hybrid hosts, ``/sys/fs/cgroup`` on pure v2). The pids limit goes
to the v1 ``pids`` controller (``<pids mount>/swarmscope/<group>/<name>/pids.max``) when it is
mounted, else to the v2 ``pids.max`` after enabling the controller down the path; with neither,
``pids_path`` is None and the limit is only what the storm's own bounds give.

Who owns a group: ``/run/swarmscope/simnodes/<group>.owner`` holds the creator's pid and start
time, written before the first mkdir. :func:`cleanup_stale` removes groups whose owner is gone,
never a live run's.

In a cluster a node is the real node: :func:`host_node` (name from ``NODE_NAME``, cgroup id 0
meaning "the whole host", no cgroup moves). Caveat: needs root (cgroupfs writes).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import signal
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from swarmscope.core.errors import LoadGenError, SetupError
from swarmscope.core.sys import cgroups
from swarmscope.core.sys.trust import atomic_write

ROOT_NAME = "swarmscope"
OWNER_DIR = pathlib.Path("/run/swarmscope/simnodes")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class SimNode:
    """A node for the load generator. ``cgroup_path`` None means "run where you are" (host)."""

    name: str
    cgroup_path: pathlib.Path | None
    cgroup_id: int
    pids_path: pathlib.Path | None
    pids_max: int | None = None
    group: str | None = None
    # The v2 cgroup path announced when this process cannot see the v2 hierarchy (cgroup_id 0):
    # the node's probe resolves it to the id (a pod on a hybrid-layout host, see own_cgroup_node).
    announce_path: str = ""

    def describe(self, host: str, comm: str = "") -> dict[str, Any]:
        """The node as a worker announces it to the master (swarmscope:nodes)."""
        return {
            "name": self.name,
            "host": host,
            "cgroup_id": int(self.cgroup_id),
            "cgroup_path": str(self.cgroup_path or self.announce_path),
            "comm": comm,
        }


def joiner(node: SimNode) -> Callable[[], None]:
    """A ``preexec_fn`` that moves the new process into ``node`` (v1 pids, then v2) before its
    exec, so the exec itself is counted under the node. Only open/write syscalls: fork-safe."""
    paths = [
        os.path.join(str(d), "cgroup.procs") for d in (node.pids_path, node.cgroup_path) if d is not None
    ]

    def join() -> None:
        for path in paths:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    return join


def _check_name(kind: str, name: str) -> None:
    if not _NAME_RE.match(name):
        raise LoadGenError(
            f"invalid {kind} name {name!r}: use 1-64 of [A-Za-z0-9_.-], not starting with '.' or '-'"
        )


def _proc_start(pid: int) -> str | None:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime), counted after the ")" closing comm (comm may contain spaces).
    return stat.rsplit(")", 1)[1].split()[19]


def _owner_file(group: str) -> pathlib.Path:
    return OWNER_DIR / f"{group}.owner"


def _owner_alive(group: str) -> bool:
    try:
        pid_s, start = _owner_file(group).read_text().split()
    except (OSError, ValueError):
        return False
    return _proc_start(int(pid_s)) == start


def _enable_v2_pids(v2: pathlib.Path, dirs: list[pathlib.Path]) -> bool:
    """Enable the v2 pids controller from the root down to ``dirs[-1]``'s children."""
    try:
        if "pids" not in (v2 / "cgroup.controllers").read_text().split():
            return False
        for d in [v2, *dirs]:
            (d / "cgroup.subtree_control").write_text("+pids")
    except OSError:
        return False
    return True


def create_sim_nodes(group: str, names: list[str], pids_max: int) -> list[SimNode]:
    """Create one cgroup per name under ``swarmscope/<group>/``, each limited to ``pids_max`` tasks."""
    _check_name("group", group)
    for n in names:
        _check_name("node", n)
    if len(set(names)) != len(names):
        raise LoadGenError(f"duplicate node names in {names}")
    if not 1 <= pids_max <= 1_000_000:
        raise LoadGenError(f"pids_max must be 1..1000000, got {pids_max}")
    v2 = cgroups.cgroup2_mount()
    gdir = v2 / ROOT_NAME / group
    if gdir.exists():
        if _owner_alive(group):
            raise LoadGenError(f"simulated-node group {group!r} is in use by a running process ({gdir})")
        destroy_sim_nodes(group)
    try:
        OWNER_DIR.mkdir(parents=True, exist_ok=True)
        # renamed into place whole: the start-of-run sweep and audits read it at any moment
        atomic_write(_owner_file(group), f"{os.getpid()} {_proc_start(os.getpid())}\n".encode())
        gdir.mkdir(parents=True, exist_ok=True)
        pids_root = cgroups.pids_v1_mount()
        v2_pids = False
        if pids_root is not None:
            (pids_root / ROOT_NAME / group).mkdir(parents=True, exist_ok=True)
        else:
            v2_pids = _enable_v2_pids(v2, [v2 / ROOT_NAME, gdir])
        nodes = []
        for n in names:
            d = gdir / n
            d.mkdir(exist_ok=True)
            pids_path: pathlib.Path | None = None
            if pids_root is not None:
                pids_path = pids_root / ROOT_NAME / group / n
                pids_path.mkdir(exist_ok=True)
                (pids_path / "pids.max").write_text(f"{pids_max}\n")
            elif v2_pids:
                pids_path = d
                (d / "pids.max").write_text(f"{pids_max}\n")
            nodes.append(
                SimNode(
                    name=n,
                    cgroup_path=d,
                    cgroup_id=cgroups.cgroup_id(d),  # what bpf_get_current_cgroup_id() returns
                    pids_path=pids_path,
                    pids_max=pids_max if pids_path is not None else None,
                    group=group,
                )
            )
        return nodes
    except OSError as e:
        destroy_sim_nodes(group)
        raise LoadGenError(f"cannot create simulated nodes under {gdir} (root needed): {e}") from e


def _kill_and_rmdir(d: pathlib.Path, deadline: float) -> None:
    """Remove cgroup dir ``d`` and its children, SIGKILLing whatever still runs inside."""
    if not d.is_dir():
        return
    for child in [p for p in d.iterdir() if p.is_dir()]:
        _kill_and_rmdir(child, deadline)
    while True:
        kill_file = d / "cgroup.kill"
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
        with contextlib.suppress(OSError):
            for pid in (d / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if time.monotonic() > deadline:
                raise LoadGenError(f"cannot remove cgroup {d}: {e}") from e
            time.sleep(0.02)  # killed tasks take a moment to leave the cgroup


def destroy_sim_nodes(group: str | Iterable[SimNode], timeout_s: float = 5.0) -> None:
    """Kill leftover processes and remove a group's cgroups (v2 and v1 pids). Idempotent."""
    if isinstance(group, str):
        groups = {group}
    else:
        groups = {n.group for n in group if n.group}
    deadline = time.monotonic() + timeout_s
    for g in groups:
        _check_name("group", g)
        roots = [cgroups.cgroup2_mount()]
        pids_root = cgroups.pids_v1_mount()
        if pids_root is not None:
            roots.append(pids_root)
        for root in roots:
            _kill_and_rmdir(root / ROOT_NAME / g, deadline)
        with contextlib.suppress(OSError):
            _owner_file(g).unlink()


def cleanup_stale() -> list[str]:
    """Destroy groups left by crashed runs (owner process gone); return their names.

    Without a cgroup v2 mount (a container on a host with the hybrid layout: the runtime
    mounts only the v1 hierarchies) no run of ours can have made a group: nothing to sweep."""
    found: set[str] = set()
    try:
        roots = [cgroups.cgroup2_mount()]
    except SetupError:
        return []
    pids_root = cgroups.pids_v1_mount()
    if pids_root is not None:
        roots.append(pids_root)
    for root in roots:
        base = root / ROOT_NAME
        if base.is_dir():
            found.update(p.name for p in base.iterdir() if p.is_dir() and _NAME_RE.match(p.name))
    stale = sorted(g for g in found if not _owner_alive(g))
    for g in stale:
        destroy_sim_nodes(g)
    return stale


def host_node() -> SimNode:
    """The real node in cluster mode: name from NODE_NAME (else hostname), cgroup id 0 = whole host."""
    name = os.environ.get("NODE_NAME") or socket.gethostname()
    return SimNode(name=name, cgroup_path=None, cgroup_id=0, pids_path=None)


def own_cgroup_node(name: str) -> SimNode:
    """The real node in cluster mode, measured through this worker's own cgroup.

    The storm's children stay in the worker's cgroup (its pod's), so the probe on the node can
    count exactly them: the cgroup id is the inode of that cgroup's directory, which is the
    same number inside a cgroup namespace (where /proc/self/cgroup says "/") and on the host.
    In a container on a hybrid-layout host the runtime mounts only the v1 hierarchies, so the id
    cannot be read here; the worker then announces its v2 path (from /proc/self/cgroup, a host
    path: no cgroup namespace on such hosts) and the node's probe, which mounts the host's
    cgroupfs, resolves it. Without cgroup v2 at all it falls back to the whole host (cgroup id
    0), where other processes' execs are counted too.
    """
    cid = cgroups.pid_cgroup_id("self")
    rel = None if cid else cgroups.pid_cgroup_rel("self")
    path = "" if rel is None else "/" + rel
    return SimNode(name=name, cgroup_path=None, cgroup_id=cid, pids_path=None, announce_path=path)
