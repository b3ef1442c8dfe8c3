"""Flow agents under test: the registry of what a flow storm can measure, by name.

    start_agent("reference", netns, dev, cache_max_flows=10000, cache_timeout_s=1.0)
    # -> AgentProcess: .pid (for procstat), .start_window(), .flush() -> the window's summary

An adapter starts its agent in the flow storm's source namespace, watching the sending
interface, and speaks to it as its collector: ``start_window`` before a window's traffic,
``flush`` after it (every flow evicted now), which returns the agent's own account of the
window (packets, bytes, flows, evictions per component, ring buffer / hashmap ratio, buffer
sizes, dropped flows). Registered in ``AGENTS``; the kind's ``agent`` option's choices are its
names ("none": no agent): the reference eBPF agent (agent.py), and the real exporters
``softflowd`` and ``pmacctd`` (exporters.py, NetFlow v9 to swarmscope's collector). ``comm``
names the process the probe's procstat samples, followed by name within the worker's cgroup:
``ss-flowagent`` for the reference agent (a worker in a pod knows no node pid), the daemon's
name for a real exporter (restarted per point). ``metrics_url`` is where the agent serves its own metrics in
Prometheus text (the reference agent, on a loopback port of this namespace; empty otherwise).
"""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from swarmscope.core.errors import LoadGenError

AGENT_COMM = "ss-flowagent"  # the reference agent's /proc/<pid>/comm (15 bytes at most)


class AgentProcess:
    """A flow agent subprocess with its stdin (commands) and stdout (exported records)."""

    def __init__(
        self, cmd: list[str], timeout_s: float = 60.0, comm: str = "", metrics: socket.socket | None = None
    ) -> None:
        self.comm = comm
        fds = (metrics.fileno(),) if metrics is not None else ()
        # the agent's /metrics: a socket of this (host) namespace, passed down to the agent
        self.metrics_url = f"http://127.0.0.1:{metrics.getsockname()[1]}/metrics" if metrics else ""
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                pass_fds=fds,
                start_new_session=True,  # own session: Ctrl-C is swarmscope's to pass on
            )
        finally:
            if metrics is not None:
                metrics.close()  # the agent holds its own copy
        self.pid = self.proc.pid  # `ip netns exec` execs the agent: the same pid
        self.timeout_s = timeout_s
        self.records: list[dict[str, Any]] = []
        # read all the time, not only at flush: an agent whose exports fill the pipe (64 KiB)
        # would block in its write and stop polling its ring buffer (a stall of the collector's
        # making, seen as dropped flows)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, name="flow-agent-stdout", daemon=True).start()
        self._until(lambda m: bool(m.get("ready")))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")  # EOF

    def _until(self, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            line = self._lines.get()
            if not line:
                self._lines.put("")  # stays at EOF for the next caller
                raise LoadGenError(f"the flow agent exited ({self.proc.poll()})")
            msg = json.loads(line)
            if done(msg):
                return msg
            self.records.append(msg)

    def _send(self, cmd: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def configure(self, cache_max_flows: int, cache_timeout_s: float) -> None:
        """A new map size and timeout, in the same process (its pid stays)."""
        self._send(f"config {int(cache_max_flows)} {float(cache_timeout_s)}")
        self._until(lambda m: "configured" in m)

    def start_window(self) -> None:
        """The window begins once the agent says so (its metrics, scraped now, are the start)."""
        self._send("start")
        self._until(lambda m: "started" in m)
        self.records = []  # what `start` evicted belongs to no window

    def flush(self) -> dict[str, Any]:
        self._send("flush")
        summary = self._until(lambda m: "window" in m)["window"]
        summary["exports"] = len(self.records)
        if any("records" in r for r in self.records):  # an agent that exports its flows
            summary["per_flow"] = fold_records(self.records)
            summary["per_flow_bytes"] = "frame"
        return dict(summary)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # EOF: the agent detaches and exits
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def fold_records(exports: list[dict[str, Any]]) -> dict[str, list[int]]:
    """The flows an agent exported, by "dst:dport:proto" (the collector's key, collector.py):
    [packets, bytes, records], a flow exported by several evictions summed."""
    out: dict[str, list[int]] = {}
    for e in exports:
        for dst, dport, proto, packets, nbytes in e.get("records", ()):
            row = out.setdefault(f"{dst}:{dport}:{proto}", [0, 0, 0])
            row[0] += int(packets)
            row[1] += int(nbytes)
            row[2] += 1
    return out


def start_reference(
    netns: str, dev: str, cache_max_flows: int, cache_timeout_s: float, ringbuf_pages: int = 64
) -> AgentProcess:
    from swarmscope.targets.flow_agent.metrics import listening_socket

    sock = listening_socket()
    cmd = [
        "ip", "netns", "exec", netns, sys.executable, "-m", "swarmscope.targets.flow_agent.agent",
        "--dev", dev, "--cache-max-flows", str(cache_max_flows), "--cache-timeout", str(cache_timeout_s),
        "--metrics-fd", str(sock.fileno()), "--ringbuf-pages", str(ringbuf_pages),
    ]  # fmt: skip
    return AgentProcess(cmd, comm=AGENT_COMM, metrics=sock)


def _exporter(name: str) -> Callable[[str, str, int, float], AgentProcess]:
    def start(netns: str, dev: str, cache_max_flows: int, cache_timeout_s: float) -> AgentProcess:
        cmd = [
            "ip", "netns", "exec", netns, sys.executable, "-m", "swarmscope.targets.flow_agent.exporters",
            "--exporter", name, "--dev", dev, "--cache-max-flows", str(cache_max_flows),
            "--cache-timeout", str(cache_timeout_s),
        ]  # fmt: skip
        return AgentProcess(cmd, comm=name)

    return start


AGENTS: dict[str, Callable[[str, str, int, float], AgentProcess]] = {
    "reference": start_reference,
    "softflowd": _exporter("softflowd"),
    "pmacctd": _exporter("pmacctd"),
}
AGENT_CHOICES = ("none", *AGENTS)


def start_agent(
    name: str, netns: str, dev: str, cache_max_flows: int, cache_timeout_s: float
) -> AgentProcess:
    if name not in AGENTS:
        raise LoadGenError(f"unknown flow agent {name!r} (known: {', '.join(AGENTS)})")
    return AGENTS[name](netns, dev, cache_max_flows, cache_timeout_s)
