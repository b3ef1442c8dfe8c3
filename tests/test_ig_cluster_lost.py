"""Inspektor Gadget's lost records split per node, through the ig-cluster adapter into the rows.

kubectl-gadget's output as recorded on the real cluster (tests/test_igcluster.py, node names
shortened) is replayed by a stand-in command; the adapter is the ig-cluster preset's (its match
and lost regex) and the window is reconciled as the controller does: each row's reported_lost is
the loss records that named its node; a record naming another node or none is in `lost` only.
"""

from __future__ import annotations

from pathlib import Path

from test_tracers import IG_CLUSTER_LINE

from swarmscope.controller.model import PointInfo, ProbeReading, WindowInfo, WindowOutcome
from swarmscope.controller.reconcile import reconcile
from swarmscope.controller.tracers import NodeKey, presets
from swarmscope.controller.tracers.command import CommandTracer

NODES = [NodeKey("rn-0", comm="sab12-rn-0"), NodeKey("rn-1", comm="sab12-rn-1")]
# The client's log line (logrus, not a terminal) for a gap in one gadget pod's stream: "%-20s | ...".
GAP = 'time="2026-11-28T04:06:31Z" level=warning msg="{:<20} | expected seq 21167, got 21785, 618 messages dropped"'  # noqa: E501


def event(node: str) -> str:
    line = IG_CLUSTER_LINE.replace("NODE", node).replace("COMPONENT", "workers")
    return line.replace("COMM", f"sab12-{node}")


def warn(node: str, n: int) -> str:
    return f'{{"k8s":{{"node":"{node}"}},"type":"warn","message":"lost {n} samples"}}'


RECORDED = [
    *[event("rn-0")] * 5,
    warn("rn-0", 173),
    *[event("rn-1")] * 3,
    warn("rn-0", 1354),
    warn("rn-1", 216),
    GAP.format("rn-1"),  # the gadget service's buffer for this client, on rn-1's gadget pod
    warn("rn-2", 9),  # a node outside the window: in `lost`, in no row
    '{"type":"warn","message":"lost 4 samples"}',  # names no node: in `lost` only
    event("rn-0"),
]


def replay(recorded: Path) -> CommandTracer:
    """The ig-cluster adapter on a command that prints the recording, then every sentinel a window
    can exec (the readiness and drain sentinels are real execs; only the tracer is a stand-in)."""

    def argv(nodes: list[NodeKey], prefix: str) -> list[str]:
        loop = f'i=0; while [ $i -lt 500 ]; do echo "{{\\"comm\\":\\"{prefix}$i\\"}}"; i=$((i+1)); done'
        return ["sh", "-c", f'cat "$0"; {loop}; exec sleep 60', str(recorded)]

    return CommandTracer(
        ["unused"], name="ig-cluster", match=presets.IG_CLUSTER_MATCH,
        lost_regex=presets.IG_CLUSTER_LOST_REGEX, argv_for=argv,
    )  # fmt: skip


def test_ig_lost_records_are_split_per_node_into_the_rows(tmp_path: Path) -> None:
    rec = tmp_path / "kubectl-gadget.out"
    rec.write_text("\n".join(RECORDED) + "\n")
    t = replay(rec)
    t.start("w1", NODES)
    res = t.stop()
    assert res.error == "" and res.per_node == {"rn-0": 6, "rn-1": 3}, res
    assert res.lost == 173 + 1354 + 216 + 618 + 9 + 4
    assert res.lost_by_node == {"rn-0": 173 + 1354, "rn-1": 216 + 618, "rn-2": 9}

    win = WindowInfo("r1", "w1", 0, 1, ["rn-0", "rn-1"])
    gen = {"rn-0": {"generated": 1533}, "rn-1": {"generated": 837}}
    readings = [ProbeReading("p0", "rn-0", {"exec": 1533}), ProbeReading("p1", "rn-1", {"exec": 837})]
    out = reconcile(WindowOutcome(win, PointInfo(0, {"nodes": 2}, 1), gen, readings, [], res), "exec")
    rows = {n.node: (n.kernel, n.reported, n.reported_lost) for n in out.per_node}
    assert rows == {"rn-0": (1533, 6, 1527), "rn-1": (837, 3, 834)}
    assert out.tracer_lost == 2374 and out.extra["tracer"]["lost_by_node"] == res.lost_by_node
    assert out.flags == []


def test_a_tracer_whose_loss_records_name_no_node_leaves_reported_lost_null(tmp_path: Path) -> None:
    rec = tmp_path / "kubectl-gadget.out"
    rec.write_text("\n".join(RECORDED) + "\n")
    t = replay(rec)
    t.lost_regex = r"(?i)\blost (?P<n>\d+) samples?\b"  # the same records, no node group
    t.start("w1", NODES)
    res = t.stop()
    assert (res.lost, res.lost_by_node) == (173 + 1354 + 216 + 9 + 4, None)
    win = WindowInfo("r1", "w1", 0, 1, ["rn-0", "rn-1"])
    out = reconcile(WindowOutcome(win, PointInfo(0, {"nodes": 2}, 1), {}, [], [], res), "exec")
    assert [n.reported_lost for n in out.per_node] == [None, None]
