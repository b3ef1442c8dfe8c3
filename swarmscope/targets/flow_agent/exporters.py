"""Real flow exporters under test: Debian's ``softflowd`` and pmacct's ``pmacctd``, with our collector.

    ip netns exec NS python -m swarmscope.targets.flow_agent.exporters --exporter softflowd \\
        --dev fsab12cds --cache-max-flows 10000 --cache-timeout 1   # stdin/stdout as agent.py

The same control protocol as the reference agent (agent.py), so one adapter class drives both:
``config <maxflows> <timeout>`` restarts the exporter with the new cache (a C daemon cannot be
resized in place; the probe's procstat follows it by name within the worker's cgroup),
``start`` begins a window, ``flush`` makes the exporter export every flow it holds and prints
``{"window": {...}}``. The exporter captures (libpcap, not promiscuous) on the flow storm's
sending interface and exports NetFlow v9 to the collector (collector.py) on this namespace's
loopback. Settings from the flow storm: ``cache_max_flows`` is softflowd's ``-m`` and
pmacctd's ``nfprobe_maxflows``; ``cache_timeout_s`` (rounded up to whole seconds, their unit)
is the UDP and TCP idle timeouts and ``maxlife`` (a flow alive longer is exported in several
records: a split flow), and the expiry interval is 1 s.

Flush, per exporter. softflowd: wait until it has read every packet libpcap took
(``softflowctl statistics``), then ``softflowctl expire-all``, then wait until the collector
holds as many records as softflowd says it exported. pmacctd has no such control: wait until
its exports have been quiet for the timeout plus the expiry interval plus 1 s (bounded).

Bytes: both exporters count the IPv4 total length (L3); the kernel's XDP count is the frame
(L2). On the flow storm's veth the frame is the IP packet plus a 14-byte Ethernet header (no
VLAN tag, no FCS), so ``bytes = l3_bytes + ETH_HLEN * packets`` exactly; both are reported.
Named losses: libpcap drops (``softflowctl statistics``; pmacctd logs them on SIGUSR1) and
export datagrams missing from the v9 sequence (the collector's count).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from swarmscope.core.errors import LoadGenError
from swarmscope.targets.flow_agent.collector import Collector

ETH_HLEN = 14  # Ethernet II header on the veth: frame bytes = IPv4 total length + 14
COLLECTOR = ("127.0.0.1", 2055)  # the namespace's own loopback: no clash with other runs
FLUSH_MAX_S = 60.0
NUDGE_ETHERTYPE = 0x88B5  # IEEE 802 local experimental: not IPv4, so never a flow anywhere
MAX_NUDGES = 40_000
NUDGE_BURST = 1000


def nudge(dev: str, frames: int) -> None:
    """``frames`` non-IP frames out of ``dev``. softflowd 1.1.0's capture hands packets over a
    whole block at a time, and the tail of a window waits in a block that is not full; frames
    after it fill that block. The kernel's flow_count counts them in ``other`` (not a flow, not
    in packets or bytes), softflowd in "ignored (non-IP)"; both are reported."""
    frame = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + NUDGE_ETHERTYPE.to_bytes(2, "big") + b"\0" * 46
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((dev, 0))
        for _ in range(frames):
            s.send(frame)


class Exporter:
    """One exporter daemon, restarted on ``configure``."""

    name = ""

    def __init__(self, dev: str, workdir: str) -> None:
        self.dev, self.workdir = dev, workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.timeout_s = 1
        self.log: collections.deque[str] = collections.deque(maxlen=500)  # the daemon's stderr, last lines

    def command(self, max_flows: int) -> list[str]:
        raise NotImplementedError

    def configure(self, max_flows: int, timeout_s: float) -> None:
        self.stop()
        self.timeout_s = max(1, math.ceil(timeout_s))
        self.proc = subprocess.Popen(
            self.command(max_flows),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # own session: Ctrl-C is swarmscope's to pass on
        )
        # read all along: a full pipe would block the daemon, and pmacctd's statistics come here
        threading.Thread(target=self._read_log, args=(self.proc,), daemon=True).start()
        self.wait_ready()

    def _read_log(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.log.append(line.decode(errors="replace").rstrip())

    def wait_ready(self) -> None:
        time.sleep(1.0)  # libpcap opens the device; traffic before that would not be seen
        if self.proc is not None and self.proc.poll() is not None:
            tail = " | ".join(list(self.log)[-3:])
            raise LoadGenError(f"{self.name} exited ({self.proc.returncode}): {tail[-300:]}")

    def mark(self) -> None:
        """A window starts (an exporter with cumulative counters notes them)."""

    def flush(self, coll: Collector) -> dict[str, Any]:
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # both flush and exit on SIGINT
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


class Softflowd(Exporter):
    name = "softflowd"
    base: dict[str, int] = {}  # noqa: RUF012  (replaced per window by mark)
    base_records = 0

    def command(self, max_flows: int) -> list[str]:
        t = self.timeout_s
        return ["softflowd", "-d", "-N", "-i", self.dev, "-n", f"{COLLECTOR[0]}:{COLLECTOR[1]}", "-v", "9",
                "-m", str(max_flows), "-t", f"udp={t}s", "-t", f"tcp={t}s", "-t", f"maxlife={t}s",
                "-t", "expint=1s", "-p", self.ctl + ".pid", "-c", self.ctl]  # fmt: skip

    @property
    def ctl(self) -> str:
        return os.path.join(self.workdir, "softflowd.ctl")

    def stats(self) -> dict[str, int]:
        p = subprocess.run(["softflowctl", "-c", self.ctl, "statistics"], capture_output=True, text=True,
                           timeout=10, check=False)  # fmt: skip
        out: dict[str, int] = {}
        for key, pat in (("processed", r"Packets processed: (\d+)"), ("ignored", r"Ignored packets: (\d+)"),
                         ("pcap_received", r"received by libpcap: (\d+)"),
                         ("pcap_dropped", r"dropped by libpcap: (\d+)"),
                         ("interface_dropped", r"dropped by interface: (\d+)"),
                         ("records", r"Flows exported: \d+ \((\d+) records\)")):  # fmt: skip
            m = re.search(pat, p.stdout)
            if m is None:
                raise LoadGenError(f"softflowctl statistics: no {key!r} in {p.stdout[-300:]!r} {p.stderr!r}")
            out[key] = int(m.group(1))
        return out

    def flush(self, coll: Collector) -> dict[str, Any]:
        deadline = time.monotonic() + FLUSH_MAX_S
        nudges = 0
        while time.monotonic() < deadline:  # every packet libpcap took, read by softflowd
            st = self.stats()
            got = st["pcap_received"] - self.base.get("pcap_received", 0) - nudges  # non-IP: not "processed"
            if (
                st["processed"] + st["ignored"] - self.base.get("processed", 0) - self.base.get("ignored", 0)
                >= got
            ):
                break
            if nudges < MAX_NUDGES:  # the capture block holding the tail must be handed over
                nudge(self.dev, NUDGE_BURST)
                nudges += NUDGE_BURST
            time.sleep(0.1)
        subprocess.run(
            ["softflowctl", "-c", self.ctl, "expire-all"], capture_output=True, timeout=10, check=True
        )
        while time.monotonic() < deadline:  # every record it exported, received
            st = self.stats()
            if coll.summary()["records"] + self.base_records >= st["records"]:
                break
            time.sleep(0.1)
        out = {k: st[k] - self.base.get(k, 0) for k in ("pcap_received", "pcap_dropped", "interface_dropped")}
        return {**out, "nudges": nudges, "processed": st["processed"] - self.base.get("processed", 0)}

    def mark(self) -> None:
        """Window start: softflowd's counters are cumulative."""
        self.base = self.stats()
        self.base_records = self.base["records"]


