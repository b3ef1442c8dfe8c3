"""The flood's users give up a connect whose SYNs vanish after ``connect_timeout_s``.

    .venv/bin/python -m pytest tests/test_ingress_timeouts.py -v     # root: a network namespace

Why it matters (issue 16, kill-pod through the chart): a connect that a Service still sends to
a pod that is gone reaches no one. The node keeps the old pod's MAC in its neighbor table and
its SYNs vanish without an error, so a FastHttpUser with Locust's 60 s connect timeout stays
stuck. The client-seen outage then ended ~60 s after the fault although the replacement pod was
Running at 2.6 s. The black hole here is the same thing, made on purpose: inside a namespace the
test makes, an address with a permanent neighbor entry whose other end has no address, so SYNs
leave and nothing answers (targets/neighbors/netns.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from neighbors_util import needs_root

from swarmscope.targets.neighbors.netns import VethNetns

# The user as the ingress driver makes it: the worker's validated config reaches it through
# environment.swarmscope.worker (the driver), as in a real worker process.
_PROBE = """
import json, sys, time, types
from locust.env import Environment
from swarmscope.kinds import get_kind
from swarmscope.workers.http_users import FloodUser
cfg = get_kind("ingress_flood").schema.load(data={"scenario": "ingress_flood", **json.loads(sys.argv[2])})
env = Environment(user_classes=[FloodUser], host=sys.argv[1])
env.swarmscope = types.SimpleNamespace(worker=types.SimpleNamespace(cfg=cfg, active=None))
user = FloodUser(env)
t = time.monotonic()
r = user.client.get("/", name="x")
print(json.dumps({"s": time.monotonic() - t, "error": type(r.error).__name__, "status": r.status_code,
                  "timeouts": [user.connection_timeout, user.network_timeout]}))
"""


def _connect_once(ns: VethNetns, opts: dict[str, float], timeout: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # 10.99.0.2: the namespace's gateway, a permanent neighbor on a veth whose host side has no
    # address (so nothing ever answers a SYN: no RST, no ICMP).
    cmd = ["ip", "netns", "exec", ns.name, sys.executable, "-c", _PROBE, "http://10.99.0.2:8080",
           json.dumps(opts)]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
@needs_root
def test_a_connect_into_a_black_hole_fails_after_the_connect_timeout() -> None:
    with VethNetns("ss-cto") as ns:
        # The default: 2 s (was Locust's 60 s; the subprocess's 30 s limit fails it then).
        r = _connect_once(ns, {}, timeout=30)
        assert r["error"] == "RetriesExceeded" and r["status"] == 0, r  # geventhttpclient wraps the timeout
        assert r["timeouts"] == [2.0, 60.0]
        assert 2.0 <= float(r["s"]) < 2.0 + 3.0  # the timeout, plus start-up slack on a busy machine
        # The option, given: it is what the user's client uses.
        r = _connect_once(ns, {"connect_timeout_s": 0.5, "request_timeout_s": 7.0}, timeout=30)
        assert r["error"] == "RetriesExceeded" and r["timeouts"] == [0.5, 7.0], r
        assert 0.5 <= float(r["s"]) < 0.5 + 3.0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
