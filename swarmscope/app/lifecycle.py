"""A run's life on the machine: sweep what dead runs left, and stop in order on a signal.

    swept = sweep_stale()          # at start: {"cgroup": [...], "netns": [...], "run": [...], ...}
    with stop_on_signals():        # SIGTERM/SIGINT -> KeyboardInterrupt in the main greenlet
        run_the_sweep()            # ... whose `finally` closes the window, reads, tears down

What a process creates is claimed first (swarmscope.core.sys.owners; simulated-node cgroups keep
their own owner files) and its children die with it (PR_SET_PDEATHSIG). What survives a
SIGKILL — cgroups, network namespaces and their processes (nginx), veth links with XDP
attached, bpffs pin directories, a results row stuck at ``running`` — is swept by the next
run's start: only claims whose owner process is gone, never a live run's.

Caveats: the signal handler needs gevent (every command that runs Locust patches it in);
it acts once: a second signal during teardown is reported and ignored, so teardown finishes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from swarmscope.core.sys import owners

log = logging.getLogger(__name__)


def _netns_pids(name: str) -> list[int]:
    r = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=30)
    return [int(x) for x in r.stdout.split() if x.isdigit()]


def _sweep_netns(name: str) -> None:
    """Kill what still runs in the namespace (orphaned nginx workers), then delete it."""
    for _ in range(50):
        pids = _netns_pids(name)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        import time

        time.sleep(0.05)
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def _mark_interrupted(run_id: str, data: dict[str, Any]) -> bool:
    from swarmscope.controller.store import RUNNING, ResultStore

    db = data.get("db")
    if not db or not os.path.exists(db):
        return False
    with ResultStore(db) as store:
        if store.has_run(run_id) and store.load_run(run_id).status == RUNNING:
            store.finish_run(run_id, "interrupted")
            return True
    return False


def sweep_stale() -> dict[str, list[str]]:
    """Remove what runs whose process is gone left behind; mark their results ``interrupted``."""
    from swarmscope.workers.nodes import cleanup_stale

    swept: dict[str, list[str]] = {k: [] for k in ("cgroup", *owners.KINDS)}
    for name, data in owners.stale("run"):
        try:
            if _mark_interrupted(name, data):
                swept["run"].append(name)
        except Exception as e:  # a corrupt or foreign database must not stop this run
            log.warning("cannot mark run %s interrupted in %s: %s", name, data.get("db"), e)
        owners.release("run", name)
    for name, _ in owners.stale("netns"):
        _sweep_netns(name)
        swept["netns"].append(name)
        owners.release("netns", name)
    for name, _ in owners.stale("link"):
        r = subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=30)
        if r.returncode == 0:  # usually gone with its namespace's peer already
            swept["link"].append(name)
        owners.release("link", name)
    for name, data in owners.stale("pindir"):
        path = data.get("path", "")
        if path.startswith("/sys/fs/bpf/"):
            shutil.rmtree(path, ignore_errors=True)
            swept["pindir"].append(name)
        owners.release("pindir", name)
    swept["cgroup"] = cleanup_stale()
    found = {k: v for k, v in swept.items() if v}
    if found:
        print(f"swarmscope: swept what earlier runs left: {found}", file=sys.stderr)
    return found


# Every stop signal this process took, whichever door's handler took it (stop_on_signals,
# swarmscope.app.plugin's, the CLI's before either): a run-once controller whose run one ended
# exits after it instead of idling (swarmscope.app.commands.roles), since a pod is stopped once.
STOPS: list[int] = []


class Signals:
    """What ``stop_on_signals`` received; ``disarm()`` before teardown so a late signal cannot
    cut it short (it is then only recorded)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.armed = True

    def disarm(self) -> None:
        self.armed = False


@contextlib.contextmanager
def stop_on_signals(sigs: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[Signals]:
    """Inside the block, the first SIGTERM/SIGINT raises KeyboardInterrupt in this (main)
    greenlet, wherever it waits; later ones, or any once disarmed, are only recorded so the
    teardown finishes."""
    import gevent

    main = gevent.getcurrent()
    state = Signals()

    def handler(sig: int) -> None:
        state.received.append(sig)
        STOPS.append(sig)
        if state.armed and len(state.received) == 1:
            print(f"swarmscope: {signal.Signals(sig).name}: stopping in order", file=sys.stderr)
            gevent.kill(main, KeyboardInterrupt)  # delivered in the main greenlet, not the hub
        else:
            print("swarmscope: still tearing down, please wait", file=sys.stderr)

    handles = [gevent.signal_handler(s, handler, s) for s in sigs]
    try:
        yield state
    finally:
        for h in handles:
            h.cancel()
