"""Cheap simulated probes for the fan-in benches: thousands of grpc.aio Sessions per process.

    procs = SimProbes.spawn(address, token, names, per_process=2500, cpus={1})
    procs.wait_registered(timeout_s=120); ...; procs.stop()

(bench/simprobes_compiled.py: GoSimProbes, the same probes compiled, same interface, ~5× less CPU.)

Probes take a list of upstreams (relays, then the controller): when a session breaks, a probe
registers again, same id, with the next one, keeping its open windows and its last answers, as
the real agent does. Each simulated probe does what tests/fakeprobe.py does over real gRPC: the Hello/Register
handshake (both HMAC proofs checked), one Session stream, a heartbeat at the interval Register
returns, an ack per OpenWindow and one WindowDone (a Reading per node asked, ``{"exec": 1000}``)
per CloseWindow. Unlike FakeProbe (a thread and a channel each), they are coroutines on one
event loop per process, and ``per_channel`` of them share one HTTP/2 connection, so 10,000 fit on
one core. Each process is this file run as a script, driven as bench/simprobes_go's are
(``SimProcesses``, shared by both kinds): its slice as one JSON line on stdin, the token in
its environment, "registered N" on stdout; it stops when its stdin ends. Caveat: shared
connections cost the server less per probe than one each would (the per-message cost, which
dominates a window, is the same).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import grpc

from swarmscope.core import auth
from swarmscope.core.sys.limits import raise_nofile
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pb_grpc

COUNTERS = {"exec": 1000}
# Handshakes (Hello + Register) in flight per process. Unbounded, 100,000 probes put ~6,000
# handshakes at once on each of 16 starved relays: their queue outgrew the 60 s RPC deadline and
# the 30 s Hello-to-Register window, new connections' HTTP/2 setup timed out too (UNAVAILABLE,
# then the channel's reconnect backoff fails every call on it at once), and each retry added to
# the queue: a join that stopped for good (docs/scale-out.md, "Joining 100,000"). Bounded, the queue
# waits here, where no deadline runs.
JOINS_IN_FLIGHT = 100


async def _register(stub: Any, token: str, name: str) -> Any:
    pid = f"sim-{name}"
    nonce = auth.new_nonce()
    key = auth.node_key(token, name)
    hello = await stub.Hello(pb.HelloRequest(probe_nonce=nonce, probe_id=pid, node=name), timeout=60)
    if not auth.check(auth.controller_proof(key, nonce, hello.server_nonce), hello.proof):
        raise RuntimeError("controller proof does not verify")
    return await stub.Register(
        pb.RegisterRequest(
            probe_id=pid,
            hostname=name,
            node_name=name,
            nonce=nonce,
            server_nonce=hello.server_nonce,
            proof=auth.probe_proof(key, hello.server_nonce, nonce, pid),
        ),
        timeout=60,
    )


async def _probe(
    stubs: list[Any],
    token: str,
    name: str,
    registered: list[int],
    failed: list[str],
    errors: Counter[str],
    joining: asyncio.Semaphore,
) -> None:
    """One simulated probe: ``stubs`` are its upstreams in turn (a relay died: the next one)."""
    pid = f"sim-{name}"
    # Open windows and recent answers outlive a session, as in the real agent: a close sent
    # again through the next upstream gets the same readings.
    windows: dict[str, list[pb.NodeInfo]] = {}
    answers: dict[str, bytes] = {}
    up = [False]  # counted in ``registered`` once, at its first session
    failures = 0
    rounds = 10  # bounded: every upstream, ten rounds (a starved server can take a minute to join)
    for attempt in range(len(stubs) * rounds):
        stub = stubs[attempt % len(stubs)]
        try:
            async with joining:
                reply = await _register(stub, token, name)
        except grpc.aio.AioRpcError as e:
            failures += 1
            errors[e.code().name] += 1
            if attempt == len(stubs) * rounds - 1:
                failed.append(f"{name}: {e.code().name} {e.details()}")
                return
            # A join storm can time out a Hello: back off as a whole fleet would, not in a storm
            # (jittered: probes that failed together must not come back together).
            await asyncio.sleep(min(5.0, 1.0 + failures) * random.uniform(0.5, 1.5))
            continue
        if await _session(stub, reply, pid, windows, answers, registered, up):
            return
        await asyncio.sleep(0.05)


# Messages every simulated probe of a process sends alike, serialized once: the simulator's
# per-message cost is what limits a 100,000-probe bench on two cores.
_HEARTBEAT = pb.ProbeMessage(heartbeat=pb.Heartbeat(unix_ns=1)).SerializeToString()
_ACKS: dict[tuple[str, str], bytes] = {}
SESSION = "/swarmscope.v1.ProbeControl/Session"


def _ack(run_id: str, window_id: str) -> bytes:
    data = _ACKS.get((run_id, window_id))
    if data is None:
        if len(_ACKS) > 64:
            _ACKS.clear()
        ack = pb.WindowAck(run_id=run_id, window_id=window_id, ok=True)
        data = _ACKS[(run_id, window_id)] = pb.ProbeMessage(ack=ack).SerializeToString()
    return data


async def _session(
    stub: Any,
    reply: Any,
    pid: str,
    windows: dict[str, list[pb.NodeInfo]],
    answers: dict[str, bytes],
    registered: list[int],
    up: list[bool],
) -> bool:
    """Serve one Session; True on Shutdown, False when the stream broke (try the next upstream).

    The stream carries bytes both ways (``stub.raw``: no serializers): commands are parsed here,
    the answers serialized once (an ack per window per process, a WindowDone per probe)."""
    call = stub.raw()
    writing = asyncio.Lock()  # grpc.aio allows one pending write per call

    async def send(data: bytes) -> None:
        async with writing:
            await call.write(data)

    async def beat() -> None:
        while True:
            await asyncio.sleep(reply.heartbeat_interval_s or 1.0)
            await send(_HEARTBEAT)

    beats = None
    try:
        first = pb.ProbeMessage(session_id=reply.session_id, heartbeat=pb.Heartbeat(unix_ns=1))
        await call.write(first.SerializeToString())
        beats = asyncio.create_task(beat())
        if not up[0]:
            up[0] = True
            registered[0] += 1
        async for raw in call:
            cmd = pb.Command.FromString(raw)
            kind = cmd.WhichOneof("kind")
            if kind == "open":
                windows.setdefault(cmd.open.window_id, list(cmd.open.nodes))  # again: same snapshot
                await send(_ack(cmd.open.run_id, cmd.open.window_id))
            elif kind == "close":
                c = cmd.close
                if c.window_id not in answers:
                    batch = [
                        pb.Reading(
                            run_id=c.run_id,
                            window_id=c.window_id,
                            probe_id=pid,
                            node=n.name,
                            counters=COUNTERS,
                        )
                        for n in windows.pop(c.window_id, [])
                    ]
                    done = pb.WindowDone(
                        run_id=c.run_id, window_id=c.window_id, readings=len(batch), batch=batch
                    )
                    answers[c.window_id] = pb.ProbeMessage(done=done).SerializeToString()
                    while len(answers) > 8:
                        answers.pop(next(iter(answers)))
                await send(answers[c.window_id])
            elif kind == "shutdown":
                return True
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        pass
    finally:
        if beats is not None:
            beats.cancel()
        call.cancel()
    return False


def _stub(channel: Any) -> Any:
    stub = pb_grpc.ProbeControlStub(channel)
    stub.raw = channel.stream_stream(SESSION)  # bytes in, bytes out
    return stub


def upstreams_of(i: int, upstreams: list[str], spread: int) -> list[int]:
    """Probe ``i``'s upstreams in turn (indexes): the first ``spread`` (the relays) dealt round
    robin, each probe starting at its own, then the rest (the controller) as the last resort."""
    return [(i + k) % spread for k in range(spread)] + list(range(spread, len(upstreams)))


async def _host(
    upstreams: list[str],
    spread: int,
    first: int,
    token: str,
    names: list[str],
    per_channel: int,
    stop: threading.Event,
) -> None:
    count, failed, errors = [0], list[str](), Counter[str]()
    joining = asyncio.Semaphore(JOINS_IN_FLIGHT)
    # A local subchannel pool: each channel its own TCP connection (grpc shares them otherwise).
    # Channels connect at their first call: one per upstream and group costs nothing unused.
    # A channel whose connection failed in a join storm fails every call at once until its next
    # try: cap that wait at 5 s (gRPC's default grows to 120 s).
    opts = [
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.max_receive_message_length", 64 * 2**20),
        ("grpc.max_reconnect_backoff_ms", 5000),
    ]
    channels = [
        [grpc.aio.insecure_channel(u, opts) for u in upstreams] for _ in range(0, len(names), per_channel)
    ]
    stubs = [[_stub(ch) for ch in group] for group in channels]
    tasks = []
    for i, name in enumerate(names):
        group = stubs[i // per_channel]
        mine = [group[u] for u in upstreams_of(first + i, upstreams, spread)]
        tasks.append(asyncio.create_task(_probe(mine, token, name, count, failed, errors, joining)))
        if i % 200 == 199:
            await asyncio.sleep(0.05)  # a paced join: no Hello storm of thousands at once
    last, said, t_said = -1, Counter[str](), time.monotonic()
    while not stop.is_set():
        if errors != said and time.monotonic() - t_said > 10:  # what a slow join is made of
            what = f"{count[0]}/{len(names)} up, handshake errors {dict(errors)}"
            print(f"simprobes {first}: {what}", file=sys.stderr, flush=True)
            said, t_said = Counter(errors), time.monotonic()
        if failed:
            print(f"simprobes: {len(failed)} failed to join, e.g. {failed[0]}", file=sys.stderr, flush=True)
            failed.clear()
        if count[0] != last:
            print(f"registered {count[0]}", flush=True)
            last = count[0]
        await asyncio.sleep(0.2)
    for t in tasks:
        t.cancel()
    for group in channels:
        for ch in group:
            await ch.close()


def main() -> None:
    """One process of simulated probes: SWARMSCOPE_TOKEN, its slice as one JSON line on stdin;
    "registered N" on stdout as N changes; it stops when stdin ends (bench/simprobes_go's protocol)."""
    token = os.environ["SWARMSCOPE_TOKEN"].strip()
    part = json.loads(sys.stdin.readline())
    stop = threading.Event()

    def until_stdin_ends() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_stdin_ends, daemon=True).start()
    raise_nofile()  # thousands of client connections per process (per_channel=1: one per probe)
    names, per_channel = part["names"], part["per_channel"]
    asyncio.run(_host(part["upstreams"], part["spread"], part["first"], token, names, per_channel, stop))


