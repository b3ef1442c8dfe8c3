"""Scenario kind ``neighbor_writes``: neighbor entries from a control plane into a datapath.

    swarmscope run scenarios/neighbor_writes.yaml --set neighbors=1000,100000
    swarmscope run scenarios/neighbor_writes.yaml --set mode=distributed --set workers=2

One point per (N, mode), one window each. A worker is one node: its driver (driver.py) runs
the system under test for its share of N (a control plane server, the agent in the worker
process programming its own XDP map, a test namespace) and returns its start times (CLOCK_MONOTONIC),
map id and verification. The window's probe program ``map_update``, restricted to the workers'
pids (``agent_filter: cgroup``: to the workers' cgroups, for workers in pods, whose pids are not
the host's), times every map-update call in the kernel; reconcile (results.py) matches each
worker's starts with the ends of its calls into per-entry latencies, pooled over workers.
generated (written) == kernel (in the probe's update calls) == reported (read back from the
map) on every node, or the point is not verified.

``target: kernel`` programs the kernel's own neighbor table instead (a device in the worker's
test namespace, written over netlink): the probe program is ``neigh_events``, whose per-device
update count is the kernel column; an entry's end is the netlink ACK of its send (the kernel
acknowledges after the table is written), and ``ip neigh`` lists what is reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from swarmscope.controller.model import IterationResult, PointInfo, WindowOutcome
from swarmscope.controller.options import RunConfig
from swarmscope.controller.tables import Rows
from swarmscope.core.config import Field, list_of
from swarmscope.kinds.base import CrossCheck, Kind, shares
from swarmscope.kinds.neighbor_writes import live

MODES = ("list_program", "watch_only", "write_watch_program")

NEIGHBOR_FIELDS: list[Field] = [
    Field(
        "neighbors",
        list_of(int),
        [1, 5, 100, 500, 1000, 5000, 10000, 50000, 100000, 500000, 1000000],
        "neighbor counts N of the sweep (split across the workers)",
        min=1,
        max=4_000_000,
    ),
    Field("modes", list_of(str), list(MODES), "published modes to run", choices=MODES),
    Field(
        "target",
        str,
        "xdp",
        "datapath: XDP hash map, or the kernel neighbor table of a device in a test namespace",
        choices=("xdp", "kernel"),
    ),
    Field(
        "batch_size",
        int,
        1,
        "entries per write message of write + watch + program and Locust users: 1 = one write "
        "per neighbor, as Arion's users wrote them (the comparison); more = batched writes (ours)",
        min=1,
        max=1_000_000,
    ),
    Field("page_size", int, 65536, "entries per List page (and per map update call)", min=1, max=1_000_000),
    Field(
        "verify_packets",
        int,
        16,
        "programmed IPs sampled for the XDP packet check (0 = off)",
        min=0,
        max=100_000,
    ),
    Field(
        "transport",
        str,
        "ipc",
        "control plane -> agent: ipc (Unix socket + shared log, docs/neighbors.md) or grpc (List/Watch)",
        choices=("ipc", "grpc"),
    ),
    Field(
        "control_plane",
        str,
        "",
        "host:port of a running control plane (transport grpc; its token from "
        "$SWARMSCOPE_NEIGHBORS_TOKEN) the agent reaches over the network, as Arion's two machines: "
        "one worker per control plane, whose windows must leave it empty; empty = one per window "
        "beside the agent",
    ),
    Field(
        "durability",
        str,
        "fsync",
        "when a write is answered: fsync (durable against power loss) or os (in the OS: survives "
        "a killed server, not a power cut); not the default comparison (docs/neighbors.md)",
        choices=("fsync", "os"),
    ),
    Field(
        "repeats", int, 1, "windows per (N, mode); the section's summary takes their medians", min=1, max=1000
    ),
    Field(
        "master_samples",
        int,
        20,
        "ipc: the master side's own get and write round trips measured per window (0 = off)",
        min=0,
        max=10_000,
    ),
    Field(
        "agent_filter",
        str,
        "pid",
        "how the probe picks the agent's map-update calls: pid (the worker's pids are the host's) "
        "or cgroup (the worker's cgroup, as in a pod, whose pids are not the host's; calls are then "
        "matched by the map's global id only)",
        choices=("pid", "cgroup"),
    ),
    Field(
        "point_timeout_s",
        float,
        900.0,
        "give up on a point after this long (one write per neighbor: 100K took 30-55 s on the 2-core VM)",
        min=1,
        max=86400,
    ),
    Field("plot", bool, True, "write neighbors.png (log-log per-neighbor latency)"),
    Field(
        "neighbors_per_user",
        int,
        100_000,
        "locust -f: entries each NeighborWriterUser writes before it stops",
        min=1,
        max=1_000_000,
    ),
]


def _transport_check(v: dict[str, Any]) -> list[tuple[str, str]]:
    if "watch_only" in (v.get("modes") or []) and v.get("transport") == "grpc":
        return [("modes", "watch_only runs on transport ipc only")]
    if v.get("control_plane") and v.get("transport") != "grpc":
        return [("control_plane", "a control plane elsewhere is reached over gRPC: set transport grpc")]
    return []


class NeighborConfig(RunConfig):
    """A neighbor-writes run's validated options (fields: :meth:`NeighborWrites.fields`)."""

    neighbors: list[int]
    modes: list[str]
    target: str
    batch_size: int
    page_size: int
    verify_packets: int
    transport: str
    control_plane: str
    durability: str
    repeats: int
    master_samples: int
    agent_filter: str
    point_timeout_s: float
    plot: bool
    neighbors_per_user: int


