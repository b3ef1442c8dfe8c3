"""Worker side of the flow storm: this worker's namespace pair and its generator.

    d = FlowDriver(cfg, prefix="w1-")          # on swarmscope:setup: namespaces made now
    d.info()        # {"node": "w1-n1", "pid": ..., "target": "<cgroup>:<dst netns>:<dst dev>"}
    d.run_window(wid, ["w1-n1"], payload, env) # {"w1-n1": {"generated", "bytes", "flows", ...}}
    d.close()                                  # namespaces gone

The namespaces exist from set-up on, so the controller can name the receiving interface in
the first window's probe options (``flow_count.targets``). A window runs the generator
(workers/flow_gen.py) in the source namespace as a subprocess (its own core, off this
gevent-patched process) over this node's block of flows, and returns its exact counts plus the
veth pair's drop counters over the window, and, with a flow agent under test
(targets/flow_agent, started at set-up on the sending interface), the agent's own account of
the window (``start_window`` before, ``flush`` after). ``locust -f``: FlowStormUser users
(workers/flow_user.py) call ``burst`` one at a time (one source port per namespace) and the
bursts of a window add up in ``take``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from swarmscope.core.errors import LoadGenError
from swarmscope.core.node import node_host
from swarmscope.workers.driver import report_request

if TYPE_CHECKING:
    from swarmscope.kinds.flow_storm import FlowStormConfig

SUMMED = ("generated", "bytes", "flows", "retries", "veth_dropped")


class FlowDriver:
    def __init__(self, cfg: FlowStormConfig, prefix: str) -> None:
        from swarmscope.workers.flow_netns import FlowNetns
        from swarmscope.workers.nodes import own_cgroup_node

        self.cfg = cfg
        self.name = f"{prefix}n1"
        self.node = own_cgroup_node(self.name)
        self.host = node_host()
        self.pid = os.getpid()
        self.current_window = ""
        self.net = FlowNetns().__enter__()
        self._lock = threading.Lock()  # one generator at a time
        self._tally = threading.Lock()  # the locust -f window tallies (record/take): a burst cut
        # by test stop records while it still holds _lock, so the two must not be one lock
        self._free: dict[str, dict[str, Any]] = {}
        self.agent: Any = None
        self._agent_cfg: tuple[int, float] = (0, 0.0)
        if cfg.agent != "none":
            from swarmscope.targets.flow_agent import start_agent

            self._agent_cfg = (int(cfg.cache_max_flows[0]), float(cfg.cache_timeout_s[0]))
            try:
                self.agent = start_agent(cfg.agent, self.net.src, self.net.src_dev, *self._agent_cfg)
            except BaseException:
                self.net.close()
                raise

    def describe(self) -> list[dict[str, Any]]:
        return [self.node.describe(self.host)]

    def info(self) -> dict[str, Any]:
        # The id, or the v2 path the node's probe resolves (a container on a hybrid host)
        target = self.net.target(int(self.node.cgroup_id) or str(self.node.announce_path))
        return {
            "node": self.name,
            "pid": self.pid,
            "target": target,
            "agent_pid": getattr(self.agent, "pid", 0),
            "agent_comm": getattr(self.agent, "comm", ""),
        }

    def close(self) -> None:
        if self.agent is not None:
            self.agent.close()
        self.net.close()

    def burst(
        self,
        first: int,
        count: int,
        p: Mapping[str, Any],
        on_stop: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Send one block of flows (the generator, in the source namespace); exact counts.
        Interrupted (a killed user), the generator is stopped and ``on_stop`` gets its counts."""
        cmd = [
            sys.executable, "-m", "swarmscope.workers.flow_gen", "--flows", str(count), "--first", str(first),
            "--packets-per-flow", str(p["packets_per_flow"]), "--frame-bytes", str(p["frame_bytes"]),
            "--rate", str(p["rate_pps"]), "--max-s", str(p["max_s"]), "--proto", str(p.get("proto", "udp")),
        ]  # fmt: skip
        with self._lock:  # one generator at a time: they share the source address and port
            dropped = self.net.dropped()
            proc = self.net.start(cmd)
            out: str | None = None
            try:
                out, err = proc.communicate(timeout=float(p["max_s"]) + 60)
                if proc.returncode != 0:
                    tail = " | ".join(err.strip().splitlines()[-3:])
                    raise LoadGenError(f"flow generator failed ({proc.returncode}): {tail}")
                return self._result(out, dropped)  # reads the drops with `ip`: a kill can land here too
            except BaseException:  # test stop kills the user: the generator stops and still counts
                if out is None:
                    proc.terminate()
                    out, err = proc.communicate(timeout=30)
                if on_stop is not None and proc.returncode == 0:
                    on_stop(self._result(out, dropped))
                raise

    def _result(self, out: str, dropped_before: int) -> dict[str, Any]:
        res: dict[str, Any] = json.loads(out)
        res["veth_dropped"] = self.net.dropped() - dropped_before
        return res

    def run_window(
        self, window_id: str, nodes: list[str], payload: dict[str, Any], environment: Any = None
    ) -> dict[str, Any]:
        if self.name not in nodes:
            return {}
        first, count = payload["shares"][self.name]
        t0 = time.perf_counter()
        exc: Exception | None = None
        if count == 0:  # fewer flows than workers: nothing to send here
            res: dict[str, Any] = {"generated": 0, "bytes": 0, "flows": 0, "rounds": 0, "partial": 0}
        else:
            try:
                res = self._measured(int(first), int(count), payload)
            except Exception as e:  # the master hears about it in the result, the run goes on
                exc = e
                res = {"generated": 0, "errors": [f"{type(e).__name__}: {e}"]}
        res["flows_asked"] = int(count)
        if "rounds" in res:  # the per-flow fingerprint of what was sent (reconcile: == kernel's)
            from swarmscope.kinds.flow_storm.perflow import sent_digest

            res["digest"] = sent_digest(
                res, int(first), int(count), int(payload["frame_bytes"]), payload["proto"]
            )
        res["dev"] = self.net.dst_dev  # the probe counts per receiving interface
        report_request(environment, "flows", "burst", t0, int(res.get("generated", 0)), exc)
        return {self.name: res}

    def _measured(self, first: int, count: int, p: dict[str, Any]) -> dict[str, Any]:
        """A burst with the agent under test told when the window starts and ends."""
        if self.agent is None:
            return self.burst(first, count, p)
        want = (int(p["cache_max_flows"]) or self._agent_cfg[0], float(p["cache_timeout_s"]))
        if want != self._agent_cfg:
            self.agent.configure(*want)
            self._agent_cfg = want
        self.agent.start_window()
        url = getattr(self.agent, "metrics_url", "")
        from swarmscope.kinds.flow_storm.scrape import scraped_window, start_scrape

        before = start_scrape(url) if url else ""
        res = self.burst(first, count, p)
        res["agent"] = {"cache_max_flows": want[0], "cache_timeout_s": want[1], **self.agent.flush()}
        if url:  # its exported metrics, scraped, beside what it said directly
            res["agent"]["scraped"] = scraped_window(url, before)
        if "per_flow" in res["agent"]:  # its exported records against each flow sent
            from swarmscope.kinds.flow_storm.perflow import per_flow_check

            res["agent"]["per_flow"] = per_flow_check(
                res["agent"], res, first, count, int(p["frame_bytes"]), str(p["proto"])
            )
        return res

    # -- free-running tests (locust -f) ------------------------------------------------------
    def record(self, window_id: str, res: dict[str, Any]) -> None:
        with self._tally:
            t = self._free.setdefault(window_id, {"bursts": 0, **dict.fromkeys(SUMMED, 0)})
            t["bursts"] += 1
            for k in SUMMED:
                t[k] += int(res.get(k, 0))

    def stop_window(self, window_id: str) -> None:
        """A burst records when its generator has exited: nothing is in flight to count."""

    def take(self, window_id: str, node_names: list[str] | None = None) -> dict[str, Any]:
        with self._tally:
            t = self._free.pop(window_id, None) or {"bursts": 0, **dict.fromkeys(SUMMED, 0)}
        return {self.name: {"free": True, "dev": self.net.dst_dev, **t}}
