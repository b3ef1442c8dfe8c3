"""Unauthenticated floods against a real controller fleet and a real relay: RSS before/after.

    .venv/bin/python bench/abuse.py                 # default: 200 calls of each kind per server
    .venv/bin/python bench/abuse.py --calls 500 --in-flight 64

Each server runs in its own process: the controller's fleet (controller.fleet.Fleet, as
``make_fleet`` runs it under Locust) and ``python -m swarmscope relay`` registered to it. With
no token, each takes: Hellos with a 64 MiB nonce (refused by gRPC's receive limit), Hellos and
Registers with a payload just under the wire limit (refused by the handler), first Session
messages of that size, and valid 16-byte Hellos that are never followed by a Register (the
pending table). Prints each server's RSS before, at its peak (VmHWM) and after, next to the
bound (``BOUND``: what a flood may leave behind), and the tracebacks in its stderr (want 0).
Issue 27 measured the old code at +1,094 MiB kept for 25 Hellos of 40 MiB.

Caveat, measured here (grpcio 1.76): gRPC checks ``max_receive_message_length`` only once a
message is whole, so while an oversized message is in flight its bytes are held (one 256 MiB
Hello on one connection: +260 MiB at the peak, all of it freed at the refusal). The peak is
therefore what the in-flight connections carry; what a flood leaves behind is what is bounded.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import grpc

from swarmscope.core import auth
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pbg

BOUND = 96 << 20  # RSS a flood may add to a server (tests/fuzzing.py's RSS_BOUND)
NEAR_WIRE = (1 << 20) - 256  # just under core/wire.py's WIRE_LIMIT

_FLEET = """
import sys, time
from swarmscope.controller.fleet import Fleet
f = Fleet(sys.argv[1]); print(f.start(), flush=True)
sys.stdin.read()
"""


def status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) << 10
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flood(address: str, calls: int, in_flight: int, pid: int) -> dict[str, int]:
    """Every kind of unauthenticated call ``calls`` times; {kind/status: count}."""
    opts = [("grpc.max_send_message_length", -1)]
    channels = [grpc.insecure_channel(address, opts) for _ in range(4)]
    huge = b"x" * (64 << 20)
    near = b"y" * NEAR_WIRE
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def one(i: int, kind: str) -> None:
        stub = pbg.ProbeControlStub(channels[i % len(channels)])
        try:
            if kind == "hello-64MiB":
                stub.Hello(pb.HelloRequest(probe_nonce=huge), timeout=60)
            elif kind == "hello-1MiB":
                stub.Hello(pb.HelloRequest(probe_nonce=near), timeout=60)
            elif kind == "register-1MiB":
                stub.Register(pb.RegisterRequest(nonce=near, server_nonce=near[:16]), timeout=60)
            elif kind == "session-1MiB":
                msg = pb.ProbeMessage(session_id="x", heartbeat=pb.Heartbeat(), part=pb.Part(data=near[:-64]))
                list(stub.Session(iter([msg]), timeout=60))
            else:  # a valid Hello never followed by Register
                stub.Hello(pb.HelloRequest(probe_nonce=auth.new_nonce()), timeout=60)
            code = "OK"
        except grpc.RpcError as e:
            code = e.code().name
        with lock:
            outcomes[f"{kind}/{code}"] += 1

    kinds = ["hello-64MiB", "hello-1MiB", "register-1MiB", "session-1MiB"]
    with ThreadPoolExecutor(in_flight) as pool:
        for kind in kinds:
            list(pool.map(lambda i, k=kind: one(i, k), range(calls)))  # type: ignore[misc]
            rss, peak = status(pid, "VmRSS") >> 20, status(pid, "VmHWM") >> 20
            print(f"  after {kind}: RSS {rss} MiB, peak {peak} MiB")
        list(pool.map(lambda i: one(i, "hello-valid"), range(calls * 50)))
    for ch in channels:
        ch.close()
    return dict(outcomes)


def measure(name: str, proc: subprocess.Popen[str], address: str, calls: int, in_flight: int) -> bool:
    time.sleep(1.0)
    before = status(proc.pid, "VmRSS")
    t0 = time.monotonic()
    outcomes = flood(address, calls, in_flight, proc.pid)
    took = time.monotonic() - t0
    time.sleep(2.0)
    after, peak = status(proc.pid, "VmRSS"), status(proc.pid, "VmHWM")
    ok = after - before < BOUND and proc.poll() is None
    mib = 1 << 20
    print(f"{name}: {took:.1f}s of flood; outcomes {dict(sorted(outcomes.items()))}")
    print(
        f"{name}: RSS before {before / mib:.0f} MiB, peak {peak / mib:.0f} MiB, after {after / mib:.0f} MiB:"
        f" kept +{(after - before) / mib:.0f} MiB vs bound +{BOUND / mib:.0f} MiB -> {'ok' if ok else 'OVER'}"
        f" (peak +{(peak - before) / mib:.0f} MiB while 64 MiB messages were in flight)"
    )
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200, help="calls of each oversized kind per server")
    ap.add_argument("--in-flight", type=int, default=32, help="concurrent calls")
    args = ap.parse_args()
    token = auth.new_token()
    logs = {n: tempfile.TemporaryFile("w+") for n in ("controller", "relay")}
    ctl = subprocess.Popen(
        [sys.executable, "-c", _FLEET, token],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=logs["controller"],
        text=True,
    )
    assert ctl.stdout is not None
    ctl_addr = f"127.0.0.1:{int(ctl.stdout.readline())}"
    relay_addr = f"127.0.0.1:{free_port()}"
    env = {**os.environ, auth.TOKEN_ENV: token}
    relay = subprocess.Popen(
        [sys.executable, "-m", "swarmscope", "relay", "--upstream", ctl_addr, "--bind", relay_addr],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=logs["relay"],
        text=True,
    )
    ok = True
    try:
        for name, proc, address in (("controller", ctl, ctl_addr), ("relay", relay, relay_addr)):
            ok &= measure(name, proc, address, args.calls, args.in_flight)
    finally:
        relay.terminate()
        relay.wait(20)
        if ctl.stdin:
            ctl.stdin.close()
        ctl.wait(20)
    for name, fh in logs.items():
        fh.seek(0)
        text = fh.read()
        n = text.count("Traceback")
        print(f"{name}: {n} tracebacks in its stderr (want 0)")
        if n:
            print(text[-3000:])
        ok &= n == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