class NeighborWrites(Kind[NeighborConfig]):
    name = "neighbor_writes"
    metric = "neighbors"
    description = "neighbor entries control plane -> XDP map; per-entry latency on the kernel's clock"
    config_cls = NeighborConfig
    section_names = ("neighbors",)  # written only from windows' results

    def fields(self) -> list[Field]:
        return list(NEIGHBOR_FIELDS)

    def cross_checks(self) -> list[CrossCheck]:
        return [_transport_check]

    # -- controller side ------------------------------------------------------------------
    def programs(self, cfg: NeighborConfig, shared: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        if cfg.target == "kernel":  # counted per cgroup and device: nothing to configure
            return {"neigh_events": {}}
        # One write per neighbor can be one update call per neighbor, and one of the revision
        # map after each: room for every call of the largest point (the probe's default holds
        # 200,000 per window).
        calls = 2 * -(-max(cfg.neighbors) // cfg.batch_size) + 1000
        extra = {"max_samples": str(calls)} if "write_watch_program" in cfg.modes and calls > 200_000 else {}
        if cfg.agent_filter == "cgroup":  # the nodes' cgroups, resolved by the probe
            return {"map_update": {"nodes": "true", **extra}}
        pids = shared.get("pids") or []
        # Only the agents' calls: the kernel clock is per pid (and map id, matched at reconcile).
        return {"map_update": {"pids": ",".join(str(p) for p in pids), **extra} if pids else extra}

    def points(self, cfg: NeighborConfig) -> list[PointInfo]:
        pairs = [(n, m) for n in cfg.neighbors for m in cfg.modes]
        return [PointInfo(i, {"neighbors": n, "mode": m}, cfg.repeats) for i, (n, m) in enumerate(pairs)]

    def sim_nodes(self, cfg: NeighborConfig) -> int:
        return int(cfg.workers) if cfg.mode == "distributed" else 1  # a worker is a node

    def shared(self, cfg: NeighborConfig, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        nodes = {str(i["node"]): int(i["pid"]) for i in infos.values() if "node" in i}
        return {"pids": sorted(set(nodes.values())), "nodes": dict(sorted(nodes.items()))}

    def payload(
        self, cfg: NeighborConfig, point: PointInfo, iteration: int, shared: Mapping[str, Any]
    ) -> dict[str, Any]:
        n = int(point.params["neighbors"])
        return {
            "n": n,
            "mode": point.params["mode"],
            "batch_size": cfg.batch_size,
            "page_size": cfg.page_size,
            "verify_packets": cfg.verify_packets,
            "target": cfg.target,
            "transport": cfg.transport,
            "durability": cfg.durability,
            "master_samples": cfg.master_samples,
            "timeout_s": cfg.point_timeout_s,
            "shares": shares(n, list(shared.get("nodes", {}))),
        }

    def window_timeout_s(self, cfg: NeighborConfig, point: PointInfo) -> float:
        return float(cfg.point_timeout_s) + float(cfg.window_timeout_s)

    def reconcile(self, cfg: NeighborConfig, outcome: WindowOutcome) -> IterationResult:
        from swarmscope.kinds.neighbor_writes.results import reconcile

        return reconcile(cfg, outcome)

    def sections(self, cfg: NeighborConfig, results: Any, run_dir: str) -> dict[str, Any]:
        from swarmscope.kinds.neighbor_writes.results import sections

        return sections(cfg, results, run_dir)

    def register_renderers(self) -> None:
        import swarmscope.kinds.neighbor_writes.results  # noqa: F401  (registers "neighbors")

    live_columns = live.COLUMNS
    live_in_prefix = frozenset({"neighbors", "mode"})

    def live_rows(self, results: Sequence[IterationResult]) -> Rows:
        return live.rows(results)

    def console_summary(self, report: dict[str, Any]) -> str | None:
        return live.summary(report)

    # -- worker side ----------------------------------------------------------------------
    def make_driver(self, cfg: NeighborConfig, sim_nodes: int, prefix: str) -> Any:
        from swarmscope.kinds.neighbor_writes.driver import NeighborDriver

        return NeighborDriver(cfg, prefix)


KIND = NeighborWrites()
