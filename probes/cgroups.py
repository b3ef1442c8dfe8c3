"""cgroup v2 helpers for the probe: where v2 is mounted, and id -> path resolution.

    root = cgroup2_mount()          # "/sys/fs/cgroup/unified" here, "/sys/fs/cgroup" on most
    paths = cgroup_paths(root)      # {inode (= bpf cgroup id): "/swarmscope/n1", ...}

Caveats: a cgroup id is the directory's inode number on the v2 mount, which is what
``bpf_get_current_cgroup_id()`` returns. A cgroup removed since it was counted no longer
resolves; callers show its id alone.
"""

from __future__ import annotations

import os

from swarmscope.errors import SetupError

PROC_MOUNTS = "/proc/mounts"


def cgroup2_mount(mounts_file: str = PROC_MOUNTS) -> str:
    """The first cgroup2 mount point in /proc/mounts; SetupError when there is none."""
    try:
        with open(mounts_file, encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 3 and parts[2] == "cgroup2":
                    # /proc/mounts escapes spaces etc. as octal (\040).
                    return parts[1].encode().decode("unicode_escape")
    except OSError as e:
        raise SetupError(f"cannot read {mounts_file}: {e.strerror}") from e
    raise SetupError("no cgroup v2 mount found in /proc/mounts (mount -t cgroup2 none /sys/fs/cgroup)")


def cgroup_paths(root: str | None = None, wanted: set[int] | None = None) -> dict[int, str]:
    """Map cgroup ids to paths relative to the v2 root ("/" is the root itself).

    Walks the whole tree; with ``wanted``, stops as soon as every wanted id is found.
    """
    root = root or cgroup2_mount()
    out: dict[int, str] = {}
    for dirpath, _dirs, _files in os.walk(root):
        try:
            ino = os.stat(dirpath).st_ino
        except OSError:
            continue  # removed while we walked
        rel = os.path.relpath(dirpath, root)
        out[ino] = "/" if rel == "." else "/" + rel
        if wanted is not None and wanted.issubset(out):
            break
    return out


def resolve_cgroup_id(path: str, root: str | None = None) -> int:
    """The id of the cgroup at ``path``: absolute under the v2 mount, or relative to it."""
    root = (root or cgroup2_mount()).rstrip("/") or "/"
    full = path if path == root or path.startswith(root + "/") else os.path.join(root, path.lstrip("/"))
    try:
        return os.stat(full).st_ino
    except OSError as e:
        raise SetupError(f"no cgroup at {full}: {e.strerror}") from e
