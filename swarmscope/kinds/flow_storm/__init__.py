"""Scenario kind ``flow_storm``: UDP packets over N distinct 5-tuples, counted per flow by the kernel.

    swarmscope run scenarios/flow_storm.yaml --set flows=1000,10000,100000
    swarmscope run scenarios/flow_storm.yaml --set mode=distributed --set workers=2
    helm install ss charts/swarmscope --set workers.flows.enabled=true \
        --set scenario.config.scenario=flow_storm       # in a cluster: each worker pod is a node

The NetObserv experiment's load (docs/flow_storm.md): one point per flow count, ``iterations``
windows each. A worker is one node; at set-up its driver (driver.py) makes two network
namespaces joined by a veth pair, and per window its generator (workers/flow_gen.py) sends
``packets_per_flow`` rounds over its share of the flows, paced at ``rate_pps`` and bounded by
``max_s`` and ``max_packets``. The probe's ``flow_count`` program, attached (XDP) to the
receiving end of every worker's pair through per-window options, counts packets and bytes per
5-tuple. With ``agent`` (default ``reference``, targets/flow_agent), each worker runs that
flow agent on its sending interface for the whole run, reconfigured per point to the point's
``cache_max_flows`` (same process, so the probe's ``procstat`` samples its CPU and RSS); its
account of each window (flows, evictions per component, ring buffer / hashmap ratio) is the
reported column. Reconcile (results.py): generated == kernel for packets, bytes and flows, and per flow
(the kernel's packets-per-flow histogram equals what was sent to each flow); a flow the kernel
table could not hold is a failed run, never a figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmscope.controller.model import IterationResult, PointInfo, WindowOutcome
from swarmscope.controller.options import RunConfig
from swarmscope.core.config import Field, list_of
from swarmscope.kinds.base import CrossCheck, Kind, shares
from swarmscope.targets.flow_agent import AGENT_CHOICES

FLOW_FIELDS: list[Field] = [
    Field(
        "flows",
        list_of(int),
        [1000, 10000, 100000],
        "distinct 5-tuples per window, one point each (split across the workers)",
        min=1,
        max=1_000_000,
    ),
    Field(
        "proto", str, "udp", "transport of every flow: udp datagrams or tcp segments", choices=("udp", "tcp")
    ),
    Field("packets_per_flow", int, 2, "rounds over all flows: packets each flow gets", min=1, max=1000),
    Field(
        "frame_bytes",
        int,
        128,
        "frame length on the wire (Ethernet+IPv4+UDP headers included)",
        min=64,
        max=1500,
    ),
    Field("rate_pps", float, 50_000.0, "packets/s per node (0: as fast as one core sends)", min=0, max=1e7),
    Field(
        "max_s", float, 30.0, "a window's generator stops after this long (counted exactly)", min=0.1, max=600
    ),
    Field("max_packets", int, 5_000_000, "hard cap on packets per node per window", min=1, max=50_000_000),
    Field("iterations", int, 1, "windows per point", min=1, max=1000),
    Field("agent", str, "reference", "flow agent under test (targets/flow_agent)", choices=AGENT_CHOICES),
    Field(
        "cache_max_flows",
        list_of(int),
        [100_000],
        "the agent's cacheMaxFlows (flows in its eBPF map), one point each per flow count",
        min=16,
        max=4_000_000,
    ),
    Field(
        "cache_timeout_s",
        list_of(float),
        [1.0],
        "the agent's cacheTimeout: its map is evicted this often (one value, or one per cache_max_flows)",
        min=0.05,
        max=60,
    ),
    Field("pause_s", float, 0.5, "pause between windows, seconds", min=0, max=60),
]


class FlowStormConfig(RunConfig):
    """A flow storm's validated options (fields: :meth:`FlowStorm.fields`)."""

    flows: list[int]
    proto: str
    packets_per_flow: int
    frame_bytes: int
    rate_pps: float
    max_s: float
    max_packets: int
    iterations: int
    agent: str
    cache_max_flows: list[int]
    cache_timeout_s: list[float]
    pause_s: float


