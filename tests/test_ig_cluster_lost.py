"""Inspektor Gadget's lost records split per node, through the ig-cluster adapter into the rows.

kubectl-gadget's output as recorded on the real cluster (tests/test_igcluster.py, node names
shortened) is replayed by a stand-in command; the adapter is the ig-cluster preset's (its match
and lost regex) and the window is reconciled as the controller does: each row's reported_lost is
the loss records that named its node; a record naming another node or none is in `lost` only.
The drain: each node's probe execs its sentinels in its own pod, and the adapter waits for them
in that node's events, so a node's late loss record is still in its row.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from test_tracers import IG_CLUSTER_LINE

from swarmscope.controller.model import PointInfo, ProbeReading, WindowInfo, WindowOutcome
from swarmscope.controller.reconcile import reconcile
from swarmscope.controller.tracers import NodeKey, TracerResult, presets
from swarmscope.controller.tracers.command import DRAIN_ROUNDS, CommandTracer

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


def sentinel(node: str, comm: str) -> str:
    """A drain sentinel as IG reports it: an exec in the probe pod on ``node``."""
    return IG_CLUSTER_LINE.replace("NODE", node).replace("COMPONENT", "probes").replace("COMM", comm)


def replay(recorded: Path, drain: Path | None = None) -> CommandTracer:
    """The ig-cluster adapter on a command that prints the recording, then readiness sentinels
    (the controller's execs are real; only the tracer is a stand-in), then, once ``drain`` is
    written, 0.5 s later, the rest of the recording: what came after the window's close."""

    def argv(nodes: list[NodeKey], prefix: str) -> list[str]:
        loop = f'i=0; while [ $i -lt 500 ]; do echo "{{\\"comm\\":\\"{prefix}$i\\"}}"; i=$((i+1)); done'
        late = 'while [ ! -e "$1" ]; do sleep 0.05; done; sleep 0.5; cat "$1"; ' if drain else ""
        return ["sh", "-c", f'cat "$0"; {loop}; {late}exec sleep 60', str(recorded), str(drain)]

    return CommandTracer(
        ["unused"], name="ig-cluster", match=presets.IG_CLUSTER_MATCH,
        lost_regex=presets.IG_CLUSTER_LOST_REGEX, argv_for=argv,
        sentinel_node=presets.IG_CLUSTER_SENTINEL_NODE, drain_timeout_s=5,
    )  # fmt: skip


def close(
    t: CommandTracer, drain: Path, late: Callable[[str, int], list[str]], cpus: dict[str, int]
) -> TracerResult:
    """The window's close: each node's probe ran the drain on its ``cpus`` CPUs (its reading
    lists every round's numbers), and the tracer printed ``late(prefix, first)`` after it."""
    asked = t.node_drain()
    assert asked is not None
    prefix, first, rounds = asked
    assert rounds == DRAIN_ROUNDS
    tmp = drain.with_suffix(".tmp")
    tmp.write_text("\n".join(late(prefix, first)) + "\n")
    os.rename(tmp, drain)
    t.expect_drained({n: list(range(first, first + rounds * c)) for n, c in cpus.items()})
    return t.stop()


def counts(res: TracerResult) -> dict[str, tuple[float, float, float]]:
    """Per node: its CPUs, those drained, the drain's sentinels dropped."""
    assert res.drained is not None
    return {n: (c["cpus"], c["seen"], c["dropped"]) for n, c in res.drained.items()}


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


def test_a_tracer_stops_on_its_sigint_when_we_were_started_with_sigint_ignored(tmp_path: Path) -> None:
    """Started in the background (``nohup … &``: a non-interactive shell starts it with SIGINT
    ignored), the controller's tracer still stops on the stop's SIGINT: the stand-in's ``sleep``
    sets no handler and would inherit the ignore (then sit out 10 s and be SIGKILLed)."""
    rec = tmp_path / "kubectl-gadget.out"
    rec.write_text("\n".join(RECORDED) + "\n")
    t = replay(rec)
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job starts
    try:
        t.start("w1", NODES)
    finally:
        signal.signal(signal.SIGINT, before)
    t0 = time.monotonic()
    res = t.stop()
    stopped_s = time.monotonic() - t0
    assert not any("ignored SIGINT" in w for w in res.warnings), res.warnings
    assert res.error == "" and res.per_node == {"rn-0": 6, "rn-1": 3}, res
    assert stopped_s < 5, stopped_s  # SIGINT, not the 10 s bound and SIGKILL


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


def test_the_drain_waits_for_a_sentinel_of_each_cpu_in_each_nodes_stream(tmp_path: Path) -> None:
    rec, drain = tmp_path / "kubectl-gadget.out", tmp_path / "drain.out"
    rec.write_text("\n".join(RECORDED) + "\n")

    # rn-1 (2 CPUs: round r, CPU i is number k + 2r + i) is behind: its loss records and its
    # sentinels come 0.5 s after the close. Its CPU 1 dropped its first sentinel (the record comes
    # before the CPU's next sample): the second round's is what drains that CPU.
    def late(p: str, k: int) -> list[str]:
        return [
            sentinel("rn-0", f"{p}{k}"),
            warn("rn-1", 40),
            sentinel("rn-1", f"{p}{k}"),
            warn("rn-1", 1),
            sentinel("rn-1", f"{p}{k + 3}"),
            sentinel("rn-1", f"{p}{k + 2}"),  # CPU 0's second round: no drop of CPU 0
        ]

    t = replay(rec, drain)
    t.start("w1", NODES)
    t0 = time.monotonic()
    res = close(t, drain, late, {"rn-0": 1, "rn-1": 2})
    assert time.monotonic() - t0 < 4  # it ended on the sentinels, not on its 5 s timeout
    assert counts(res) == {"rn-0": (1, 1, 0), "rn-1": (2, 2, 1)}, res.warnings
    assert res.drained is not None and all(c["s"] >= 0.5 for c in res.drained.values())  # the late lines
    assert not [w for w in res.warnings if w.startswith("swarmscope:")], res.warnings
    # Stopped without that wait, rn-1's late loss record would be missing from its split; its
    # dropped sentinel is in `lost` (IG's record) and in sentinels_lost, not in its row's loss.
    assert res.lost_by_node == {"rn-0": 173 + 1354, "rn-1": 216 + 618 + 40, "rn-2": 9}
    assert (res.lost, res.sentinels_lost) == (173 + 1354 + 216 + 618 + 9 + 4 + 40 + 1, 1)
    assert res.per_node == {"rn-0": 6, "rn-1": 3}


def test_a_sentinel_counts_only_for_the_node_and_number_its_probe_ran(tmp_path: Path) -> None:
    rec, drain = tmp_path / "kubectl-gadget.out", tmp_path / "drain.out"
    rec.write_text("\n".join(RECORDED) + "\n")
    nodes = [*NODES, NodeKey("rn-3", comm="sab12-rn-3")]

    def late(p: str, k: int) -> list[str]:
        return [
            sentinel("rn-0", f"{p}{k}"),
            sentinel("rn-0", f"{p}{k + 1}"),  # rn-1's CPU 1, from rn-0's stream
            sentinel("rn-1", f"{p}{k - 1}"),  # a readiness number (the controller's), not a drain's
            sentinel("rn-1", f"{p}{k}"),  # rn-1's CPU 0
        ]

    t = replay(rec, drain)
    t.drain_timeout_s = 1.0
    t.start("w1", nodes)
    t0 = time.monotonic()
    res = close(t, drain, late, {"rn-0": 1, "rn-1": 2})  # rn-3's probe ran none
    assert time.monotonic() - t0 >= 1.0  # waited its bound for rn-1, then said so
    assert counts(res) == {"rn-0": (1, 1, 0), "rn-1": (2, 1, 0), "rn-3": (0, 0, 0)}
    assert res.drained is not None and "s" not in res.drained["rn-1"]
    ours = [w for w in res.warnings if w.startswith("swarmscope:")]
    assert ours == [
        "swarmscope: node rn-1: no drain sentinel back from 1 of its 2 CPUs within 1 s; "
        "its last events may be missing",
        "swarmscope: node rn-3: its probe ran no drain sentinels; its last events may be missing",
    ]
