"""Cheap simulated Locust workers for the workers' fan-in bench: hundreds of ZeroMQ sockets per process.

    procs = SimWorkers.spawn("127.0.0.1:5557", token, master_public, 1000, per_process=500, stall=0.1)
    procs.wait_ready(timeout_s=120); ...; events = procs.stop()    # JSON events the workers wrote

Each simulated worker speaks what ``swarmscope worker`` speaks to the master, over a real
DEALER socket with the same CURVE keys (swarmscope.app.workerauth: the worker token's key pair,
the master's public key): Locust's ``client_ready`` (waits for ``ack``), a ``heartbeat`` every second and a
``stats`` report every 3 s (a real locust.stats.RequestStats: one EXEC request per node and
window, its response-time histogram included), and swarmscope's messages: ``swarmscope:setup``
is answered with ``swarmscope:nodes`` (``sim_nodes`` nodes named ``<prefix>n<j>``, as a real
worker's simulated nodes, on host ``simhost<k>``), ``swarmscope:run`` with one
``swarmscope:result`` after the payload's ``duration_s``: exactly ``COUNT`` execs per node
(bench/simprobes.py's probes read that same count, so a window reconciles exact) and the
worker's OTLP spans of the window (one ``burst <node>`` span per node, as workers/role.py's).
They are greenlets on one gevent loop per process, so 1,000 fit on one core.

``stall``: that fraction of the workers (the last ones) hang at their
``stall_window``-th run message: no result, no heartbeat, no stats, socket left open — what a
frozen worker process looks like to the master. Caveat: no users are spawned (``swarmscope
run`` has none either; its load is the kind's driver), so ``spawn`` messages are not simulated.
Events (one JSON object a line on stdout): ``ready`` per process, ``sent`` per result
(``window``, ``due``: the wall time the load ended for that worker), ``stalled`` per hung worker.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

COUNT = 1000  # execs a simulated worker reports per node and window == bench/simprobes.py COUNTERS


class SimWorker:
    """One simulated worker: a CURVE DEALER socket and its greenlets."""

    def __init__(self, host: Any, index: int, probe_hosts: int, stall_window: int):
        self.h = host
        self.index = index
        self.client_id = f"simw{index}_{uuid.uuid4().hex}"
        self.probe_host = f"simhost{index % probe_hosts}"
        self.stall_window = stall_window  # 0: never
        self.runs = 0
        self.nodes: list[str] = []
        self.acked = False
        self.hung = False
        from locust.stats import RequestStats

        self.stats = RequestStats()
        s = host.ctx.socket(host.zmq.DEALER)
        s.curve_serverkey, s.curve_publickey, s.curve_secretkey = host.keys
        s.setsockopt(host.zmq.IDENTITY, self.client_id.encode())
        s.linger = 0
        s.connect(host.address)
        self.sock = s

    def send(self, kind: str, data: Any) -> None:
        from locust.rpc.protocol import Message

        self.sock.send(Message(kind, data, self.client_id).serialize())

    def start(self) -> None:
        import gevent

        gevent.spawn(self.listen)
        gevent.spawn(self.connect)
        gevent.spawn(self.beat)
        gevent.spawn(self.report)

    def connect(self) -> None:
        import gevent
        from locust import __version__

        while not self.acked:  # as WorkerRunner.connect_to_master: resend until acked
            self.send("client_ready", __version__)
            gevent.sleep(5.0)

    def beat(self) -> None:
        import gevent

        while not self.hung:
            gevent.sleep(1.0)  # locust.runners.HEARTBEAT_INTERVAL
            if not self.hung:
                data = {"state": "ready", "current_cpu_usage": 1.0, "current_memory_usage": 60_000_000}
                self.send("heartbeat", data)

    def report(self) -> None:
        import gevent

        while not self.hung:
            gevent.sleep(3.0)  # locust.runners.WORKER_REPORT_INTERVAL
            if self.hung:
                return
            data = {
                "stats": self.stats.serialize_stats(),
                "stats_total": self.stats.total.get_stripped_report(),
                "errors": self.stats.serialize_errors(),
                "user_classes_count": {},
                "user_count": 0,
            }
            self.stats.errors = {}
            self.send("stats", data)

    def listen(self) -> None:
        import gevent
        from locust.rpc.protocol import Message

        while True:
            try:
                msg = Message.unserialize(self.sock.recv())
            except self.h.zmq.ZMQError:
                return
            if msg.type == "ack":
                self.acked = True
                self.h.ready()
            elif msg.type == "quit":
                self.hung = True
                return
            elif msg.type == "swarmscope:setup" and not self.hung:
                self.setup(msg.data)
            elif msg.type == "swarmscope:run" and not self.hung:
                self.runs += 1
                if self.runs == self.stall_window:
                    self.hung = True
                    self.h.emit({"ev": "stalled", "worker": self.client_id, "nodes": self.nodes})
                    continue
                gevent.spawn(self.run, msg.data)

    def setup(self, d: dict[str, Any]) -> None:
        self.nodes = [f"{d.get('prefix', '')}n{j + 1}" for j in range(int(d["sim_nodes"]))]
        described = [
            {
                "name": n,
                "host": self.probe_host,
                "cgroup_id": self.index * 1000 + j + 1,
                "cgroup_path": "",
                "comm": f"ssim-{n}"[:15],
            }
            for j, n in enumerate(self.nodes)
        ]
        self.send("swarmscope:nodes", {"nodes": described, "info": {}})

    def run(self, d: dict[str, Any]) -> None:
        import gevent

        t0 = time.time()
        duration = float(d["payload"]["duration_s"])
        gevent.sleep(duration)  # the load of the window
        if self.hung:
            return
        mine = [n for n in d["nodes"] if n in self.nodes]
        tally = {
            "generated": COUNT,
            "failed": 0,
            "elapsed_s": duration,
            "rate": COUNT / duration,
            "bursts": 1,
            "errors": [],
        }
        for n in mine:
            self.stats.log_request("EXEC", f"burst {n}", duration * 1000.0, COUNT)
        blob = self.h.spans(d["window_id"], d.get("traceparent", ""), mine, t0)
        result = {"window_id": d["window_id"], "per_node": {n: dict(tally) for n in mine}, "spans": blob}
        self.send("swarmscope:result", result)
        self.h.emit({"ev": "sent", "window": d["window_id"], "due": t0 + duration, "t": time.time()})


class Host:
    """One process's loop: the ZeroMQ context, the CURVE keys, the span buffer, the event output."""

    def __init__(self, address: str, token: str):
        import zmq.green as zmq

        from swarmscope.app.workerauth import master_public, worker_keypair
        from swarmscope.core.sys.limits import raise_nofile
        from swarmscope.core.sys.otlpjson import WindowSpans

        raise_nofile()
        self.zmq = zmq
        self.ctx = zmq.Context()
        self.ctx.max_sockets = 100_000
        self.keys = (master_public(), *worker_keypair(token))
        self.address = f"tcp://{address}"
        self.buf = WindowSpans("swarmscope-worker", {"host.name": "simworkers"})
        self.n_ready = 0
        self.expected = 0

    def ready(self) -> None:
        self.n_ready += 1
        if self.n_ready == self.expected:
            self.emit({"ev": "ready", "n": self.n_ready})

    def emit(self, ev: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(ev) + "\n")
        sys.stdout.flush()

    def spans(self, window_id: str, traceparent: str, nodes: list[str], t0: float) -> bytes:
        """This worker's spans of the window, as a real worker's (no yield in between: the
        buffer holds only these when taken)."""
        if not traceparent:
            return b""
        from swarmscope.core.sys import otel
        from swarmscope.core.sys.otlpjson import WINDOW_ATTR

        ctx = otel.extract(traceparent)
        for n in nodes:
            attrs = {WINDOW_ATTR: window_id, "swarmscope.node": n, "swarmscope.generated": COUNT}
            span = self.buf.tracer.start_span(
                f"burst {n}", context=ctx, attributes=attrs, start_time=int(t0 * 1e9)
            )
            span.end()
        return self.buf.take(window_id)


