"""A per-flow fingerprint of a flow table: (5-tuple, packets, bytes) rows in one number.

    flow_digest([(("10.98.0.1", "10.200.0.0", 40000, 20000, 17), 2, 256), ...])  # int < 2**52

Computed by the probe's ``flow_count`` over what it drained and by the flow storm's worker
over what its generator sent; the reconcile compares the two at every window, so kernel ==
generated is checked flow by flow without shipping the flows. Pure Python, no BCC: the
controller side imports it too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

FlowKey = tuple[str, str, int, int, int]
DIGEST_BITS = 52  # a gauge is a double: integers below 2**53 are exact


def flow_digest(flows: Iterable[tuple[FlowKey, int, int]]) -> int:
    """A per-flow fingerprint of (5-tuple, packets, bytes) rows, order-free: the sum of each
    row's 52-bit BLAKE2b, mod 2**52. Two tables with equal digests hold the same flows with the
    same counts, flow by flow, except with probability about 2**-52 (a wrong count, a missing or an
    extra flow changes its row's term). The worker computes it over what it sent (flow_gen),
    the probe over what it drained; reconcile compares the two at every window."""
    mask = (1 << DIGEST_BITS) - 1
    total = 0
    for (src, dst, sport, dport, proto), packets, nbytes in flows:
        row = f"{src} {dst} {sport} {dport} {proto} {packets} {nbytes}".encode()
        total += int.from_bytes(hashlib.blake2b(row, digest_size=8).digest(), "little") & mask
    return total & mask
