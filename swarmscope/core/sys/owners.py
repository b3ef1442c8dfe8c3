"""Who owns what a run leaves on the machine, so a later run can sweep what a dead one left.

    owners.claim("netns", "ss-ingress-1a2b")          # before `ip netns add`
    ...
    owners.release("netns", "ss-ingress-1a2b")        # after it is deleted
    for kind, name, data in owners.stale(): ...       # claims whose process is gone
    subprocess.Popen(owners.dying_with_us(cmd))       # SIGKILLed when we die

A claim is a file ``/run/swarmscope/owners/<kind>/<name>`` holding JSON: the owner's pid and
its start time (so a reused pid is not mistaken for the owner) plus what the sweep needs
(``db`` for a run). Kinds: ``run`` (a results row to mark ``interrupted``), ``netns``, ``link``
(deleting a link also detaches its XDP program), ``pindir`` (bpffs pins). Simulated-node
cgroups keep their own owner files (workers/nodes.py) and are swept by their own
``cleanup_stale``. Caveats: Linux only; /run is tmpfs, so claims do not outlive a reboot
(neither do the things they claim).

Claims are shared across PID namespaces (the chart's probe pods mount the node's
``/run/swarmscope/owners``), where a pid means nothing: a claim records its owner's PID
namespace, and its owner holds an flock on the claim file for as long as it lives. A claim of
this PID namespace is judged by pid and start time; one of another by the lock alone (the
kernel drops it when the owner dies, whatever namespace looks).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import os
import pathlib
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

OWNERS_DIR = pathlib.Path("/run/swarmscope/owners")
KINDS = ("run", "netns", "link", "pindir")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,127}$")
_held: dict[pathlib.Path, int] = {}  # claim file -> the fd whose flock says its owner lives


def pid_namespace() -> str:
    """This process's PID namespace, e.g. ``pid:[4026531836]``."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


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
    body = dict(data, pid=os.getpid(), start=proc_start(os.getpid()), pidns=pid_namespace())
    tmp = p.with_name(f".{p.name}.{os.getpid()}")
    tmp.write_text(json.dumps(body))
    fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_SH)  # held until release() or death: the other namespaces' test
    os.replace(tmp, p)
    old = _held.pop(p, None)
    _held[p] = fd
    if old is not None:
        os.close(old)


def release(kind: str, name: str) -> None:
    p = _path(kind, name)
    with contextlib.suppress(OSError):
        p.unlink()
    fd = _held.pop(p, None)
    if fd is not None:
        os.close(fd)


def _locked(p: pathlib.Path) -> bool:
    """Whether a live process holds the claim file's lock (its owner, in any PID namespace)."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _owner_alive(p: pathlib.Path, d: dict[str, Any]) -> bool:
    ns = d.get("pidns")
    if ns and ns != pid_namespace():  # its pid names some other process here, or none
        return _locked(p)
    return alive(int(d.get("pid", 0) or 0), d.get("start"))


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
    return [(n, d) for n, d in claims(kind) if not _owner_alive(OWNERS_DIR / kind / n, d)]


def dying_with_us(
    cmd: Sequence[str], env: Mapping[str, str] | None = None, default_sigint: bool = False
) -> list[str]:
    """``cmd`` prefixed so the kernel SIGKILLs it when this process dies, even by SIGKILL.

    util-linux ``setpriv --pdeathsig KILL`` sets PR_SET_PDEATHSIG and execs ``cmd`` in place
    (same pid, the command's own argv; the signal survives an exec that does not raise
    privileges, so ``ip netns exec`` and ``nsenter`` keep it). Unlike a ``preexec_fn``, which
    is unsafe in a threaded process (a lock another thread held at the fork stays held) and
    forces fork() over vfork(), the stdlib Popen then runs no Python in the child. (gevent's
    Popen, in a monkey-patched Locust process, forks and execs in Python whatever we pass.)
    PR_SET_PDEATHSIG follows the spawning *thread*: spawn from a long-lived one.

    ``env`` is the child's environment if it is not ours: ``cmd[0]`` is looked up on its PATH
    here, so a missing command still raises FileNotFoundError from Popen's caller rather than
    becoming setpriv's exit 127.

    ``default_sigint``: ``cmd`` starts with SIGINT at its default action even if this process
    ignores it, for a child that is stopped with SIGINT. A process started in the background by
    a non-interactive shell (``nohup swarmscope run … &``, some CI runners) inherits SIGINT
    ignored and passes that on through fork and exec; a child that sets no handler of its own (a
    script, Python) would then ignore its stop. coreutils ``env --default-signal`` resets it
    (coreutils 8.31+; Debian 12 has 9.1)."""
    if not cmd:
        raise ValueError("an empty command")
    if shutil.which(cmd[0], path=os.pathsep.join(os.get_exec_path(env))) is None:
        raise FileNotFoundError(errno.ENOENT, "no such executable", cmd[0])
    reset = [_system_tool("env", "coreutils"), "--default-signal=INT", "--"] if default_sigint else []
    return [_system_tool("setpriv", "util-linux"), "--pdeathsig", "KILL", "--", *reset, *cmd]


@functools.cache
def _system_tool(name: str, package: str) -> str:
    """The path of a base-system command (looked up on PATH, then /usr/bin:/bin)."""
    path = shutil.which(name) or shutil.which(name, path="/usr/bin:/bin")
    if path is None:
        raise FileNotFoundError(errno.ENOENT, f"{name} ({package}) is not installed", name)
    return path
