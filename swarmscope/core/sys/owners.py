"""Who owns what a run leaves on the machine, so a later run can sweep what a dead one left.

    owners.claim("netns", "ss-ingress-1a2b")          # before `ip netns add`
    ...
    owners.release("netns", "ss-ingress-1a2b")        # after it is deleted
    for kind, name, data in owners.stale(): ...       # claims whose process is gone
    subprocess.Popen(cmd, preexec_fn=owners.die_with_parent)   # SIGKILL when we die

A claim is a file ``/run/swarmscope/owners/<kind>/<name>`` holding JSON: the owner's pid and
its start time (so a reused pid is not mistaken for the owner) plus what the sweep needs
(``db`` for a run). Kinds: ``run`` (a results row to mark ``interrupted``), ``netns``, ``link``
(deleting a link also detaches its XDP program), ``pindir`` (bpffs pins). Simulated-node
cgroups keep their own owner files (workers/nodes.py) and are swept by their own
``cleanup_stale``. Caveats: Linux only; /run is tmpfs, so claims do not outlive a reboot
(neither do the things they claim).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pathlib
import re
import signal
from collections.abc import Iterator
from typing import Any

OWNERS_DIR = pathlib.Path("/run/swarmscope/owners")
KINDS = ("run", "netns", "link", "pindir")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,127}$")
_PR_SET_PDEATHSIG = 1


def proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22 of /proc/<pid>/stat), None if gone.

    A zombie (state Z or X: dead, not yet reaped) is gone: a process SIGKILLed with its parent
    stays one until init reaps it, and what it owned is already free to sweep."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # counted after the ")" closing comm
    return None if fields[0] in ("Z", "X") else fields[19]


def alive(pid: int, start: str | None) -> bool:
    return start is not None and proc_start(pid) == start


def _path(kind: str, name: str) -> pathlib.Path:
    if kind not in KINDS:
        raise ValueError(f"owner kind must be one of {KINDS}, not {kind!r}")
    if not _NAME_RE.match(name):
        raise ValueError(f"invalid owned name {name!r}")
    return OWNERS_DIR / kind / name


def claim(kind: str, name: str, **data: Any) -> None:
    """Record that this process owns ``name`` (before creating it: a crash right after the
    creation must still leave a claim to sweep)."""
    p = _path(kind, name)
    p.parent.mkdir(parents=True, exist_ok=True)
    body = dict(data, pid=os.getpid(), start=proc_start(os.getpid()))
    tmp = p.with_name(f".{p.name}.{os.getpid()}")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, p)


def release(kind: str, name: str) -> None:
    with contextlib.suppress(OSError):
        _path(kind, name).unlink()


def claims(kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    d = OWNERS_DIR / kind
    if not d.is_dir():
        return
    for p in sorted(d.iterdir()):
        if p.name.startswith(".") or not _NAME_RE.match(p.name):
            continue
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):
            data = {}
        yield p.name, data


def stale(kind: str) -> list[tuple[str, dict[str, Any]]]:
    """Claims of ``kind`` whose owner process is gone."""
    return [(n, d) for n, d in claims(kind) if not alive(int(d.get("pid", 0) or 0), d.get("start"))]


def die_with_parent() -> None:
    """``preexec_fn`` for children: the kernel SIGKILLs them when this process dies, even by
    SIGKILL (PR_SET_PDEATHSIG). It follows the forking *thread*: spawn from a long-lived one."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
