"""The session-end reaper (tests/reaper.py) removes what a run left, and only that run's.

Run as a run of a pytest pid that cannot exist (above pid_max), so nothing of a real run here or
of another one on the machine is touched: a lost process of that run in a session of its own, a
mount and a directory under /run/ssrn<pid>*, a cgroup of its node.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import reaper

pytestmark = [pytest.mark.root]

PID = 99999999  # above any pid_max (2^22): no real pytest has it


def test_reaps_a_lost_process_and_a_nodes_state_and_nothing_else() -> None:
    env = {**os.environ, reaper.MARK: str(PID)}
    lost = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    # Another run's: the same mark with another pid, and no mark at all.
    other = subprocess.Popen(["sleep", "300"], env={**os.environ, reaper.MARK: str(PID + 1)})
    bare = subprocess.Popen(["sleep", "300"], env={k: v for k, v in os.environ.items() if k != reaper.MARK})
    state = Path(f"/run/ssrn{PID}-0/state")
    state.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "ss-reaper-test", str(state)], check=True)
    keep = Path(f"/run/ssrn{PID + 1}-0")
    keep.mkdir()
    # A run whose pid starts with this one's digits (pids wrap at 32768 here: 3127 and 31270).
    longer = Path(f"/run/ssrn{PID}0-0")
    longer.mkdir()
    cgroup = next(p for p in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")) if p.is_dir())
    (cgroup / f"ssrn{PID}-0" / "kubepods").mkdir(parents=True)
    try:
        done = reaper.reap(PID)
        assert lost.wait(10) == -15  # SIGTERM was enough
        assert (other.poll(), bare.poll()) == (None, None)
        assert done == [
            f"process {lost.pid} sleep 300 ",
            f"mount {state}",
            f"cgroup {cgroup / f'ssrn{PID}-0'}",
            f"dir /run/ssrn{PID}-0",
        ]
        assert not state.parent.exists() and not (cgroup / f"ssrn{PID}-0").exists()
        assert str(state) not in Path("/proc/self/mountinfo").read_text()
        assert keep.is_dir() and longer.is_dir()
        assert reaper.reap(PID) == []  # a clean run reaps nothing
    finally:
        for p in (lost, other, bare):
            p.kill()
            p.wait()
        subprocess.run(["umount", str(state)], capture_output=True)
        dirs = [str(state.parent), str(keep), str(longer)]
        subprocess.run(["rm", "-rf", "--one-file-system", *dirs], check=True)
        for d in (cgroup / f"ssrn{PID}-0" / "kubepods", cgroup / f"ssrn{PID}-0"):
            if d.exists():
                d.rmdir()
