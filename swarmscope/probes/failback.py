"""Going home: a probe serving a later upstream (it fell back) moves to its first one when that
one answers again.

    watch = Failback(every_s=30.0)
    watch.start(ended, answers=lambda: hello_ok(...), idle=lambda: not windows, move=call.cancel)
    ...
    if watch.moved.is_set(): ...   # the session ended because of the move: dial upstreams[0]

Why: upstreams are "relays first, the controller last". A probe lands on the controller when its
relay is not there yet (a Service whose pod is not ready refuses at once, so a probe that starts
before its relay dials the controller) or when its relay restarts; without this it stays there
for good and the relays' fan-in is lost one probe at a time (docs/scale-out.md, "Failback").
Caveats: the check is a Hello, proof checked, nothing registered (the upstream keeps a pending
Hello for a few seconds, bounded); the move waits for a moment with no open window (one that
opens in between moves along, as on any reconnect); checks are jittered (x0.5-1.5) so a fleet
that fell back together does not go home in one burst.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import grpc

from swarmscope.core import auth
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pbg

# While the preferred upstream answers but a window is open: how often to look for a gap.
IDLE_POLL_S = 0.2


def hello_ok(channel: grpc.Channel, key: str, probe_id: str, node: str, timeout_s: float) -> bool:
    """True when the upstream behind ``channel`` answers Hello and proves it holds ``node``'s key."""
    nonce = auth.new_nonce()
    try:
        hello = pbg.ProbeControlStub(channel).Hello(
            pb.HelloRequest(probe_nonce=nonce, probe_id=probe_id, node=node), timeout=timeout_s
        )
    except grpc.RpcError:
        return False
    return auth.check(auth.controller_proof(key, nonce, hello.server_nonce), hello.proof)


class Failback:
    """One watcher per session served away from home; ``moved`` says the session ended for it."""

    def __init__(self, every_s: float, rand: Callable[[float, float], float] | None = None):
        self.every_s = every_s
        self._rand = rand or random.uniform
        self.moved = threading.Event()

    def start(
        self,
        ended: threading.Event,
        answers: Callable[[], bool],
        idle: Callable[[], bool],
        move: Callable[[], None],
    ) -> threading.Thread | None:
        """Watch until ``ended``; None when failback is off (``every_s`` <= 0)."""
        if self.every_s <= 0:
            return None
        t = threading.Thread(
            target=self._watch, args=(ended, answers, idle, move), name="probe-failback", daemon=True
        )
        t.start()
        return t

    def _watch(
        self,
        ended: threading.Event,
        answers: Callable[[], bool],
        idle: Callable[[], bool],
        move: Callable[[], None],
    ) -> None:
        while not ended.wait(self.every_s * self._rand(0.5, 1.5)):
            if not answers():
                continue
            while not idle():  # between windows only
                if ended.wait(IDLE_POLL_S):
                    return
            self.moved.set()
            move()
            return
