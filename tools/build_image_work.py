"""The image builder's work directories: its children and mounts cleaned up, its cache bounded.

    with WorkDir(CACHE) as wd:          # CACHE/swarmscope-image.XXXX, owner pid recorded
        wd.run(["mmdebstrap", ...])      # a child in its own process group, killed on SIGTERM
    sweep_stale(CACHE)                   # at start: dirs whose builder died (SIGKILL), cleaned
    prune(CACHE, "swarmscope-*.tar", keep=4)

Why: a killed tools/build_image.py (a pytest timeout, Ctrl-C) left mmdebstrap running and
/proc, /sys and their submounts mounted under its temp dir. SIGTERM/SIGINT now unwind through
WorkDir's exit: the child's process group gets SIGTERM, then SIGKILL after GRACE_S, every
mount under the dir is lazily unmounted, and the dir is removed. A SIGKILL cannot be caught:
the next build's sweep_stale() does the same for any work dir whose recorded owner is gone.

Caveats: root only (umount, kill). A process is tied to a work dir by its root, cwd or command
line naming the dir; one that left all three behind is not found. Every wait is bounded.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, TracebackType

PREFIX = "swarmscope-image."
OWNER = "owner.pid"
GRACE_S = 10.0  # SIGTERM -> SIGKILL for a child that ignores SIGTERM
MAX_STALE = 20  # work dirs swept per start (bounded, even after many killed builds)
# A work dir without an owner file is from a builder before this one (another branch's build may
# be running in it right now): swept only when idle this long with nothing running in it.
LEGACY_IDLE_S = 3 * 3600.0


class Interrupted(Exception):
    """SIGTERM/SIGINT arrived while building: unwinds to WorkDir's cleanup."""


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _owner_alive(d: Path) -> bool:
    try:
        pid, start = (d / OWNER).read_text().split()
        return _start_time(int(pid)) == start
    except (OSError, ValueError):
        return False


def _start_time(pid: int) -> str:
    # field 22 of /proc/PID/stat: a reused pid has another start time
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[19]


def processes_under(d: Path) -> list[int]:
    """Pids whose root, cwd or command line is inside d (a chroot'd apt, mmdebstrap itself)."""
    prefix, out = f"{d}/", []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            paths = [os.readlink(p / "root"), os.readlink(p / "cwd")]
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(x == str(d) or x.startswith(prefix) for x in paths) or prefix in cmd or f"{d} " in cmd:
            out.append(int(p.name))
    return out


def kill_all(pids: Sequence[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM, wait up to grace_s for them to exit, then SIGKILL the rest."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.1)


def mounts_under(d: Path) -> list[str]:
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(f"{d}/")
    ]


def clean(d: Path) -> None:
    """Kill what runs in d, unmount what is mounted under it (deepest first), remove it."""
    kill_all(processes_under(d))
    for _ in range(3):  # bounded: a lazy unmount can reveal a mount stacked below it
        mounts = mounts_under(d)
        if not mounts:
            break
        for m in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", m], check=False, capture_output=True)
    if not mounts_under(d):  # never rm -rf through a mount (it would empty the host's /sys)
        shutil.rmtree(d, ignore_errors=True)


def _stale(d: Path) -> bool:
    if (d / OWNER).exists():
        return not _owner_alive(d)
    return time.time() - d.stat().st_mtime > LEGACY_IDLE_S and not processes_under(d)


def sweep_stale(cache: Path) -> list[Path]:
    """Clean the work dirs of builders that died without cleaning up; return them."""
    stale = [d for d in sorted(cache.glob(f"{PREFIX}*")) if d.is_dir() and _stale(d)]
    for d in stale[:MAX_STALE]:
        clean(d)
    return stale[:MAX_STALE]


def prune(cache: Path, pattern: str, keep: int) -> list[Path]:
    """Remove all but the `keep` most recently used entries matching pattern; return them."""
    entries = sorted(cache.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
    for p in entries[keep:]:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return entries[keep:]


class WorkDir:
    """A temp dir under cache that is cleaned on exit, on SIGTERM/SIGINT, or by the next start."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.path = Path()
        self._old: dict[int, object] = {}

    def __enter__(self) -> WorkDir:
        self.path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=self.cache))
        (self.path / OWNER).write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old[sig] = signal.signal(sig, _raise)
        return self

    def run(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Run a child in its own process group; on any exception, the group is killed."""
        p = subprocess.Popen(argv, env=env, start_new_session=True)
        try:
            rc = p.wait()
        except BaseException:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(GRACE_S)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                kill_all([p.pid], 0.0)
            raise
        if rc != 0:
            raise subprocess.CalledProcessError(rc, argv)

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        # A second signal during cleanup must not cut it short.
        for sig in self._old:
            signal.signal(sig, signal.SIG_IGN)
        try:
            clean(self.path)
        finally:
            for sig, old in self._old.items():
                signal.signal(sig, old)  # type: ignore[arg-type]
