"""The fast-path agent as its own process, as a node's agent is: commands on stdin, JSON out.

    a = AgentProcess(native=LIB)             # started once per worker (its pid: the probe filter)
    a.call(op="list", socket=S, token=T, map_id=ID, page=65536)   # {"t0", "t_user", "programmed"}
    a.call(op="watch", socket=S, token=T, map_id=ID, page=65536)  # {"watching": rev}
    a.call(op="wait", revision=R, timeout=60)                     # {"t_user", "received": [...]}
    a.close()

Why a process (docs/neighbors.md): inside the Locust worker the agent shared a GIL with
gevent's hub, the embedded probe's ring-buffer pump and gRPC threads; each ``bpf()`` call
releases the GIL and may wait up to the 5 ms switch interval to get it back, which alone is
several times Arion's 15 µs. This process does one thing. It opens the XDP map by id (the
worker loaded the program and made the map), keeps the fd (the probe resolves its calls to
the map id through /proc/<pid>/fdinfo) and programs it from the control plane's shared log
(ipc_agent.py). Ops: ``list``, ``watch_only`` (the list copied, not programmed), ``watch`` then
``wait``; an error is ``{"error": ...}``. Times are CLOCK_MONOTONIC.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

from swarmscope.core.errors import LoadGenError
from swarmscope.core.sys import bpf, owners


def _open(map_id: int) -> int:
    fd = bpf.map_fd_by_id(map_id)
    if fd is None:
        raise LoadGenError(f"no BPF map with id {map_id}")
    return fd


class _MapTarget:
    """The XDP map by id, and its ``neigh_meta`` map (slot 0: the revision programmed, written
    after each transaction as the in-worker agent does; a restarted agent resumes from it)."""

    def __init__(self, map_id: int, meta_id: int | None = None):
        self.fd = _open(map_id)
        self.meta = _open(meta_id) if meta_id else None
        self.rev = 0

    def revision(self) -> int:
        if self.meta is not None:  # the map's own record (the worker resets it with the map)
            got = bpf.map_lookup_elem(self.meta, bytes(4), 8)
            return int.from_bytes(got, "little") if got else 0
        return self.rev

    def set_revision(self, rev: int) -> None:
        self.rev = rev
        if self.meta is not None:
            bpf.map_update_elem(self.meta, bytes(4), rev.to_bytes(8, "little"))

    def apply(self, keys: bytes, values: bytes, deleted: bytes = b"") -> int:
        from swarmscope.targets.neighbors.agent import apply_to_map

        return apply_to_map(self.fd, keys, values, deleted)

    def close(self) -> None:
        os.close(self.fd)
        if self.meta is not None:
            os.close(self.meta)


def digest(keys: bytes, values: bytes) -> str:
    """What the watch-only agent received, comparable across processes."""
    return hashlib.sha256(keys + values).hexdigest()


class _Serve:
    def __init__(self, target: Any = None, native: str | None = None):
        self.fixed = target  # LocalAgent: this target whatever the map id
        self.native = native  # the compiled list (ipc_agent.py), when built
        self.maps: dict[int, _MapTarget] = {}
        self.scratch: int | None = None
        self.agent: Any = None
        self.thread: threading.Thread | None = None
        self.errors: list[str] = []

    def _scratch(self) -> int | None:
        """The agent's own 4-entry map, written only to warm the update path (prime)."""
        if self.fixed is not None:
            return None
        if self.scratch is None:
            self.scratch = bpf.map_create(1, "ss_agent_prime", 4, 12, 4)
        return self.scratch

    def _target(self, map_id: int, meta_id: int | None) -> Any:
        if self.fixed is not None:
            return self.fixed
        if map_id not in self.maps:
            self.maps[map_id] = _MapTarget(map_id, meta_id)
        return self.maps[map_id]

    def _agent(self, c: dict[str, Any]) -> Any:
        from swarmscope.targets.neighbors.ipc_agent import IpcAgent

        target = self._target(int(c.get("map_id") or 0), c.get("meta_id"))
        return IpcAgent(c["socket"], c["token"], target, native=self.native)

    def handle(self, c: dict[str, Any]) -> dict[str, Any]:
        op = c["op"]
        if op in ("list", "watch_only"):
            agent = self._agent(c)  # connected and mapped before the clock starts
            try:
                # watch only programs nothing: it primes the reads, never an update
                agent.prime(self._scratch() if op == "list" else None)
                page = int(c.get("page", 65536))
                if op == "list" and agent.native is not None:
                    # compiled: the arguments are ready, the timed list is the one C call
                    fn, args = agent.native.fn, agent.native_args(page)
                    t0 = time.monotonic_ns()
                    got = fn(*args)
                    t1 = time.monotonic_ns()
                    n = agent.native_done(got)
                    if n is None:  # deletes in the range: the Python walk, in order (same t0)
                        _, n = agent.list_and_program(page_size=page)
                        t1 = time.monotonic_ns()
                    return {"t0": t0, "t_user": t1, "programmed": n}
                t0 = time.monotonic_ns()
                if op == "list":
                    _, n = agent.list_and_program(page_size=page)
                    t1 = time.monotonic_ns()
                    return {"t0": t0, "t_user": t1, "programmed": n}
                _, keys, values = agent.list_only()
                t1 = time.monotonic_ns()
                return {"t0": t0, "t_user": t1, "received": len(keys) // 4, "digest": digest(keys, values)}
            finally:
                agent.close()
        if op == "watch":
            self.agent = self._agent(c)
            ready = threading.Event()
            self.errors = []

            def run() -> None:
                try:
                    self.agent.watch(ready=lambda _r: ready.set(), page_size=int(c.get("page", 65536)))
                except Exception as e:  # reported at "wait"
                    self.errors.append(f"{type(e).__name__}: {e}")
                    ready.set()

            self.thread = threading.Thread(target=run, name="watch", daemon=True)
            self.thread.start()
            ready.wait(30)
            return {"watching": self.agent.revision, "errors": self.errors}
        if op == "wait":
            agent, self.agent = self.agent, None
            if agent is None:
                return {"error": "no watch to wait for"}
            ok = agent.wait_revision(int(c["revision"]), float(c.get("timeout", 60)))
            t1 = time.monotonic_ns()
            agent.cancel()
            if self.thread is not None:
                self.thread.join(10)
            agent.close()
            if not ok:
                return {
                    "error": f"revision {c['revision']} not reached (at {agent.revision})"
                    + "".join(f"; {e}" for e in self.errors),
                    "errors": self.errors,
                }
            return {
                "t_user": t1,
                "received": agent.received,
                "programmed": agent.programmed,
                "errors": self.errors,
            }
        return {"error": f"unknown op {op!r}"}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    serve = _Serve(native=args[args.index("--native") + 1] if "--native" in args else None)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        try:
            reply = serve.handle(json.loads(line))
        except Exception as e:  # one bad window must not take the agent down
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)
    for t in serve.maps.values():
        t.close()
    return 0