class _Count:
    """``registered.value``: the probes whose first Session is up, over every process."""

    def __init__(self, n: int):
        self.per_proc = [0] * n

    @property
    def value(self) -> int:
        return sum(self.per_proc)


class _Stop:
    """``stop_event.set()``: the processes' stdin closed, so each one exits."""

    def __init__(self, procs: list[subprocess.Popen[str]]):
        self.procs = procs

    def set(self) -> None:
        for p in self.procs:
            try:
                if p.stdin is not None:
                    p.stdin.close()
            except OSError:
                pass  # already gone: its pipe is broken


def end(procs: list[subprocess.Popen[str]], grace_s: float) -> None:
    """Close every process's stdin (each exits at its end), kill what is left after ``grace_s``."""
    _Stop(procs).set()
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


class SimProcesses:
    """OS processes of simulated probes, ``per_process`` each, of either kind (``spawn``'s
    ``command``): ``procs`` (Popen), ``registered.value`` (the probes whose first Session is
    up), ``wait_registered``, ``n`` (how many were spawned), ``stop``, ``stop_event.set()``.
    Plain subprocesses, not multiprocessing's: its spawn starts a resource tracker in the
    caller that lives as long as the caller does (in a test run: past the test, to the end)."""

    def __init__(self, procs: list[subprocess.Popen[str]], n: int):
        self.procs, self.n = procs, n
        self.registered = _Count(len(procs))
        self.stop_event = _Stop(procs)
        self._readers = [
            threading.Thread(target=self._read, args=(i,), daemon=True) for i, _ in enumerate(procs)
        ]
        for t in self._readers:
            t.start()

    def _read(self, i: int) -> None:
        out = self.procs[i].stdout
        assert out is not None
        for line in out:
            if line.startswith("registered "):
                self.registered.per_proc[i] = int(line.split()[1])

    @classmethod
    def command(cls) -> tuple[list[str], dict[str, str]]:
        """The argv of one process and what its environment adds."""
        raise NotImplementedError

    @classmethod
    def spawn(
        cls,
        address: str | list[str],
        token: str,
        names: list[str],
        per_process: int = 2500,
        per_channel: int = 50,
        cpus: set[int] | None = None,
        spread: int = 1,
    ) -> Any:
        """``address``: one upstream, or a list: probe i starts at upstream ``i % spread`` of the
        first ``spread`` (relays), then tries the others, then the rest (``upstreams_of``)."""
        argv, env = cls.command()
        upstreams = [address] if isinstance(address, str) else list(address)
        env = dict(os.environ, SWARMSCOPE_TOKEN=token, **env)  # the token never in argv
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        procs = []
        for i in range(0, len(names), per_process):
            part = {
                "upstreams": upstreams,
                "spread": spread,
                "first": i,
                "names": names[i : i + per_process],
                "per_channel": per_channel,
            }
            p = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, preexec_fn=pin
            )
            assert p.stdin is not None
            p.stdin.write(json.dumps(part) + "\n")
            p.stdin.flush()  # and kept open: its end is the stop
            procs.append(p)
        return cls(procs, len(names))

    def wait_registered(self, n: int | None = None, timeout_s: float = 120.0) -> None:
        """Until ``n`` (default: all) have their first Session up; TimeoutError past ``timeout_s``."""
        n = self.n if n is None else n
        deadline = time.monotonic() + timeout_s
        while self.registered.value < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.registered.value}/{n} simulated probes registered in {timeout_s}s")
            time.sleep(0.1)

    def stop(self, grace_s: float = 5.0) -> None:
        """Close every process's stdin (each exits), kill what is left after ``grace_s`` (in all):
        closing thousands of channels can take a process longer than the bench cares to wait."""
        end(self.procs, grace_s)
        for t in self._readers:
            t.join(5)  # they end at their pipe's end, now the processes have


class SimProbes(SimProcesses):
    """Processes of these (grpc.aio) simulated probes: this file run as a script."""

    @classmethod
    def command(cls) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, __file__], {}


if __name__ == "__main__":
    main()
