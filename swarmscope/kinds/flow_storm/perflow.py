"""Per flow: what a flow exporter reported for each 5-tuple against what was sent to it.

    sent_digest(gen_result, first=0, count=10000, frame_bytes=128)  # == the kernel's flow.digest
    per_flow_check(agent_window, gen_result, first=0, count=10000, frame_bytes=128)
    # {"missing": 0, "split": 12, "short": 0, "over": 0, "extra": 0, "exact": 9988}

``agent_window["per_flow"]`` maps "dst:dport:proto" to [packets, L3 bytes, records] (the
collector's view, targets/flow_agent/collector.py), or frame bytes when ``per_flow_bytes`` is
"frame" (the reference agent's exported records, folded by targets/flow_agent.fold_records).
The generator's flows are known by construction (workers/flow_gen.py: flow i's address and the
packets it got), and the kernel equals them flow by flow (the flow_count reconcile), so "sent"
here is the kernel's count too.
A flow is ``missing`` when it was sent and never exported, ``split`` when it was exported in
more than one record (more than one eviction: maxlife, cache full), ``short`` / ``over`` when
its records add up to fewer / more packets or bytes than it got, ``extra`` when a record names
a flow nobody sent, and ``exact`` when its packets and bytes are equal (split or not).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmscope.probes.flowdigest import flow_digest
from swarmscope.workers.flow_gen import PROTOS, flow_addr, flow_key, sent_per_flow


def sent_digest(gen: Mapping[str, Any], first: int, count: int, frame_bytes: int, proto: str = "udp") -> int:
    """flow_digest over what the generator sent, flow by flow (flows that got no packet are in
    no table): equal to the kernel's ``flow.digest`` when every flow's packets and bytes are."""
    rows = ((flow_key(first + i, proto), sent_per_flow(dict(gen), i)) for i in range(count))
    return flow_digest((k, p, p * frame_bytes) for k, p in rows if p)


ETH_HLEN = 14  # what the exporters' L3 octets lack against the frame (docs/flow_storm.md)


def per_flow_check(
    agent: Mapping[str, Any],
    gen: Mapping[str, Any],
    first: int,
    count: int,
    frame_bytes: int,
    proto: str = "udp",
) -> dict[str, int]:
    rows: dict[str, list[int]] = dict(agent.get("per_flow") or {})
    # the real exporters count IPv4 total length; the reference agent counts frames (skb->len)
    l3 = frame_bytes - (0 if agent.get("per_flow_bytes") == "frame" else ETH_HLEN)
    out = dict.fromkeys(("missing", "split", "short", "over", "extra", "exact"), 0)
    for i in range(count):
        want = sent_per_flow(dict(gen), i)
        a, p = flow_addr(first + i)
        row = rows.pop(f"{a}:{p}:{PROTOS[proto]}", None)
        if row is None:
            out["missing"] += 1 if want else 0
            continue
        pk, by, records = (int(x) for x in row[:3])
        out["split"] += records > 1
        if (pk, by) == (want, want * l3):
            out["exact"] += 1
        elif pk < want or by < want * l3:
            out["short"] += 1
        else:
            out["over"] += 1
    out["extra"] = len(rows)
    return out