class Pmacctd(Exporter):
    name = "pmacctd"
    base: dict[str, int] = {}  # noqa: RUF012  (replaced per window by mark)

    def command(self, max_flows: int) -> list[str]:
        conf = os.path.join(self.workdir, "pmacctd.conf")
        t = self.timeout_s
        with open(conf, "w") as f:
            f.write(f"daemonize: false\npcap_interface: {self.dev}\npromisc: false\nplugins: nfprobe\n"
                    f"nfprobe_receiver: {COLLECTOR[0]}:{COLLECTOR[1]}\nnfprobe_version: 9\n"
                    f"nfprobe_maxflows: {max_flows}\nnfprobe_timeouts: udp={t}:tcp={t}:maxlife={t}:expint=1\n"
                    )  # fmt: skip
        return ["pmacctd", "-f", conf]

    def stats(self) -> dict[str, int]:
        """libpcap's counters, cumulative: SIGUSR1 makes pmacctd's core log
        ``stats [<dev>,0] time=... received_packets=N dropped_packets=M``."""
        assert self.proc is not None
        seen = len([ln for ln in self.log if "received_packets=" in ln])
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            lines = [ln for ln in self.log if "received_packets=" in ln]
            if len(lines) > seen:
                m = re.search(r"received_packets=(\d+) dropped_packets=(\d+)", lines[-1])
                if m:
                    return {"pcap_received": int(m.group(1)), "pcap_dropped": int(m.group(2))}
            time.sleep(0.05)
        raise LoadGenError(f"pmacctd logged no statistics on SIGUSR1: {list(self.log)[-3:]}")

    def mark(self) -> None:
        self.base = self.stats()

    def flush(self, coll: Collector) -> dict[str, Any]:
        quiet = self.timeout_s + 1 + 1.0  # idle timeout + expiry interval + slack
        deadline = time.monotonic() + FLUSH_MAX_S
        time.sleep(quiet)
        while time.monotonic() < deadline and coll.quiet_for() < quiet:
            time.sleep(0.2)
        st = self.stats()
        return {k: st[k] - self.base[k] for k in st}


