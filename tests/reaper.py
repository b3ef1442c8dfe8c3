"""What a pytest run's tests left on this machine, removed at the session's end (conftest.py).

    os.environ[reaper.MARK] = str(os.getpid())    # pytest_configure: every child inherits it
    for line in reaper.reap(os.getpid(), basetemp): print(line)   # pytest_sessionfinish

- processes: every process whose environment carries ``MARK=<this pytest's pid>`` (the run's
  descendants, also those a test started in a session of their own and lost: the controller of
  an aborted Ctrl-C run), and every process in a cgroup of this run's real nodes (``/ssrn<pid>*``,
  the kubelets' cgroup roots: pods whose shim died); SIGTERM, then SIGKILL after GRACE_S;
- the real nodes' state (tests/realnode.py names everything ``ssrn<pid>…``): mounts under
  ``/run/ssrn<pid>*`` (containerd state, runc root, pod network namespaces) and under the run's
  basetemp (kubelet volumes), deepest first; then those dirs, the network namespaces, the
  cgroups and the bridges (``ssbr<pid>*``).

A clean run reaps nothing: every line returned is something a test or fixture failed to remove.
Caveats: a child started with an environment of its own making (``env={...}`` without
``os.environ``) carries no mark and is found only through its cgroup, if at all.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

MARK = "SWARMSCOPE_TEST_RUN"
GRACE_S = 5.0


def reap(pid: int, basetemp: Path | None = None) -> list[str]:
    """Remove what the run of pytest ``pid`` left; one line per thing removed."""
    prefix = f"ssrn{pid}"
    done = _processes(pid, prefix)
    roots = [str(p) for p in _named(Path("/run"), prefix)] + ([str(basetemp)] if basetemp else [])
    for m in sorted((m for m in _mounts() if any(_under(m, r) for r in roots)), key=len, reverse=True):
        if subprocess.run(["umount", m], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", m], capture_output=True)
        done.append(f"mount {m}")
    for ns in _named(Path("/run/netns"), prefix):
        subprocess.run(["ip", "netns", "del", ns.name], capture_output=True)
        done.append(f"netns {ns.name}")
    for link in _named(Path("/sys/class/net"), f"ssbr{pid}"):
        subprocess.run(["ip", "link", "del", link.name], capture_output=True)
        done.append(f"bridge {link.name}")
    for h in _cgroup_hierarchies():
        for cg in _named(h, prefix):
            for sub in sorted((p for p in cg.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                cg.rmdir()
            done.append(f"cgroup {cg}")
    for d in _named(Path("/run"), prefix):
        subprocess.run(["rm", "-rf", "--one-file-system", str(d)], capture_output=True)
        done.append(f"dir {d}")
    return done


def _named(d: Path, prefix: str) -> list[Path]:
    """The entries of ``d`` named ``prefix`` or ``prefix-…``: this run's, not those of a run whose
    pid merely starts with this one's digits (ssrn123 is not ssrn1234's)."""
    return [p for p in d.glob(f"{prefix}*") if p.name == prefix or p.name.startswith(f"{prefix}-")]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _processes(pid: int, prefix: str) -> list[str]:
    mark = f"{MARK}={pid}".encode()
    found: dict[int, str] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) in (pid, os.getpid()):
            continue
        with contextlib.suppress(OSError):
            cgroups = [ln.split(":", 2)[2] for ln in (p / "cgroup").read_text().splitlines()]
            if mark in (p / "environ").read_bytes().split(b"\0") or any(
                _under(c, f"/{prefix}") or c.startswith(f"/{prefix}-") for c in cgroups
            ):
                found[int(p.name)] = (
                    (p / "cmdline").read_bytes().replace(b"\0", b" ")[:100].decode(errors="replace")
                )
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for child in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, sig)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and any(_alive(c) for c in found):
            time.sleep(0.1)
    return [f"process {p} {cmd}" for p, cmd in sorted(found.items())]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has exited: only its parent's wait is missing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _mounts() -> list[str]:
    return [
        ln.split()[4].replace("\\040", " ") for ln in Path("/proc/self/mountinfo").read_text().splitlines()
    ]


def _cgroup_hierarchies() -> list[Path]:
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _dev, mnt, fstype, *_ = line.split()
        if fstype in ("cgroup", "cgroup2") and mnt.startswith("/sys/fs/cgroup"):
            out.append(Path(mnt))
    return out