def _flow_checks(v: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    most = max(v["flows"]) * v["packets_per_flow"]
    if most > v["max_packets"]:
        out.append(("max_packets", f"flows x packets_per_flow reaches {most}: raise max_packets or lower"))
    if len(v["cache_timeout_s"]) not in (1, n := len(v["cache_max_flows"])):
        out.append(("cache_timeout_s", f"one value, or one per cache_max_flows ({n})"))
    return out


def cache_points(cfg: FlowStormConfig) -> list[tuple[int, float]]:
    """(cacheMaxFlows, cacheTimeout) per point, in order: the write-up's sequence changes the
    timeout between points (5 s, then 1 s at 2K), so each size carries its own."""
    ts = cfg.cache_timeout_s
    if len(ts) == 1:
        ts = ts * len(cfg.cache_max_flows)
    return list(zip(cfg.cache_max_flows, (float(t) for t in ts), strict=True))


def table_size(cfg: FlowStormConfig) -> int:
    """The kernel flow table per node: every flow of the largest point, with room to spare
    (a full table drops, and a drop fails the run)."""
    return max(cfg.flows) + 1024


class FlowStorm(Kind[FlowStormConfig]):
    name = "flow_storm"
    metric = "flow.packets"
    description = "UDP or TCP over N distinct 5-tuples between namespaces; per-flow kernel truth"
    config_cls = FlowStormConfig

    def fields(self) -> list[Field]:
        return list(FLOW_FIELDS)

    def cross_checks(self) -> list[CrossCheck]:
        return [_flow_checks]

    # -- controller side ------------------------------------------------------------------
    def programs(self, cfg: FlowStormConfig, shared: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        opts = {
            "targets": ",".join(shared.get("targets", [])),
            "max_flows": str(table_size(cfg)),
        }
        progs = {"flow_count": opts}
        if cfg.agent != "none":  # the agents' CPU and RSS (listed before set-up too: the probe loads it)
            pids, comms = shared.get("agent_pids") or [], shared.get("agent_comms") or []
            if comms:  # a real exporter, restarted per point: followed by name in the node's cgroup
                progs["procstat"] = {"names": ",".join(comms)}
            else:
                progs["procstat"] = {"pids": ",".join(str(p) for p in pids)} if pids else {}
        return progs

    def points(self, cfg: FlowStormConfig) -> list[PointInfo]:
        if cfg.agent == "none":
            return [PointInfo(i, {"flows": n}, int(cfg.iterations)) for i, n in enumerate(cfg.flows)]
        pairs = [(n, c, t) for n in cfg.flows for c, t in cache_points(cfg)]
        return [
            PointInfo(i, {"flows": n, "cache_max_flows": c, "cache_timeout_s": t}, int(cfg.iterations))
            for i, (n, c, t) in enumerate(pairs)
        ]

    def sim_nodes(self, cfg: FlowStormConfig) -> int:
        return int(cfg.workers) if cfg.mode == "distributed" else 1  # a worker is a node

    def shared(self, cfg: FlowStormConfig, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        nodes = sorted(str(i["node"]) for i in infos.values() if "node" in i)
        targets = sorted(str(i["target"]) for i in infos.values() if "target" in i)
        pids = sorted(int(i["agent_pid"]) for i in infos.values() if i.get("agent_pid"))
        comms = sorted({str(i["agent_comm"]) for i in infos.values() if i.get("agent_comm")})
        return {"nodes": nodes, "targets": targets, "agent_pids": pids, "agent_comms": comms}

    def payload(
        self, cfg: FlowStormConfig, point: PointInfo, iteration: int, shared: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {
            "shares": shares(int(point.params["flows"]), list(shared.get("nodes", []))),
            "packets_per_flow": cfg.packets_per_flow,
            "proto": cfg.proto,
            "frame_bytes": cfg.frame_bytes,
            "rate_pps": cfg.rate_pps,
            "max_s": cfg.max_s,
            "cache_max_flows": int(point.params.get("cache_max_flows", 0)),
            "cache_timeout_s": float(point.params.get("cache_timeout_s", cfg.cache_timeout_s[0])),
        }

    def window_timeout_s(self, cfg: FlowStormConfig, point: PointInfo) -> float:
        return float(cfg.max_s) + float(cfg.window_timeout_s)

    def reconcile(self, cfg: FlowStormConfig, outcome: WindowOutcome) -> IterationResult:
        from swarmscope.kinds.flow_storm.results import reconcile

        return reconcile(cfg, outcome)

    def sections(self, cfg: FlowStormConfig, results: Any, run_dir: str) -> dict[str, Any]:
        from swarmscope.kinds.flow_storm.results import sections

        return sections(cfg, results)

    def register_renderers(self) -> None:
        import swarmscope.kinds.flow_storm.results  # noqa: F401  (registers "flow_storm")

    # -- worker side ----------------------------------------------------------------------
    def make_driver(self, cfg: FlowStormConfig, sim_nodes: int, prefix: str) -> Any:
        from swarmscope.kinds.flow_storm.driver import FlowDriver

        return FlowDriver(cfg, prefix)


KIND = FlowStorm()
