"""The network baseline beside the HTTP figures: iperf3 between the host and the target's namespace.

    with LocalIngress() as t:
        b = network_baseline(t.netns, t.ns_addr, seconds=1)
        b["to_target"]["gbit_s"], b["from_target"]["gbit_s"], b["to_target"]["mean_rtt_us"]

The published ingress benchmark measured the path with netperf beside its boom runs; here it is
Debian's iperf3 over the very veth the HTTP load crosses: a server bound to the namespace's
address inside the namespace (our own, made by ``LocalIngress``), a client on the host, one TCP
stream ``seconds`` long in each direction (host → namespace, the requests' way, then ``-R``,
the responses' way). Each direction gives iperf3's own figures: bits/s, bytes, retransmits and,
on the sending side, the kernel's smoothed RTT (TCP_INFO, µs) and the CPU both ends used.

Caveats: whole seconds only (iperf3's ``-t`` reads 0.5 as 0, which means no end); bounded by
``seconds`` per direction plus a timeout; traffic stays inside the machine
(host ↔ our namespace only). On a shared 2-core machine the figure moves with the others' load:
compare it within one run. The server is ours (a child process) and is killed on the way out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import Any

from swarmscope.core.errors import SetupError
from swarmscope.core.sys import owners

IPERF3 = shutil.which("iperf3") or "/usr/bin/iperf3"
PORT = 5201  # inside our own namespace: nothing else listens there but nginx (80, 8081…)
CONNECT_TRIES = 20  # the server needs a moment to listen; bounded


def network_baseline(netns: str, addr: str, seconds: int = 1, port: int = PORT) -> dict[str, Any]:
    """iperf3 both ways between the host and ``addr`` in ``netns``; raises SetupError on failure."""
    if int(seconds) != seconds or not 1 <= seconds <= 60:
        # iperf3 reads -t as whole seconds, and 0 (or 0.5, read as 0) as "until killed"
        raise SetupError(f"iperf3 seconds must be a whole number from 1 to 60, not {seconds!r}")
    server = subprocess.Popen(
        owners.dying_with_us(["ip", "netns", "exec", netns, IPERF3, "-s", "-B", addr, "-p", str(port)]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # own session: Ctrl-C is swarmscope's to pass on
    )
    try:
        t0 = time.time()
        fwd = _client(addr, port, seconds, reverse=False, server=server)
        rev = _client(addr, port, seconds, reverse=True, server=server)
    finally:
        server.kill()
        server.wait(timeout=5)
    return {
        "tool": "iperf3",
        "streams": 1,
        "seconds": float(seconds),
        "at": t0,
        "to_target": fwd,
        "from_target": rev,
    }


def _client(
    addr: str, port: int, seconds: int, reverse: bool, server: subprocess.Popen[bytes]
) -> dict[str, Any]:
    cmd = [IPERF3, "-c", addr, "-p", str(port), "-t", str(int(seconds)), "-J", "--connect-timeout", "1000"]
    if reverse:
        cmd.append("-R")
    last = ""
    for _ in range(CONNECT_TRIES):
        if server.poll() is not None:
            err = server.stderr.read().decode(errors="replace") if server.stderr else ""
            raise SetupError(f"iperf3 server exited (code {server.returncode}): {err.strip()}")
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 10)
        except FileNotFoundError as e:
            raise SetupError("iperf3 not found: run tools/setup.sh (installs Debian's iperf3)") from e
        except subprocess.TimeoutExpired as e:
            raise SetupError(f"iperf3 did not finish in {seconds + 10:.0f} s") from e
        try:
            d = json.loads(p.stdout or "{}")
        except ValueError:
            d = {"error": p.stdout.strip()[-300:]}
        end = d.get("end") or {}
        if p.returncode == 0 and "sum_sent" in end and "sum_received" in end:
            return _figures(d, reverse)
        last = str(d.get("error") or p.stderr.strip() or f"exit {p.returncode}")
        if p.returncode == 0:  # seen on a loaded machine: an "end" without its totals; try again
            last = "iperf3 gave no totals (end.sum_sent / end.sum_received)"
        elif "connect" not in last and "busy" not in last:
            break
        time.sleep(0.1)
    raise SetupError(f"iperf3 to {addr}:{port} failed: {last}")


def _figures(d: dict[str, Any], reverse: bool) -> dict[str, Any]:
    """One direction's figures from iperf3's JSON: the receiving end's rate (what arrived)."""
    end = d["end"]
    sent, got = end["sum_sent"], end["sum_received"]
    out: dict[str, Any] = {
        "gbit_s": float(got["bits_per_second"]) / 1e9,
        "bytes": int(got["bytes"]),
        "sent_bytes": int(sent["bytes"]),
        "retransmits": int(sent.get("retransmits", 0)),
        "seconds": float(got["seconds"]),
    }
    # The sender's kernel RTT is in the client's JSON only when the client sends (not with -R).
    sender = (end.get("streams") or [{}])[0].get("sender") or {}
    if not reverse and "mean_rtt" in sender:
        out["mean_rtt_us"] = int(sender["mean_rtt"])
    cpu = end.get("cpu_utilization_percent") or {}
    out["cpu_pct_host"] = float(cpu.get("host_total", 0.0))
    out["cpu_pct_target"] = float(cpu.get("remote_total", 0.0))
    return out
