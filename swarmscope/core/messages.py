"""The messages between the Locust master (controller) and its workers, as Locust custom
messages (ZMQ between processes; local calls when both roles live in one process).

master → worker
  ``swarmscope:setup``  {"kind", "cfg", "index", "workers", "sim_nodes", "prefix"}: make the
                        kind's driver with the run's config (workers get the scenario only so).
  ``swarmscope:run``    {"window_id", "nodes", "payload", "traceparent"[, "positions",
                        "node_count"]}: run one window's load on the listed nodes this worker
                        owns; answer with ``result``. A master sends each worker only its own
                        nodes, with their positions among the window's ``node_count`` nodes
                        (``split_run``): one message with every node, sent to every worker, grew
                        as workers² (1,000 workers: 10 MB a window; docs/scale-out-workers.md).
  ``swarmscope:window`` {"window_id"}: free-running tests: users count into this window.
  ``swarmscope:stop``   {"window_id"}: free-running tests: stop now and send the results.
worker → master
  ``swarmscope:nodes``  {"nodes": [{"name", "host", "cgroup_id", "cgroup_path", "comm"}], "info"},
                        or {"nodes": [], "error"}: this worker cannot set up (why); it quits
  ``swarmscope:result`` {"window_id", "per_node": {node: {...the kind's exact results...}},
                        "spans": OTLP request bytes, the worker's spans of the window (children
                        of the span named by the run message's W3C ``traceparent``)}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SETUP = "swarmscope:setup"
RUN = "swarmscope:run"
WINDOW = "swarmscope:window"
STOP = "swarmscope:stop"
NODES = "swarmscope:nodes"
RESULT = "swarmscope:result"


def split_run(names: list[str], owner: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """{worker: its part of a run message}: its nodes of the window ``names`` (``owner``: node →
    worker), their positions in ``names`` and the window's node count."""
    parts: dict[str, dict[str, Any]] = {}
    for pos, name in enumerate(names):
        w = owner.get(name)
        if w is None:
            continue
        part = parts.setdefault(w, {"nodes": [], "positions": [], "node_count": len(names)})
        part["nodes"].append(name)
        part["positions"].append(pos)
    return parts


def window_nodes(run: Mapping[str, Any]) -> list[str]:
    """The window's node list as a worker's driver takes it, from a run message: a worker sent only
    its part gets its nodes at their positions ("" elsewhere), so index and length are the window's."""
    if "positions" not in run:
        return list(run["nodes"])
    view = [""] * int(run["node_count"])
    for name, pos in zip(run["nodes"], run["positions"], strict=True):
        view[int(pos)] = name
    return view
