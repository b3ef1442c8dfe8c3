"""A killed image build leaves no process, mount or work dir behind; its cache stays bounded.

    .venv/bin/python -m pytest tests/test_image_build_cleanup.py

tools/build_image.py runs for real against a throw-away $SWARMSCOPE_CACHE, with a stand-in
mmdebstrap first on PATH that does what the real one does to the host while it works: it
mounts a tmpfs under its TMPDIR (the real one mounts /proc and /sys there) and keeps running.
SIGTERM and SIGINT must stop the build with both gone; a SIGKILL leaves them, and the next
start (`--clean`, which every build runs first) must remove them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_image  # noqa: E402
import build_image_work  # noqa: E402

FAKE = """#!/bin/sh
mkdir -p "$TMPDIR/proc" && mount -t tmpfs swarmscope-test "$TMPDIR/proc"
echo $$ > "$FAKE_PIDFILE"
sleep 300
"""


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def start(tmp: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    """build_image.py until the stand-in mmdebstrap has mounted and is running."""
    cache = tmp / "cache"
    (cache / "wheels" / build_image.wheel_key(ROOT)).mkdir(parents=True, exist_ok=True)
    (cache / "wheels" / build_image.wheel_key(ROOT) / ".complete").touch()  # no pip download
    (tmp / "bin").mkdir(exist_ok=True)
    (tmp / "bin" / "mmdebstrap").write_text(FAKE)
    (tmp / "bin" / "mmdebstrap").chmod(0o755)
    pidfile = tmp / "fake.pid"
    pidfile.unlink(missing_ok=True)
    env = {**os.environ, "SWARMSCOPE_NO_BUILD": "", "SWARMSCOPE_CACHE": str(cache),
           "FAKE_PIDFILE": str(pidfile), "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}"}  # fmt: skip
    # its own session: a SIGINT here reaches the builder only, as a Ctrl-C reaches a foreground job
    p = subprocess.Popen([sys.executable, str(ROOT / "tools" / "build_image.py")], env=env,
                         stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert p.poll() is None and time.monotonic() < deadline, "the stand-in mmdebstrap never started"
        time.sleep(0.05)
    return p, int(pidfile.read_text()), cache / "images"


def leftovers(images: Path) -> tuple[list[str], list[Path]]:
    return build_image_work.mounts_under(images), sorted(images.glob("swarmscope-image.*"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_the_build_and_cleans_up(tmp_path: Path, sig: signal.Signals) -> None:
    p, fake, images = start(tmp_path)
    try:
        assert len(leftovers(images)[0]) == 1 and alive(fake)  # the state a kill used to leave
        p.send_signal(sig)
        assert p.wait(30) == 128 + sig.value
        assert not alive(fake)
        assert leftovers(images) == ([], [])
    finally:
        p.kill()
        build_image_work.clean(images)


@pytest.mark.slow
def test_next_start_cleans_what_a_sigkill_left(tmp_path: Path) -> None:
    p, fake, images = start(tmp_path)
    try:
        p.kill()  # cannot be caught: child and mount stay
        p.wait(10)
        mounts, dirs = leftovers(images)
        assert len(mounts) == 1 and len(dirs) == 1 and alive(fake)
        env = {**os.environ, "SWARMSCOPE_CACHE": str(tmp_path / "cache")}
        r = subprocess.run([sys.executable, str(ROOT / "tools" / "build_image.py"), "--clean"], env=env,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert f"cleaned {dirs[0]} (its builder was killed)" in r.stderr
        assert not alive(fake)
        assert leftovers(images) == ([], [])
    finally:
        build_image_work.clean(images)


def test_a_live_builders_work_dir_is_not_swept(tmp_path: Path) -> None:
    with build_image_work.WorkDir(tmp_path) as w:
        # an older builder's dir (no owner file), busy a minute ago: maybe running, left alone
        legacy = tmp_path / f"{build_image_work.PREFIX}legacy"
        legacy.mkdir()
        os.utime(legacy, (time.time() - 60, time.time() - 60))
        assert build_image_work.sweep_stale(tmp_path) == []
        assert w.path.is_dir() and legacy.is_dir()
        idle = time.time() - build_image_work.LEGACY_IDLE_S - 60
        os.utime(legacy, (idle, idle))
        assert build_image_work.sweep_stale(tmp_path) == [legacy]
    assert not w.path.exists() and not legacy.exists()


def test_prune_keeps_the_most_recently_used(tmp_path: Path) -> None:
    for i in range(7):
        f = tmp_path / f"swarmscope-{i}.tar"
        f.write_text(str(i))
        os.utime(f, (1000 + i, 1000 + i))
    os.utime(tmp_path / "swarmscope-0.tar")  # reused just now: the most recent
    removed = build_image_work.prune(tmp_path, "swarmscope-*.tar", build_image.KEEP_ARCHIVES)
    assert sorted(f.name for f in tmp_path.iterdir()) == [
        "swarmscope-0.tar", "swarmscope-4.tar", "swarmscope-5.tar", "swarmscope-6.tar"]  # fmt: skip
    assert sorted(f.name for f in removed) == ["swarmscope-1.tar", "swarmscope-2.tar", "swarmscope-3.tar"]
