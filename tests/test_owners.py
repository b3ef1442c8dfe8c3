"""Claims across PID namespaces: the chart's probe pods share the node's claims directory with
host processes, and a pid read in one namespace names another process (or none) in the other."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

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
