"""The one cgroup helper: where cgroup v2 (and the v1 ``pids`` controller) is mounted, and ids.

    from swarmscope.core.sys import cgroups
    root = cgroups.cgroup2_mount()             # Path("/sys/fs/cgroup/unified") on hybrid hosts
    cg = cgroups.pid_cgroup_path(os.getpid())  # Path of this process's v2 cgroup
    cgroups.cgroup_id(cg) == cgroups.pid_cgroup_id(os.getpid())
    cgroups.cgroup_paths(wanted={cgid})        # {id: "/swarmscope/run-1/n1"} for reports
    with cgroups.temp_cgroup("ss-check") as cg: ...   # a throw-away child, removed after

A cgroup's id is the inode number of its directory on the v2 mount: that is what
``bpf_get_current_cgroup_id()`` returns in a BPF program, so the ids here match the kernel's
counts. The same inode is seen inside a cgroup namespace (where /proc/self/cgroup says "/")
and on the host. Layout facts: docs/platform.md#cgroups.

Caveats: a cgroup removed since it was counted no longer resolves (callers show its id alone).
With several cgroup2 mounts (a nested one in a container), the shortest path is taken: it is
the host's. /proc/mounts escapes spaces and other characters in octal (``\\040``); they are
decoded.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import secrets
import time
from collections.abc import Iterator

from swarmscope.core.errors import SetupError

PROC_MOUNTS = "/proc/mounts"


def _unescape(field: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash as \ooo octal.
    return field.encode().decode("unicode_escape") if "\\" in field else field


def mounts(mounts_file: str = PROC_MOUNTS) -> list[tuple[str, str, set[str]]]:
    """(fstype, mount point, options) of every mount."""
    out = []
    try:
        with open(mounts_file, encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 4:
                    out.append((parts[2], _unescape(parts[1]), set(parts[3].split(","))))
    except OSError as e:
        raise SetupError(f"cannot read {mounts_file}: {e.strerror}") from e
    return out


def cgroup2_mount(mounts_file: str = PROC_MOUNTS) -> pathlib.Path:
    """Where cgroup v2 is mounted; SetupError when it is not."""
    paths = sorted((p for fs, p, _ in mounts(mounts_file) if fs == "cgroup2"), key=len)
    if not paths:
        raise SetupError("cgroup v2 is not mounted (mount -t cgroup2 none /sys/fs/cgroup)")
    return pathlib.Path(paths[0])


def pids_v1_mount(mounts_file: str = PROC_MOUNTS) -> pathlib.Path | None:
    """The v1 hierarchy carrying the pids controller, if any (hybrid hosts keep pids on v1)."""
    paths = sorted((p for fs, p, opts in mounts(mounts_file) if fs == "cgroup" and "pids" in opts), key=len)
    return pathlib.Path(paths[0]) if paths else None


def cgroup_id(path: str | os.PathLike[str]) -> int:
    """The id of the cgroup directory ``path``: its inode (what bpf_get_current_cgroup_id returns)."""
    return os.stat(path).st_ino


def resolve_cgroup_id(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> int:
    """The id of the cgroup at ``path``: absolute under the v2 mount, or relative to it.

    The path comes from a worker (over the network): it is normalised, and one that leaves the
    cgroup mount (``..``, a symlink) is refused rather than stat'ed."""
    base = os.fspath(root or cgroup2_mount()).rstrip("/") or "/"
    p = os.fspath(path)
    if "\0" in p:
        raise SetupError(f"cgroup path {p!r} contains a NUL byte")
    full = p if p == base or p.startswith(base + "/") else os.path.join(base, p.lstrip("/"))
    full = os.path.realpath(full)
    if not (full == os.path.realpath(base) or full.startswith(os.path.realpath(base).rstrip("/") + "/")):
        raise SetupError(f"cgroup path {p!r} is outside the cgroup mount {base}")
    try:
        return cgroup_id(full)
    except OSError as e:
        raise SetupError(f"no cgroup at {full}: {e.strerror}") from e


def pid_cgroup_rel(pid: int | str = "self") -> str | None:
    """The v2 cgroup of ``pid`` relative to the mount ("" for the root), None without a 0:: line."""
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("0::"):
                return line[3:].strip().lstrip("/")
    return None


def pid_cgroup_path(pid: int | str = "self", root: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """The directory of ``pid``'s v2 cgroup; SetupError when it has none (v1-only host)."""
    rel = pid_cgroup_rel(pid)
    if rel is None:
        raise SetupError(f"process {pid} has no cgroup v2 membership (no 0:: line in /proc/{pid}/cgroup)")
    base = pathlib.Path(root) if root is not None else cgroup2_mount()
    return base / rel if rel else base


def pid_cgroup_id(pid: int | str = "self", root: str | os.PathLike[str] | None = None) -> int:
    """The v2 cgroup id of ``pid``; 0 when the process or its cgroup is gone."""
    try:
        return cgroup_id(pid_cgroup_path(pid, root))
    except (OSError, SetupError):
        return 0


def cgroup_paths(
    root: str | os.PathLike[str] | None = None, wanted: set[int] | None = None
) -> dict[int, str]:
    """Map cgroup ids to paths relative to the v2 root ("/" is the root itself).

    Walks the whole tree; with ``wanted``, stops as soon as every wanted id is found.
    """
    base = os.fspath(root or cgroup2_mount())
    out: dict[int, str] = {}
    for dirpath, _dirs, _files in os.walk(base):
        try:
            ino = cgroup_id(dirpath)
        except OSError:
            continue  # removed while we walked
        rel = os.path.relpath(dirpath, base)
        out[ino] = "/" if rel == "." else "/" + rel
        if wanted is not None and wanted.issubset(out):
            break
    return out


@contextlib.contextmanager
def temp_cgroup(prefix: str, parent: str | os.PathLike[str] | None = None) -> Iterator[pathlib.Path]:
    """A fresh v2 child cgroup ``<parent>/<prefix>-<random>`` (a simulated node), removed after.

    Needs root. Removal retries for a while: a process that just exited can linger in
    cgroup.procs for a moment, and rmdir fails until it is reaped.
    """
    base = pathlib.Path(parent) if parent is not None else cgroup2_mount()
    path = base / f"{prefix}-{secrets.token_hex(3)}"
    try:
        path.mkdir()
    except OSError as e:
        raise SetupError(f"cannot create cgroup {path} (root needed): {e.strerror}") from e
    try:
        yield path
    finally:
        remove_tree(path)


def remove_tree(path: pathlib.Path, tries: int = 50) -> None:
    """rmdir a cgroup and its children, deepest first (cgroupfs has no recursive remove)."""
    with contextlib.suppress(FileNotFoundError):
        for child in path.iterdir():
            if child.is_dir():
                remove_tree(child, tries)
    for _ in range(tries):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
    path.rmdir()
