"""A worker or controller in a pod on a hybrid-layout host, where cgroup v2 is not mounted.

    .venv/bin/python -m pytest tests/test_nodes_in_pod.py

runc mounts only the v1 hierarchies into a container on such hosts (tests/realnode.py's node),
so the worker cannot read its v2 cgroup id: it announces its v2 path (from /proc/self/cgroup),
which the node's probe resolves. The controller's start-up sweep finds nothing to sweep there
instead of failing. Run for real in a mount namespace with the v2 mount taken away.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT

from swarmscope.core.sys import cgroups

pytestmark = [pytest.mark.root]

SCRIPT = """
import json
from swarmscope.workers.nodes import cleanup_stale, own_cgroup_node
print(json.dumps({"node": own_cgroup_node("n1").describe("h"), "swept": cleanup_stale()}))
"""


def test_worker_announces_its_v2_path_where_v2_is_not_mounted() -> None:
    v2 = cgroups.cgroup2_mount()
    pod = v2 / f"ss-test-nodes-{os.getpid()}"  # the worker's own cgroup, as a pod's container has
    pod.mkdir()
    try:
        r = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-ec",
             f'umount -l {v2}; exec "$0" -c "$1"', sys.executable, SCRIPT],
            capture_output=True, text=True, timeout=60, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            preexec_fn=lambda: (pod / "cgroup.procs").write_text(str(os.getpid())),
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["swept"] == []
        node = out["node"]
        assert node["cgroup_id"] == 0  # not readable there
        assert node["cgroup_path"] == f"/{pod.name}"
        # what the node's probe does with it: the id of exactly that cgroup
        assert cgroups.resolve_cgroup_id(node["cgroup_path"]) == cgroups.cgroup_id(pod)
    finally:
        pod.rmdir()
