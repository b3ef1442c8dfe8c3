"""The messages between the Locust master (controller) and its workers, as Locust custom
messages (ZMQ between processes; local calls when both roles live in one process).

master → worker
  ``swarmscope:setup``  {"kind", "cfg", "index", "workers", "sim_nodes", "prefix"}: make the
                        kind's driver with the run's config (workers get the scenario only so).
  ``swarmscope:run``    {"window_id", "nodes", "payload", "traceparent"}: run one window's load
                        on the listed nodes this worker owns; answer with ``result``.
  ``swarmscope:window`` {"window_id"}: free-running tests: users count into this window.
  ``swarmscope:stop``   {"window_id"}: free-running tests: stop now and send the results.
worker → master
  ``swarmscope:nodes``  {"nodes": [{"name", "host", "cgroup_id", "cgroup_path", "comm"}], "info"}
  ``swarmscope:result`` {"window_id", "per_node": {node: {...the kind's exact results...}},
                        "spans": OTLP request bytes, the worker's spans of the window (children
                        of the span named by the run message's W3C ``traceparent``)}
"""

SETUP = "swarmscope:setup"
RUN = "swarmscope:run"
WINDOW = "swarmscope:window"
STOP = "swarmscope:stop"
NODES = "swarmscope:nodes"
RESULT = "swarmscope:result"
