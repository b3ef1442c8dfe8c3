"""Whether a file or directory could have been put there by someone else, and safe writes.

    from swarmscope.core.sys.trust import untrusted, check_tool, atomic_write, make_run_dir
    why = untrusted(Path("/var/cache/swarmscope/tools/k6-v1.8.1/k6"))  # None, or the reason
    check_tool(path, "k6")                # SetupError unless root (or we) own it and its dirs
    atomic_write("results/run/report.json", data)   # never through a symlink, never half-written
    run_dir = make_run_dir("results", run_id)       # fresh, 0750, in an --out no one else owns

The rule (one for every cache, ``--out`` and the run directories): the path and every directory
above it are owned by root or by this user, are not symlinks, and are writable by nobody else —
a sticky directory above (``/tmp``) excepted, since there others cannot replace what we made.
What we run as root from a cache, or write into as root, passes it; anything else is refused
with the reason (the cache can be moved with ``$SWARMSCOPE_CACHE``, so its location proves
nothing). ``--out`` is held to the owners-and-symlinks half of it only: a shared results
volume (a pod's emptyDir is mode 0777) is fine, because every run writes into a directory it
has just created (0750) and every file through a fresh temporary name renamed into place.

Caveat: a check, then a use: it closes the doors another user has, not a race with root.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from swarmscope.core.errors import ResultsError, SetupError


def untrusted(path: str | os.PathLike[str], modes: bool = True) -> str | None:
    """Why ``path`` (or a directory above it) may hold another user's file; None when it cannot.
    ``modes=False`` checks owners and symlinks only (``--out``, below)."""
    me = os.geteuid()
    p = Path(os.path.abspath(path))
    for i, q in enumerate([p, *p.parents]):
        try:
            st = q.lstat()
        except OSError as e:
            return f"{q}: {e.strerror or e}"
        if stat.S_ISLNK(st.st_mode):
            return f"{q} is a symlink"
        if st.st_uid not in (0, me):
            return f"{q} is owned by uid {st.st_uid}, not root" + ("" if me == 0 else f" or uid {me}")
        if modes and st.st_mode & 0o022 and not (i > 0 and st.st_mode & stat.S_ISVTX):
            who = "others" if st.st_mode & 0o002 else "its group"
            return f"{q} is writable by {who} (mode {st.st_mode & 0o7777:o})"
    return None


def trusted(path: str | os.PathLike[str]) -> bool:
    return untrusted(path) is None


def check_tool(path: str | os.PathLike[str], what: str) -> str:
    """``path`` when it is safe to execute (see the module doc), else a SetupError saying why."""
    why = untrusted(path)
    if why is not None:
        raise SetupError(f"refusing to run {what} from {path}: {why}; rebuild it where only root can write")
    return os.fspath(path)


def atomic_write(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """``data`` into ``path`` through a fresh temporary file renamed over it, fsynced with its
    directory: a crash leaves the old file or the new one, and a symlink or hard link planted at
    ``path`` (or at any name the writer might have used) is replaced, never written through."""
    path = os.fspath(path)
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=d)  # O_CREAT|O_EXCL
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)  # the rename itself is durable only once the directory is
    finally:
        os.close(dfd)


def open_append(path: str | os.PathLike[str], mode: int = 0o640) -> int:
    """An fd appending to ``path``, created if missing; a symlink there is refused (ELOOP)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def make_run_dir(out: str | os.PathLike[str], run_id: str) -> str:
    """``<out>/<run_id>``, created fresh with mode 0750 (``out`` too when missing); ResultsError
    when ``out`` or a directory above it is a symlink or another user's, or the run dir exists."""
    out = os.path.abspath(out)
    run_dir = os.path.join(out, run_id)
    try:
        os.makedirs(out, mode=0o750, exist_ok=True)
        why = untrusted(out, modes=False)
        if why is not None:
            raise ResultsError(f"out: refusing {out}: {why} (root would write where another user points)")
        os.mkdir(run_dir, 0o750)  # never an existing one: nobody can have planted files inside
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                raise ResultsError(f"out: {run_dir} was replaced while it was created")
        finally:
            os.close(fd)
    except OSError as e:  # e.g. --out /proc/x: one clear error, not a traceback
        raise ResultsError(f"out: cannot create the run directory {run_dir}: {e.strerror or e}") from e
    return run_dir


def check_store(path: str | os.PathLike[str]) -> None:
    """A results database (and its -wal/-shm/-journal files) that is not a symlink: SQLite opens
    them following links and may write them (as root) even to read a run."""
    for name in (os.fspath(path), *(f"{os.fspath(path)}-{x}" for x in ("wal", "shm", "journal"))):
        if os.path.islink(name):
            raise ResultsError(f"refusing the results store {name}: it is a symlink")
