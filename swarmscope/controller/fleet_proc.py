"""The probe fleet in a child process, for callers in a gevent-patched process (every Locust one).

    fleet = make_fleet(token, bind="127.0.0.1:0", tls=tls)   # Fleet, or FleetProcess under gevent
    fleet.start(); fleet.wait_for_probes(1); fleet.open_window(...); fleet.close_window(...)

grpc.aio cannot run inside a gevent-patched process, and the fleet is grpc.aio (one task per
stream, controller/fleet.py). So the Locust controller runs the fleet in a plain child Python
process and calls it over a socket pair: the same methods, arguments and results (pickled), one
request at a time per caller; the socket is cooperative under gevent, so a caller waiting 30 s for
a window blocks only its greenlet. The child gets the token over the socket (never argv or env)
and dies with its parent (PR_SET_PDEATHSIG) or when the socket closes. The fleet gets a process,
a GIL and (when the machine has one) a core of its own.

Caveat: ``ProbeState.outbox`` does not cross: the states ``probes()`` returns are copies.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
from typing import Any, cast

from swarmscope.controller.fleet import Fleet, ProbeState, gevent_patched
from swarmscope.controller.model import ProbeReading
from swarmscope.core.errors import FleetError
from swarmscope.core.sys import owners
from swarmscope.core.tls import TLSFiles

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")
# What a caller may ask of the child's Fleet (nothing else is dispatched).
_CALLS = frozenset(
    {
        "probes",
        "wait_for_probes",
        "open_window",
        "close_window",
        "read_window",
        "take_spans",
        "take_reconnects",
        "take_refusals",
        "shutdown_probes",
        "counters",
    }
)


def make_fleet(token: str, bind: str = "127.0.0.1:0", **kw: Any) -> Fleet | FleetProcess:
    """The fleet for this process: in-process, or in a child when gevent has patched threading."""
    return FleetProcess(token, bind, **kw) if gevent_patched() else Fleet(token, bind, **kw)


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("fleet socket closed")
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket) -> Any:
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    return pickle.loads(_recv_exact(sock, n))


def _state_fields(p: ProbeState) -> dict[str, Any]:
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.name != "outbox"}


class FleetProcess:
    """Fleet's public API, served by a Fleet in a child process."""

    def __init__(self, token: str, bind: str = "127.0.0.1:0", *, tls: TLSFiles | None = None, **kw: Any):
        self.token, self.bind = token, bind
        self._kw = dict(kw, tls=tls)
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)
        self._wlock = threading.Lock()
        self._waiting: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._dead: str = ""

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> int:
        parent, child = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                # dying with us: no orphaned fleet holding the port
                owners.dying_with_us(
                    [sys.executable, "-m", "swarmscope.controller.fleet_proc", str(child.fileno())]
                ),
                pass_fds=(child.fileno(),),
                start_new_session=True,  # own session: Ctrl-C is swarmscope's to pass on
            )
        except OSError as e:
            parent.close()
            raise FleetError(f"cannot start the fleet process ({sys.executable}): {e}") from e
        finally:
            child.close()
        self._sock = parent
        threading.Thread(target=self._read_replies, name="fleet-replies", daemon=True).start()
        level = logging.getLogger().getEffectiveLevel()
        self.port = int(self._call("start", self.token, self.bind, self._kw, level))
        return self.port

    def stop(self, grace_s: float = 1.0) -> None:
        proc, sock = self._proc, self._sock
        if proc is None or sock is None:
            return
        if proc.poll() is None and not self._dead:
            try:
                self._call("stop", grace_s, wait_s=grace_s + 10)
            except FleetError:
                pass  # the child is killed below
        try:
            proc.wait(grace_s + 10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        sock.close()
        self._proc = self._sock = None

    @property
    def address(self) -> str:
        host = self.bind.rsplit(":", 1)[0] or "127.0.0.1"
        return f"{host}:{self.port}"

    # -- the calls -------------------------------------------------------------------------
    def probes(self, alive_only: bool = True) -> list[ProbeState]:
        return [ProbeState(**d) for d in self._call("probes", alive_only)]

    def wait_for_probes(self, count: int = 1, timeout_s: float = 60.0, hosts: set[str] | None = None) -> None:
        self._call("wait_for_probes", count, timeout_s, hosts, wait_s=timeout_s + 30)

    def open_window(self, *args: Any, **kw: Any) -> dict[str, str]:
        return dict(self._call("open_window", *args, wait_s=float(kw.get("timeout_s", 30.0)) + 30, **kw))

    def close_window(
        self, run_id: str, window_id: str, timeout_s: float = 30.0, drain: tuple[str, int, int] | None = None
    ) -> tuple[list[ProbeReading], list[str]]:
        wait_s = timeout_s + 30
        readings, missing = self._call("close_window", run_id, window_id, timeout_s, drain, wait_s=wait_s)
        return readings, missing

    def read_window(self, window_id: str, timeout_s: float = 2.0) -> tuple[list[Any], list[str]]:
        readings, missing = self._call("read_window", window_id, timeout_s, wait_s=timeout_s + 30)
        return list(readings), list(missing)

    def take_spans(self, window_id: str) -> list[bytes]:
        return list(self._call("take_spans", window_id))

    def take_reconnects(self, window_id: str) -> dict[str, int]:
        return dict(self._call("take_reconnects", window_id))

    def take_refusals(self) -> list[str]:
        return list(self._call("take_refusals"))

    def shutdown_probes(self, reason: str = "run finished") -> None:
        self._call("shutdown_probes", reason)

    @property
    def readings_received(self) -> int:
        return int(self._call("counters")[0])

    @property
    def readings_rejected(self) -> int:
        return int(self._call("counters")[1])

    def _call(self, method: str, *args: Any, wait_s: float = 60.0, **kw: Any) -> Any:
        if self._sock is None or self._dead:
            raise FleetError(f"the fleet process is not running{': ' + self._dead if self._dead else ''}")
        rid = next(self._ids)
        done, box = threading.Event(), cast(list[tuple[bool, Any]], [])
        self._waiting[rid] = (done, box)
        try:
            with self._wlock:
                _send(self._sock, (rid, method, args, kw))
            if not done.wait(wait_s):
                raise FleetError(f"the fleet process did not answer {method} in {wait_s:.0f}s")
        except OSError as e:
            raise FleetError(f"the fleet process is gone ({method}): {e}") from e
        finally:
            self._waiting.pop(rid, None)
        if not box:
            raise FleetError(f"the fleet process is gone ({method}): {self._dead}")
        ok, value = box[0]
        if not ok:
            raise value if isinstance(value, FleetError) else FleetError(f"fleet {method}: {value}")
        return value

    def _read_replies(self) -> None:
        sock = self._sock
        try:
            while sock is not None:
                rid, ok, value = _recv(sock)
                waiter = self._waiting.get(rid)
                if waiter is not None:
                    waiter[1].append((ok, value))
                    waiter[0].set()
        except (EOFError, OSError) as e:
            self._dead = f"its socket closed ({e})"
        finally:
            for done, _box in list(self._waiting.values()):
                done.set()


# -- the child ---------------------------------------------------------------------------------
def _serve(sock: socket.socket) -> None:
    fleet: Fleet | None = None
    wlock = threading.Lock()
    stopped = threading.Event()

    def reply(rid: int, ok: bool, value: Any) -> None:
        with wlock:
            _send(sock, (rid, ok, value))

    def run(rid: int, method: str, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        try:
            assert fleet is not None
            if method == "probes":
                value: Any = [_state_fields(p) for p in fleet.probes(*args, **kw)]
            elif method == "counters":
                value = (fleet.readings_received, fleet.readings_rejected)
            else:
                value = getattr(fleet, method)(*args, **kw)
            reply(rid, True, value)
        except FleetError as e:
            reply(rid, False, e)
        except Exception as e:
            log.exception("fleet %s failed", method)
            reply(rid, False, f"{type(e).__name__}: {e}")

    while not stopped.is_set():
        try:
            rid, method, args, kw = _recv(sock)
        except (EOFError, OSError):
            break  # the parent is gone
        if method == "start":
            token, bind, fkw, level = args
            logging.basicConfig(level=level, format="%(asctime)s %(levelname)s fleet: %(message)s")
            fleet = Fleet(token, bind, **fkw)
            try:
                reply(rid, True, fleet.start())
            except FleetError as e:
                reply(rid, False, e)
        elif method == "stop":
            if fleet is not None:
                fleet.stop(*args)
            reply(rid, True, None)
            stopped.set()
        elif method in _CALLS and fleet is not None:
            # A thread per call: a caller waiting for a window must not hold up a metrics scrape.
            threading.Thread(target=run, args=(rid, method, args, kw), daemon=True).start()
        else:
            reply(rid, False, f"unknown call {method!r}")
    if fleet is not None and not stopped.is_set():
        fleet.stop(0)


if __name__ == "__main__":
    _sock = socket.socket(fileno=int(sys.argv[1]))
    _sock.setblocking(True)  # made in a gevent parent, the shared descriptor is non-blocking
    _serve(_sock)
    os._exit(0)