class LocalAgent:
    """The same agent in this process, on a given target (the kernel table: its netlink
    socket lives in the worker's namespace handling)."""

    def __init__(self, target: Any):
        self.serve = _Serve(target)
        self.pid = os.getpid()

    def call(self, **cmd: Any) -> dict[str, Any]:
        reply = self.serve.handle(cmd)
        if reply.get("error"):
            raise LoadGenError(f"neighbor agent: {reply['error']}")
        return reply


class AgentProcess:
    """The worker's handle on its agent process (started once; dies with the worker)."""

    def __init__(self, native: str | None = None) -> None:
        cmd = [sys.executable, "-m", "swarmscope.targets.neighbors.agent_proc"]
        if native:  # native/agent_list.c built as a shared library (ipc_agent.py)
            cmd += ["--native", native]
        self.proc = subprocess.Popen(
            owners.dying_with_us(cmd),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # own session: Ctrl-C is swarmscope's to pass on
        )
        first = self._read()
        self.pid = int(first["ready"])
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise LoadGenError(f"the neighbor agent process ended (exit {self.proc.poll()})")
        return dict(json.loads(line))

    def call(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            reply = self._read()
        if reply.get("error"):
            raise LoadGenError(f"neighbor agent: {reply['error']}")
        return reply

    def close(self) -> None:
        from swarmscope.targets.neighbors.server import stop

        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the agent ends at end of input; stop() makes sure
        stop(self.proc)


if __name__ == "__main__":
    sys.exit(main())
