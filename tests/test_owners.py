"""Claims across PID namespaces: the chart's probe pods share the node's claims directory with
host processes, and a pid read in one namespace names another process (or none) in the other."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from swarmscope.core.sys import owners

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (unshare --pid)")

CHILD = """
import pathlib, sys, time
from swarmscope.core.sys import owners
owners.OWNERS_DIR = pathlib.Path(sys.argv[1])
owners.claim("pindir", "ss-pod-probe")
print("READY", flush=True)
sys.stdin.readline()
"""


def test_a_live_owner_in_another_pid_namespace_is_not_stale(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner runs as pid 1 of its own PID namespace (as in a pod). Seen from here, pid 1 is
    init with another start time: judged by pid, its claim looked stale and its pins were swept
    from under it (the chart's probe then counted 0). Its lock keeps it while it lives, and it
    is stale once it has died."""
    monkeypatch.setattr(owners, "OWNERS_DIR", tmp_path)
    p = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", CHILD, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
        ((name, data),) = owners.claims("pindir")
        assert (name, data["pid"]) == ("ss-pod-probe", 1)
        assert data["pidns"] != owners.pid_namespace()
        assert owners.stale("pindir") == []
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.wait(timeout=30) == 0
        assert [n for n, _ in owners.stale("pindir")] == ["ss-pod-probe"]
    finally:
        if p.poll() is None:
            p.kill()


def test_a_claim_of_this_namespace_is_judged_by_pid_and_released(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(owners, "OWNERS_DIR", tmp_path)
    owners.claim("netns", "ss-here")
    ((_, data),) = owners.claims("netns")
    assert (data["pid"], data["pidns"]) == (os.getpid(), owners.pid_namespace())
    assert owners.stale("netns") == []
    (tmp_path / "netns" / "ss-gone").write_text('{"pid": 999999999, "start": "1"}')
    assert [n for n, _ in owners.stale("netns")] == ["ss-gone"]
    owners.release("netns", "ss-here")
    assert [n for n, _ in owners.claims("netns")] == ["ss-gone"]
    assert owners._held == {}


# Threads that keep locks busy (malloc, the dynamic loader's, the GIL) while the main thread
# spawns: what a preexec_fn child could inherit held. One child is spawned plainly: it must
# outlive the parent, or the test would pass on a kill that takes every child anyway.
THREADED_PARENT = """
import ctypes, json, subprocess, threading, time
from swarmscope.core.sys import owners
def busy():
    while True:
        ctypes.CDLL("libc.so.6")
        json.dumps([{"k": i} for i in range(500)])
for _ in range(4):
    threading.Thread(target=busy, daemon=True).start()
kids = [subprocess.Popen(owners.dying_with_us(["sleep", "600"])) for _ in range(20)]
plain = subprocess.Popen(["sleep", "601"])
print(*(k.pid for k in kids), plain.pid, flush=True)
time.sleep(600)
"""


def test_children_die_with_a_sigkilled_threaded_parent() -> None:
    p = subprocess.Popen([sys.executable, "-c", THREADED_PARENT], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    *kids, plain = map(int, p.stdout.readline().split())
    try:
        assert len(kids) == 20
        deadline = time.monotonic() + 10
        for k in kids:  # setpriv exec'd in place, after its prctl: the command's own argv
            while pathlib.Path(f"/proc/{k}/cmdline").read_bytes() != b"sleep\x00600\x00":
                assert time.monotonic() < deadline, f"child {k} never became sleep"
                time.sleep(0.01)
        p.kill()
        p.wait()
        deadline = time.monotonic() + 5
        while left := [k for k in kids if owners.proc_start(k) is not None]:  # a zombie is gone
            assert time.monotonic() < deadline, f"children {left} outlived their SIGKILLed parent"
            time.sleep(0.02)
        assert owners.proc_start(plain) is not None  # no pdeathsig: still there
    finally:
        if p.poll() is None:
            p.kill()
        for pid in [*kids, plain]:
            if owners.proc_start(pid) is not None:
                os.kill(pid, signal.SIGKILL)


def test_a_missing_command_is_refused_before_the_spawn(tmp_path: pathlib.Path) -> None:
    """As Popen would: FileNotFoundError, not setpriv's exit 127; looked up on the child's PATH."""
    tool = tmp_path / "ss-tool"
    tool.write_text("#!/bin/sh\necho from-tool\n")
    tool.chmod(0o755)
    with pytest.raises(FileNotFoundError):
        owners.dying_with_us(["ss-tool"])  # not on our PATH
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ.get('PATH', '')}"}
    cmd = owners.dying_with_us(["ss-tool"], env)
    assert cmd[-2:] == ["--", "ss-tool"]
    assert subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout == "from-tool\n"
