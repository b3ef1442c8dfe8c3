"""Registry program ``neigh_netlink``: RTM_NEWNEIGH / RTM_DELNEIGH notifications per interface.

    prog = NeighNetlink(netns="ss-test-x")        # or get_program("neigh_netlink") (env below)
    prog.load()                                   # bound to RTMGRP_NEIGH before it returns
    prog.snapshot()   # {0: {"netlink.newneigh": n, "netlink.delneigh": m,
                      #      "netlink.newneigh.dev.eth0": ..., "netlink.delneigh.dev.eth0": ...}}
    prog.close()

The user-space view of the neighbor table, next to the tracepoint view of ``neigh_events``: a
pyroute2 ``AsyncIPRoute`` bound to the RTMGRP_NEIGH multicast group, read by its own asyncio
loop in a thread (pyroute2 0.9 sockets belong to the loop that made them). Settings:
``$SWARMSCOPE_NEIGH_NETNS`` (a named netns, /run/netns/<name>; unset = the probe's own) and
``$SWARMSCOPE_NEIGH_FAMILY`` (``inet`` default, or ``all``), shared with ``neigh_events``.

Caveats: notifications carry no sender, so every count is under cgroup key 0 (host total; a
node with a cgroup id gets none). The kernel queues a notification inside the writer's
sendmsg(), but the reader thread consumes it a moment later: a snapshot waits until the count
has been still for ``settle_s`` (at most ``max_settle_s``). A receive-buffer overflow (ENOBUFS)
is counted as ``netlink.errors``, so a window with errors is incomplete. One ``ip neigh add``
is one RTM_NEWNEIGH; one ``ip neigh del`` is an RTM_NEWNEIGH (the entry marked failed) and
an RTM_DELNEIGH. Interface names are
resolved once, at the first snapshot that sees the index; a vanished one stays ``if<index>``.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import threading
import time
from collections import Counter
from typing import Any

from swarmscope.core.config import Field
from swarmscope.core.errors import ProbeError
from swarmscope.probes.programs.base import Snapshot
from swarmscope.probes.programs.neigh_events import ENV_FAMILY
from swarmscope.probes.programs.params import startup_values

ENV_NETNS = "SWARMSCOPE_NEIGH_NETNS"
PARAMS = [
    Field(
        "neigh_netlink.netns",
        str,
        None,
        "named netns to listen in (unset = the probe's own)",
        ENV_NETNS,
        nullable=True,
    ),
    Field(
        "neigh_netlink.family", str, "inet", "inet (IPv4 only) or all", ENV_FAMILY, choices=("inet", "all")
    ),
]
WINDOW_PARAMS: frozenset[str] = frozenset()  # the socket is bound at load
RTMGRP_NEIGH = 4  # linux/rtnetlink.h
EVENTS = {"RTM_NEWNEIGH": "newneigh", "RTM_DELNEIGH": "delneigh"}


class NeighNetlink:
    name: str = "neigh_netlink"
    counters: tuple[str, ...] = ("netlink.newneigh", "netlink.delneigh")

    def __init__(
        self,
        netns: str | None = None,
        ipv4_only: bool = True,
        settle_s: float = 0.03,
        max_settle_s: float = 0.5,
    ) -> None:
        self.netns = netns
        self.ipv4_only = ipv4_only
        self.settle_s = settle_s
        self.max_settle_s = max_settle_s
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, int]] = Counter()  # (event, ifindex) -> cumulative
        self._errors = 0
        self._seen = 0
        self._names: dict[int, str] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    @classmethod
    def from_env(cls) -> NeighNetlink:
        v = startup_values("neigh_netlink", PARAMS)
        return cls(netns=v["neigh_netlink.netns"], ipv4_only=v["neigh_netlink.family"] == "inet")

    # -- reader thread -------------------------------------------------------------------------

    async def _read(self) -> None:
        from pyroute2 import AsyncIPRoute

        # flags=0: never create the netns (pyroute2's default O_CREAT would make a missing one).
        ipr = (
            AsyncIPRoute(netns=self.netns, flags=0, groups=RTMGRP_NEIGH)
            if self.netns
            else AsyncIPRoute(groups=RTMGRP_NEIGH)
        )
        try:
            await ipr.bind(groups=RTMGRP_NEIGH)
            self._ready.set()
            while True:
                try:
                    async for m in ipr.get():
                        self._count(m)
                except asyncio.CancelledError:
                    raise
                except Exception:  # ENOBUFS etc.: keep reading, but say the window is incomplete
                    with self._lock:
                        self._errors += 1
                    await asyncio.sleep(0.01)
        finally:
            r = ipr.close()
            if inspect.isawaitable(r):
                await r

    def _count(self, m: Any) -> None:
        ev = EVENTS.get(m.get("event", ""))
        with self._lock:
            self._seen += 1
            if ev is None or (self.ipv4_only and m.get("family") != socket.AF_INET):
                return
            self._counts[(ev, int(m.get("ifindex", 0)))] += 1

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._task = loop.create_task(self._read())
        try:
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except BaseException as e:  # bind failed, netns missing, ...
            self._failure = e
            self._ready.set()
        finally:
            loop.close()

    # -- Program -----------------------------------------------------------------------------

    def load(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="neigh-netlink", daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or self._failure is not None:
            self.close()
            raise ProbeError(
                f"neigh_netlink: cannot listen to RTMGRP_NEIGH (netns {self.netns or 'own'}): "
                f"{self._failure or 'timed out'}"
            )

    def _settle(self) -> None:
        deadline = time.monotonic() + self.max_settle_s
        with self._lock:
            last = self._seen
        while time.monotonic() < deadline:
            time.sleep(self.settle_s)
            with self._lock:
                if self._seen == last:
                    return
                last = self._seen

    def _ifname(self, index: int) -> str:
        if index not in self._names:
            try:
                from pyroute2 import IPRoute

                with IPRoute(netns=self.netns, flags=0) if self.netns else IPRoute() as ipr:
                    self._names[index] = ipr.link("get", index=index)[0].get_attr("IFLA_IFNAME")
            except Exception:  # gone already; cached too, so a counter's name never changes
                self._names[index] = f"if{index}"
        return self._names[index]

    def snapshot(self) -> Snapshot:
        if self._thread is None or not self._thread.is_alive():
            raise ProbeError("neigh_netlink: snapshot before load() or reader thread died")
        self._settle()
        with self._lock:
            counts, errors = dict(self._counts), self._errors
        out: dict[str, int] = {"netlink.errors": errors}
        for (ev, index), n in counts.items():
            for key in (f"netlink.{ev}", f"netlink.{ev}.dev.{self._ifname(index)}"):
                out[key] = out.get(key, 0) + n
        return {0: out}

    def close(self) -> None:
        loop, task, thread = self._loop, self._task, self._thread
        if loop is not None and task is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # loop closed between the check and the call
                pass
        if thread is not None:
            thread.join(timeout=3)
        self._thread = None
