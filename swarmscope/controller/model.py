"""The controller's generic notions: run, point, window, reading, reconciled result.

Nothing here is exec-specific: a *metric* names what is counted ("exec", "requests",
"neighbors"), and every window reconciles three numbers per node for it:

- **generated** — counted exactly by the load generator (the worker);
- **kernel** — counted exactly in the kernel by a probe;
- **reported** — what the system or tracer under test said (None when there is none).

    r = NodeCount(node="n1", generated=4000, kernel=4000, reported=3900)
    r.loss_ratio   # 0.025 = 1 - reported / kernel
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any


def new_run_id(scenario: str) -> str:
    """``<YYYYmmdd-HHMMSS>-<scenario>-<4 hex>``: sortable by start, unique per run."""
    return time.strftime("%Y%m%d-%H%M%S") + f"-{scenario}-{uuid.uuid4().hex[:4]}"


@dataclass
class RunInfo:
    run_id: str
    scenario: str
    metric: str  # the counted thing: "exec", "requests", ...
    config: dict[str, Any]
    started_ns: int
    run_dir: str = ""
    trace_id: str = ""


@dataclass
class PointInfo:
    """One point of a sweep: its index and the swept parameters (e.g. {"nodes": 5})."""

    index: int
    params: dict[str, Any]
    iterations: int


@dataclass
class WindowInfo:
    run_id: str
    window_id: str
    point: int
    iteration: int
    nodes: list[str]
    opened_ns: int = 0
    closed_ns: int = 0
    traceparent: str = ""


@dataclass(frozen=True)
class ReadingSample:
    """One per-event record of a reading (see proto Sample), e.g. one map-update call."""

    series: str
    start_ns: int
    end_ns: int
    value: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class ProbeReading:
    """One node's reading from one probe for one window (see proto Reading)."""

    probe_id: str
    node: str
    counters: dict[str, int]
    gauges: dict[str, float] = field(default_factory=dict)
    start_ns: int = 0
    end_ns: int = 0
    error: str = ""
    samples: list[ReadingSample] = field(default_factory=list)
    pod: str = ""  # "namespace/pod/container" of the node's cgroup ("" when it is no pod's)
    drained: list[int] = field(default_factory=list)  # drain sentinels its probe exec'd at close


@dataclass
class NodeCount:
    node: str
    generated: int | None
    kernel: int | None
    reported: int | None = None
    reported_lost: int | None = None  # what the tracer itself said it lost
    missing: list[str] = field(default_factory=list)  # "worker", "probe", "tracer"
    rate: float | None = None  # generated per second, as the worker measured it
    pod: str | None = None  # "namespace/pod/container" the probe counted (Kubernetes nodes)

    @property
    def loss_ratio(self) -> float | None:
        return loss_ratio(self.reported, self.kernel)

    @property
    def loss_vs_reported(self) -> float | None:
        return loss_vs_reported(self.generated, self.reported)

    @property
    def harness_ok(self) -> bool | None:
        """generated == kernel; None when either is missing."""
        if self.generated is None or self.kernel is None:
            return None
        return self.generated == self.kernel


def loss_ratio(reported: int | None, kernel: int | None) -> float | None:
    if reported is None or kernel is None or kernel == 0:
        return None
    return 1.0 - reported / kernel


def loss_vs_reported(generated: int | None, reported: int | None) -> float | None:
    """The exec-storm write-up's loss: (generated - reported) / reported (docs/report-json.md).

    Not :func:`loss_ratio` (1 - reported / kernel): relative to what was reported, it grows
    past 1 when most events are lost (35.5 % here is 26.2 % there, on the same numbers)."""
    if generated is None or reported is None or reported == 0:
        return None
    return (generated - reported) / reported


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


@dataclass
class IterationResult:
    run_id: str
    point: int
    params: dict[str, Any]
    iteration: int
    window_id: str
    started_ns: int
    ended_ns: int
    per_node: list[NodeCount]
    tracer_lost: int | None = None  # "lost N events" the tracer printed in this window
    flags: list[str] = field(default_factory=list)  # "harness-mismatch", "generator-saturated", ...
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_window(
        cls,
        window: WindowInfo,
        point: PointInfo,
        per_node: list[NodeCount],
        flags: list[str] | None = None,
        extra: dict[str, Any] | None = None,
        tracer_lost: int | None = None,
    ) -> IterationResult:
        """The result of one closed window (every kind's reconcile ends here)."""
        return cls(
            run_id=window.run_id,
            point=point.index,
            params=dict(point.params),
            iteration=window.iteration,
            window_id=window.window_id,
            started_ns=window.opened_ns,
            ended_ns=window.closed_ns,
            per_node=per_node,
            tracer_lost=tracer_lost,
            flags=list(flags or []),
            extra=dict(extra or {}),
        )

    @property
    def generated(self) -> int | None:
        return _sum([n.generated for n in self.per_node])

    @property
    def kernel(self) -> int | None:
        return _sum([n.kernel for n in self.per_node])

    @property
    def reported(self) -> int | None:
        return _sum([n.reported for n in self.per_node])

    @property
    def loss_ratio(self) -> float | None:
        """Over the nodes that have both numbers: a node whose tracer (or probe) reading is
        missing is flagged "missing", not counted as events lost."""
        both = [n for n in self.per_node if n.reported is not None and n.kernel is not None]
        return loss_ratio(_sum([n.reported for n in both]), _sum([n.kernel for n in both]))

    @property
    def loss_vs_reported(self) -> float | None:
        """The write-up's definition, over the nodes that have both generated and reported."""
        both = [n for n in self.per_node if n.reported is not None and n.generated is not None]
        return loss_vs_reported(_sum([n.generated for n in both]), _sum([n.reported for n in both]))

    def to_json(self) -> dict[str, Any]:
        """The iteration as report.json documents it."""
        return {
            "iteration": self.iteration,
            "window_id": self.window_id,
            "started_ns": self.started_ns,
            "ended_ns": self.ended_ns,
            "generated": self.generated,
            "kernel": self.kernel,
            "reported": self.reported,
            "loss_ratio": self.loss_ratio,
            "loss_vs_reported": self.loss_vs_reported,
            "tracer_lost": self.tracer_lost,
            "flags": list(self.flags),
            "per_node": [
                {
                    **{k: v for k, v in asdict(n).items()},
                    "loss_ratio": n.loss_ratio,
                    "loss_vs_reported": n.loss_vs_reported,
                    "harness_ok": n.harness_ok,
                }
                for n in self.per_node
            ],
            "extra": dict(self.extra),
        }


@dataclass(frozen=True)
class WindowOutcome:
    """Everything one window gave back: what a kind's reconcile rule takes (``Kind.reconcile``).

    ``results`` are the workers' exact results by node; ``readings`` the probes'; ``tracer`` is
    the tracer under test's result, for the kinds that have one (None otherwise).
    """

    window: WindowInfo
    point: PointInfo
    results: dict[str, dict[str, Any]]
    readings: list[ProbeReading]
    missing_probes: list[str] = field(default_factory=list)
    tracer: Any | None = None
