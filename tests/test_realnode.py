"""A real node (containerd + runc + kubelet) joined to the test API server runs a real pod.

    .venv/bin/python -m pytest tests/test_realnode.py -v -s   # -s shows build/start/stop timings

One test runs the node's whole life, because its last claim is about the machine after the
node is gone: the node registers with the versions built here, a busybox pod (an image built
with umoci, imported into containerd) serves HTTP on its bridge address and the host reads it
through the node's network namespace, its processes sit in the kubelet's per-pod cgroup in
every hierarchy (what the probes attribute by), the API server streams its log from the
kubelet, and after teardown nothing of the node is left. A kwok node sits beside the real one.
The tools come from `make tools` (tools/k8s/build.sh, cached by version).
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster, find_tools
from realnode import RealNode, cgroup_hierarchies, find_node_tools, pod_on, wait_for

# cluster: the kube/node builds of `make tools`
pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(2400)]

POD_TIMEOUT = 90.0
PAGE = "served-from-a-real-pod"


def test_real_node_runs_a_pod_and_leaves_nothing_behind(tmp_path: Path) -> None:
    tools, node_tools = find_tools(), find_node_tools()
    with Cluster.start(tools, tmp_path / "c", nodes=1) as c:
        with RealNode.start(c, node_tools) as node:
            n = c.api.get(f"/api/v1/nodes/{node.name}")
            info = n["status"]["nodeInfo"]
            assert info["kubeletVersion"] == "v1.36.3"
            assert info["containerRuntimeVersion"] == "containerd://2.1.4"
            assert {"type": "InternalIP", "address": node.net.host_ip} in n["status"]["addresses"]
            kinds = sorted(x["metadata"]["name"] for x in c.api.get("/api/v1/nodes")["items"])
            assert kinds == sorted(["kwok-node-0", node.name])

            busybox = node.import_image(node_tools.busybox_tar, "swarmscope.local/busybox")
            assert busybox == "swarmscope.local/busybox:1.35.0"
            script = (
                f"mkdir /tmp/www && echo {PAGE} > /tmp/www/index.html && echo started"
                " && exec httpd -f -p 8080 -h /tmp/www"
            )
            web = pod_on(node.name, "web", busybox, ["sh", "-c", script])
            web["metadata"]["labels"] = {"app": "web"}
            c.api.post("/api/v1/namespaces/default/pods", web)

            def running() -> dict[str, Any] | None:
                p = c.api.get("/api/v1/namespaces/default/pods/web")
                return p if p["status"].get("phase") == "Running" and p["status"].get("podIP") else None

            pod = wait_for("pod web Running", running, POD_TIMEOUT)
            ip = pod["status"]["podIP"]
            assert ip.startswith(node.net.pod_subnet.rsplit(".", 1)[0] + ".")
            body = wait_for("HTTP from the pod", lambda: _get(f"http://{ip}:8080/"), 30.0)
            assert body == PAGE + "\n"

            # The kubelet's per-pod cgroup, in the v2 unified hierarchy and every v1 one.
            uid = pod["metadata"]["uid"]
            # busybox httpd forks a child per connection, and the one that served the GET above
            # may still be exiting: wait (briefly) until only pause + httpd are left.
            for h in cgroup_hierarchies():
                pod_cg = h / node.name / "kubepods" / "besteffort" / f"pod{uid}"

                def procs(cg: Path = pod_cg) -> list[int]:
                    return [int(x) for f in cg.glob("*/cgroup.procs") for x in f.read_text().split()]

                wait_for(f"pause + httpd only in {h}", lambda: len(procs()) == 2 or None, 10.0)
                assert len(procs()) == 2, (h, procs())  # pause + httpd
            log = c.api.get("/api/v1/namespaces/default/pods/web/log")
            assert log == "started\n"

            # A Service in front of it, reached by name from another pod: the node's cluster DNS
            # answers with the ClusterIP and kube-proxy (nftables, in the node's netns) routes it.
            c.api.post("/api/v1/namespaces/default/services", {
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
            })  # fmt: skip
            svc_ip = c.api.get("/api/v1/namespaces/default/services/web")["spec"]["clusterIP"]
            # `<svc>.<ns>.svc`, the chart's form, through the pod's DNS search list. nc, not wget:
            # Debian's static busybox wget segfaults here, with or without a Service.
            fetch = (
                "for i in $(seq 60); do out=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n'"
                f' | nc -w 2 web.default.svc 80 | tail -n1) && [ "$out" = {PAGE} ] && echo $out && exit 0;'
                " sleep 1; done; exit 1"
            )
            client = pod_on(node.name, "client", busybox, ["sh", "-c", fetch])
            client["spec"]["restartPolicy"] = "Never"
            c.api.post("/api/v1/namespaces/default/pods", client)

            def done() -> str | None:
                phase = c.api.get("/api/v1/namespaces/default/pods/client")["status"].get("phase")
                return phase if phase in ("Succeeded", "Failed") else None

            assert wait_for("client pod done", done, POD_TIMEOUT) == "Succeeded"
            assert c.api.get("/api/v1/namespaces/default/pods/client/log") == PAGE + "\n"
            assert node.dns is not None
            assert ("web.default.svc.cluster.local", 1, 0) in node.dns.queries
            assert node.dns.resolve("web.default.svc.cluster.local") == [svc_ip]
        assert node.leftovers() == []


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return str(r.read().decode())
    except OSError:
        return None