def main(argv: list[str] | None = None) -> None:
    import gevent
    import locust  # noqa: F401  (gevent's monkey-patching, as in a worker)

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--master", required=True, help="host:port of the Locust master")
    ap.add_argument("--first", type=int, default=0, help="index of this process's first worker")
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--probe-hosts", type=int, default=1)
    ap.add_argument("--stall", type=int, default=0, help="workers of this process that hang")
    ap.add_argument("--stall-window", type=int, default=2)
    args = ap.parse_args(argv)
    token = os.environ["SWARMSCOPE_WORKER_TOKEN"]
    host = Host(args.master, token)
    host.expected = args.count
    workers = []
    for i in range(args.count):
        stall = args.stall_window if i >= args.count - args.stall else 0
        w = SimWorker(host, args.first + i, args.probe_hosts, stall)
        w.start()
        workers.append(w)
        if i % 50 == 49:
            gevent.sleep(0.05)  # CURVE handshakes in batches, not 1,000 at once
    while any(not w.hung for w in workers):
        gevent.sleep(0.5)


class SimWorkers:
    """Processes of simulated workers; ``events`` collects what they print."""

    def __init__(self, procs: list[subprocess.Popen[str]], n: int):
        self.procs = procs
        self.n = n
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._readers = [threading.Thread(target=self._read, args=(p,), daemon=True) for p in procs]
        for t in self._readers:
            t.start()

    @classmethod
    def spawn(
        cls,
        address: str,
        token: str,
        master_public: bytes,
        n: int,
        per_process: int = 500,
        probe_hosts: int = 1,
        stall: float = 0.0,
        stall_window: int = 2,
        cpus: set[int] | None = None,
    ) -> SimWorkers:
        procs = []
        env = {
            **os.environ,
            "SWARMSCOPE_WORKER_TOKEN": token,
            "SWARMSCOPE_MASTER_PUBLIC_KEY": master_public.decode(),
        }
        env.pop("SWARMSCOPE_MASTER_PUBLIC_KEY_FILE", None)
        hung_from = n - round(n * stall)  # the last workers overall hang
        for first in range(0, n, per_process):
            count = min(per_process, n - first)
            hung = max(0, first + count - max(hung_from, first))
            cmd = [
                sys.executable, os.path.abspath(__file__), "--master", address, "--first", str(first),
                "--count", str(count), "--probe-hosts", str(probe_hosts),
                "--stall", str(hung), "--stall-window", str(stall_window),
            ]  # fmt: skip
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
            if cpus:
                os.sched_setaffinity(p.pid, cpus)
            procs.append(p)
        return cls(procs, n)

    def _read(self, p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        for line in p.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def of(self, ev: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e["ev"] == ev]

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while sum(e["n"] for e in self.of("ready")) < self.n:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{sum(e['n'] for e in self.of('ready'))}/{self.n} simulated workers acked"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        for t in self._readers:
            t.join(5)


if __name__ == "__main__":
    main()
