"""Classify one line a tracer printed: sentinel, loss warning, node event, other event, noise.

    p = LineParser(nodes, match=r"^(?P<comm>.*) (?P<cgroup>\\d+)$", sentinel_prefix="ss-sync-a3f")
    p.feed("ss-n1 4711")        # -> Line("event", node="n1")
    p.feed("Lost 12 events")    # -> Line("lost", lost=12)
    # with a lost regex that has a (?P<node>...) group: Line("lost", lost=12, node="rn-1")
    p.feed("ss-sync-a3f7 1")    # -> Line("sentinel", sentinel=7)

Order matters and is fixed: a sentinel is recognised first (anywhere in the line, so it works
for text and JSON tracers alike and is never counted), then the loss warning, then the event
pattern (``match`` regex, or ``json_field`` for JSON lines). Attribution tries the regex groups
in the order cgroup, node, comm and takes the first that names a node of the window — except
that a line whose cgroup is not one of the window's nodes is "other" even when its comm
matches (another run's storm may use the same per-node comm).

Caveats: the kernel truncates comm to 15 characters, so node comms are compared truncated.
A JSON field is compared against cgroup ids, node names and comms alike.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from swarmscope.controller.tracers.base import NodeKey

TASK_COMM_LEN = 15  # characters of comm the kernel keeps (16 bytes with the NUL)


@dataclass(frozen=True)
class Line:
    kind: str  # "sentinel" | "lost" | "event" | "other" | "noise"
    # "lost": the node the loss record named, as printed (maybe none); "sentinel": the node the
    # line came from (``sentinel_node``), as printed
    node: str | None = None
    lost: int = 0
    sentinel: int | None = None


def json_path(obj: Any, path: str) -> Any:
    """``json_path({"a": {"b": 1}}, "a.b") == 1``; None when any step is missing."""
    cur = obj
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return None
    return cur


class LineParser:
    def __init__(
        self,
        nodes: list[NodeKey],
        match: str | None = None,
        json_field: str | None = None,
        lost_regex: str | None = None,
        sentinel_prefix: str = "ss-sync-",
        sentinel_node: str | None = None,
    ):
        if not match and not json_field:
            raise ValueError("need a match regex or a json field")
        self.match = re.compile(match) if match else None
        self.json_field = json_field
        self.lost = re.compile(lost_regex) if lost_regex else None
        # The sentinel number is greedy digits right after the per-window prefix, so 1 and 12
        # cannot be confused.
        self.sentinel_prefix = sentinel_prefix
        self.sentinel = re.compile(re.escape(sentinel_prefix) + r"(\d+)")
        self.sentinel_node = re.compile(sentinel_node) if sentinel_node else None
        # cgroup ids are inode numbers, never 0: a 0 (protobuf's "unset") means unknown.
        self.by_cgroup = {str(n.cgroup_id): n.name for n in nodes if n.cgroup_id}
        self.by_name = {n.name: n.name for n in nodes}
        self.by_comm = {n.comm[:TASK_COMM_LEN]: n.name for n in nodes if n.comm}

    def unattributable(self, nodes: list[NodeKey]) -> list[str]:
        """Nodes no line could ever be attributed to (e.g. a comm-only tracer, a node without comm)."""
        if self.match is not None:
            kinds = set(self.match.groupindex)
        else:
            assert self.json_field is not None
            last = self.json_field.rsplit(".", 1)[-1]
            kinds = {"comm"} if last in ("comm", "pcomm") else {"cgroup", "comm", "node"}
        bad = []
        for n in nodes:
            if "node" in kinds:
                continue
            if ("cgroup" in kinds and n.cgroup_id) or ("comm" in kinds and n.comm):
                continue
            bad.append(n.name)
        return bad

    def _lookup(self, kind: str, value: Any) -> str | None:
        if value is None:
            return None
        text = str(value).strip()
        if kind == "cgroup":
            return self.by_cgroup.get(text)
        if kind == "node":
            return self.by_name.get(text)
        if kind == "comm":
            return self.by_comm.get(text[:TASK_COMM_LEN])
        # JSON: the field may hold any of the three
        return self.by_cgroup.get(text) or self.by_name.get(text) or self.by_comm.get(text[:TASK_COMM_LEN])

    def feed(self, line: str) -> Line:
        m = self.sentinel.search(line) if self.sentinel_prefix in line else None  # `in` is cheap
        if m:
            where = self.sentinel_node.search(line) if self.sentinel_node is not None else None
            return Line("sentinel", sentinel=int(m.group(1)), node=where.group("node") if where else None)
        if self.lost is not None:
            m = self.lost.search(line)
            if m:
                n = m.group("n") if "n" in self.lost.groupindex else m.group(1)
                node = (m.group("node") or "").strip() if "node" in self.lost.groupindex else ""
                return Line("lost", lost=int(n), node=node or None)
        if self.match is not None:
            m = self.match.search(line)
            if not m:
                return Line("noise")
            groups = m.groupdict()
            for kind in ("cgroup", "node", "comm"):
                value = groups.get(kind)
                node = self._lookup(kind, value)
                if node is not None:
                    return Line("event", node=node)
                if kind == "cgroup" and value is not None and self.by_cgroup:
                    # The line names its cgroup and it is none of ours: it is another process
                    # that happens to share a comm (another run's "ss-n1"), not our node.
                    return Line("other")
            return Line("other")
        assert self.json_field is not None
        s = line.strip()
        if not s.startswith("{"):
            return Line("noise")
        try:
            obj = json.loads(s)
        except ValueError:
            return Line("noise")
        value = json_path(obj, self.json_field)
        if value is None:
            return Line("noise")  # not an event record (ig's info/warn records have no such field)
        node = self._lookup("any", value)
        return Line("event", node=node) if node is not None else Line("other")
