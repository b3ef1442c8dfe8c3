"""The fleet's pending Hellos: one-time server nonces, bounded per peer, in total and in time.

    hellos = PendingHellos()
    hellos.add("ipv4:10.0.0.7:51234", server_nonce, probe_nonce, time.monotonic())
    hellos.take(server_nonce, time.monotonic())   # the probe nonce, once, if fresh; else None
    hellos.expire(time.monotonic())               # the fleet calls this on a timer

Hello is unauthenticated, so what it keeps must not grow with what a stranger sends: nonces
are exactly ``auth.NONCE_BYTES`` (the fleet refuses others), an entry is ~300 bytes, a peer
(an address, ports aside) holds at most ``per_peer`` entries (its oldest goes first, so a
flood from one address evicts only its own), the table at most ``total`` (the oldest goes
first), and entries older than ``ttl_s`` go on a timer, not only when the next Hello comes.
Caveat: probes behind one address (a NAT, or a bench's thousands on loopback) share that
address's ``per_peer``: a Hello evicted before its Register is retried by the probe's backoff.
"""

from __future__ import annotations

from collections import OrderedDict

HELLO_TTL_S = 30.0
MAX_PER_PEER = 4096
MAX_PENDING = 65536


def peer_address(peer: str) -> str:
    """grpc's ``ipv4:1.2.3.4:5678`` / ``ipv6:[::1]:5678`` without the port."""
    head, sep, tail = peer.rpartition(":")
    return head if sep and tail.isdigit() else peer


class PendingHellos:
    """server nonce -> (probe nonce, time, peer); the caller serializes access (the fleet's lock)."""

    def __init__(self, ttl_s: float = HELLO_TTL_S, per_peer: int = MAX_PER_PEER, total: int = MAX_PENDING):
        self.ttl_s, self.per_peer, self.total = ttl_s, per_peer, total
        self._all: OrderedDict[bytes, tuple[bytes, float, str]] = OrderedDict()
        self._by_peer: dict[str, OrderedDict[bytes, None]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def peers(self) -> int:
        return len(self._by_peer)

    def add(self, peer: str, server_nonce: bytes, probe_nonce: bytes, now: float) -> None:
        self.expire(now)
        addr = peer_address(peer)
        mine = self._by_peer.get(addr)
        if mine is not None and len(mine) >= self.per_peer:
            self._drop(next(iter(mine)))
        if len(self._all) >= self.total:
            self._drop(next(iter(self._all)))
        self._all[server_nonce] = (probe_nonce, now, addr)
        self._by_peer.setdefault(addr, OrderedDict())[server_nonce] = None

    def take(self, server_nonce: bytes, now: float) -> bytes | None:
        """The probe nonce of a fresh Hello, removed (one use only); None if unknown or stale."""
        entry = self._all.get(server_nonce)
        if entry is None:
            return None
        self._drop(server_nonce)
        return entry[0] if now - entry[1] <= self.ttl_s else None

    def expire(self, now: float) -> int:
        """Drop the entries older than ``ttl_s`` (oldest first); return how many went."""
        n = 0
        while self._all:
            nonce, (_, t, _) = next(iter(self._all.items()))
            if now - t <= self.ttl_s:
                break
            self._drop(nonce)
            n += 1
        return n

    def _drop(self, server_nonce: bytes) -> None:
        _, _, addr = self._all.pop(server_nonce)
        mine = self._by_peer[addr]
        del mine[server_nonce]
        if not mine:
            del self._by_peer[addr]