EXPORTERS: dict[str, type[Exporter]] = {"softflowd": Softflowd, "pmacctd": Pmacctd}


def window_summary(coll: Collector, extra: dict[str, Any]) -> dict[str, Any]:
    """The window as the agent protocol reports it; per-flow rows keyed "dst:dport:proto"."""
    s = coll.summary()
    flows = {f"{k[1]}:{k[3]}:{k[4]}": v for k, v in s.pop("flows").items()}
    return {
        **s,
        **extra,
        "bytes": s["l3_bytes"] + ETH_HLEN * s["packets"],  # L2 frame bytes, as the kernel counts
        "flows": len(flows),
        "per_flow": flows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exporter", choices=sorted(EXPORTERS), required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--cache-max-flows", type=int, default=100_000)
    ap.add_argument("--cache-timeout", type=float, default=1.0)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ss-flowexp-") as wd:
        coll = Collector(COLLECTOR).start()
        exp = EXPORTERS[a.exporter](a.dev, wd)
        try:
            exp.configure(a.cache_max_flows, a.cache_timeout)
            print(json.dumps({"ready": True, "exporter": exp.name}), flush=True)
            for line in sys.stdin:
                cmd = line.split()
                if cmd and cmd[0] == "config":
                    exp.configure(int(cmd[1]), float(cmd[2]))
                    print(json.dumps({"configured": [int(cmd[1]), float(cmd[2])]}), flush=True)
                elif cmd == ["start"]:
                    exp.mark()
                    coll.reset()
                    print(json.dumps({"started": True}), flush=True)
                elif cmd == ["flush"]:
                    extra = exp.flush(coll)
                    print(json.dumps({"window": window_summary(coll, extra)}), flush=True)
                if exp.proc is not None and exp.proc.poll() is not None:
                    raise LoadGenError(f"{exp.name} exited ({exp.proc.returncode})")
        finally:
            exp.stop()
            coll.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
