"""Several real nodes on this machine, joined by a bridge: a multi-node cluster for the chart.

    with Cluster.start(find_tools(), d, nodes=0, endpoint_reconciler="none") as c:
        with RealCluster.start(c, find_node_tools(), 3) as rc:
            rc.import_image(archive, "ghcr.io/swarmscope/swarmscope")   # into every node
            print(nodes_wide(c.api.get("/api/v1/nodes")["items"]))

    python tests/realcluster.py --nodes 3 [--images] [--ig] [DIR]   # by hand; prints KUBECONFIG, ^C ends

Each node is a tests/realnode.py RealNode (its own netns, containerd root and socket, kubelet
dirs, cgroup root /<name>, pod CIDR, kube-proxy and cluster DNS on its node IP) on one bridge
(tests/nodenet.py), with routes between every pair of pod CIDRs: pod-to-pod and Service traffic
between nodes crosses the bridge. Nodes start one after the other (each prints its start-up
time); `budget()` gives each node's start-up time and the RSS of its containerd, kubelet and
kube-proxy.

Pod names for the probes: each kubelet keeps its own podLogsDir (a kubelet's garbage collector
deletes the log dirs of pods it does not run, so a shared one loses the other nodes' pods), but
all of them write their links to the fixed /var/log/containers of this machine, and those
(`<pod>_<ns>_<container>-<id>.log`) name every node's containers: the chart's default
probes.podLogs (/var/log/pods, /var/log/containers) names the pods of every node.

Caveats: all nodes share this machine's kernel, CPUs and memory (2 cores here): a node is the
kubelet's view (its own cgroups, network and runtime), not its own machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster import Cluster, find_tools
from nodenet import Bridge
from realnode import CGROUP_ROOT, NodeTools, RealNode, find_node_tools


@dataclass
class RealCluster:
    cluster: Cluster
    nodes: list[RealNode]
    imported: set[tuple[Path, str]] = field(default_factory=set)

    @classmethod
    @contextlib.contextmanager
    def start(cls, cluster: Cluster, tools: NodeTools, n: int = 3, prefix: str = "") -> Iterator[RealCluster]:
        prefix = prefix or f"ssrn{os.getpid()}"
        with contextlib.ExitStack() as stack:
            br = stack.enter_context(Bridge.up())
            nodes: list[RealNode] = []
            for i in range(n):
                name = f"{prefix}-{i}"
                node = stack.enter_context(RealNode.start(
                    cluster, tools, name, net=br.net(i, name), kubernetes_endpoint=i == 0,
                ))  # fmt: skip
                for other in nodes:
                    node.net.peer(other.net)
                    other.net.peer(node.net)
                nodes.append(node)
            rc = cls(cluster, nodes)
            print(rc.budget_table(), flush=True)
            try:
                yield rc
            finally:
                rc.teardown()

    def teardown(self) -> None:
        """Every node at once: most of a node's teardown is deleting its containerd root (a
        1.5 GB image unpacked per node: a minute or more each on a loaded machine)."""
        t = time.monotonic()
        threads = [threading.Thread(target=n.teardown) for n in self.nodes]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        print(f"realcluster: {len(self.nodes)} nodes down in {time.monotonic() - t:.1f} s", flush=True)

    def budget(self) -> list[dict[str, Any]]:
        """Per node: start-up time (s) and the RSS (MiB) of its own processes."""
        out = []
        for node in self.nodes:
            mem = node.memory()
            out.append({"node": node.name, "start_s": node.timings["total"], "rss_mib": mem,
                        "rss_total_mib": sum(mem.values())})  # fmt: skip
        return out

    def budget_table(self) -> str:
        rows = [
            ("NODE", "NODE-IP", "POD-CIDR", "START-UP", "CONTAINERD", "KUBELET", "KUBE-PROXY", "RSS TOTAL")
        ]
        for node, b in zip(self.nodes, self.budget(), strict=True):
            m = b["rss_mib"]
            rows.append((b["node"], node.net.host_ip, node.net.pod_subnet, f"{b['start_s']:.1f} s",
                         *(f"{m.get(k, 0):.1f} MiB" for k in ("containerd", "kubelet", "kube-proxy")),
                         f"{b['rss_total_mib']:.1f} MiB"))  # fmt: skip
        return table(rows)

    def import_image(self, tar: Path, repo: str) -> str:
        """Import an archive into every node's containerd (in parallel; once per cluster)."""
        names: dict[str, str] = {}
        errors: list[BaseException] = []

        def one(node: RealNode) -> None:
            try:
                names[node.name] = node.import_image(tar, repo)
            except BaseException as e:  # re-raised below, in the caller's thread
                errors.append(e)

        if (tar, repo) in self.imported:
            return next(
                n for n in self.nodes[0].ctr("images", "ls", "-q").stdout.split() if n.startswith(repo + ":")
            )
        t = time.monotonic()
        threads = [threading.Thread(target=one, args=(n,)) for n in self.nodes]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
        if len(set(names.values())) != 1:
            raise RuntimeError(f"realcluster: {tar} imported under different names: {names}")
        print(
            f"realcluster: {tar.name} imported into {len(self.nodes)} nodes in {time.monotonic() - t:.1f} s"
        )
        self.imported.add((tar, repo))
        return names[self.nodes[0].name]


def controller_report(rc: RealCluster, pods: list[dict[str, Any]], timeout: float) -> dict[str, Any]:
    """The report.json the chart's controller pod (among ``pods``) wrote, read from the host: its
    results emptyDir is a directory of its node's kubelet."""
    (ctrl,) = [p for p in pods if p["metadata"]["labels"]["app.kubernetes.io/component"] == "controller"]
    (home,) = [n for n in rc.nodes if n.name == ctrl["spec"]["nodeName"]]
    results = home.dir / "kubelet" / "pods" / ctrl["metadata"]["uid"] / "volumes"
    results = results / "kubernetes.io~empty-dir" / "results"

    def report() -> Path | None:
        done = sorted(results.glob("*/report.json")) if results.is_dir() else []
        return done[0] if done else None

    from realnode import wait_for

    return dict(json.loads(wait_for("the controller's report", report, timeout).read_text()))


def container_memory(pod: dict[str, Any], container: str) -> dict[str, float]:
    """Memory of one container of a pod on a real node, read from the host (MiB).

    ``rss``, ``anon``, ``file``: summed over the processes its cgroup lists (smaps_rollup), and
    ``procs``, their count; ``cgroup``: the memory controller's charge (v2 ``memory.current``,
    else v1 ``memory.usage_in_bytes``), which also holds page cache and kernel memory such as
    the BPF maps the container's loader made. The cgroup is the kubelet's cgroupRoot /<node>,
    the pod's QoS class, pod<uid>, the container id."""
    (st,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == container]
    cid = st["containerID"].split("://", 1)[1]
    qos = pod["status"]["qosClass"].lower()
    rel = Path(pod["spec"]["nodeName"]) / "kubepods"
    rel = (rel if qos == "guaranteed" else rel / qos) / f"pod{pod['metadata']['uid']}" / cid
    pids = (CGROUP_ROOT / "unified" / rel / "cgroup.procs").read_text().split()
    kib = {"Rss": 0, "Anonymous": 0}
    for pid in pids:
        with contextlib.suppress(OSError):  # a process that just exited holds no memory
            for ln in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
                k, _, v = ln.partition(":")
                if k in kib:
                    kib[k] += int(v.split()[0])
    v2 = CGROUP_ROOT / "unified" / rel / "memory.current"
    charge = int((v2 if v2.exists() else CGROUP_ROOT / "memory" / rel / "memory.usage_in_bytes").read_text())
    rss, anon = kib["Rss"] / 1024, kib["Anonymous"] / 1024
    return {"rss": rss, "anon": anon, "file": rss - anon, "procs": len(pids), "cgroup": charge / 2**20}


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def nodes_wide(nodes: list[dict[str, Any]]) -> str:
    """`kubectl get nodes -o wide`, from the API objects (there is no kubectl here)."""
    rows = [("NAME", "STATUS", "VERSION", "INTERNAL-IP", "KERNEL-VERSION", "CONTAINER-RUNTIME")]
    for n in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        st = n["status"]
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions", []))
        ip = next((a["address"] for a in st.get("addresses", []) if a["type"] == "InternalIP"), "")
        info = st.get("nodeInfo", {})
        rows.append((n["metadata"]["name"], "Ready" if ready else "NotReady", info.get("kubeletVersion", ""),
                     ip, info.get("kernelVersion", ""), info.get("containerRuntimeVersion", "")))  # fmt: skip
    return table(rows)


def pods_wide(pods: list[dict[str, Any]]) -> str:
    """`kubectl get pods -o wide`, from the API objects."""
    rows = [("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "IP", "NODE")]
    for p in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        cs = p["status"].get("containerStatuses") or []
        ready = f"{sum(c['ready'] for c in cs)}/{len(p['spec']['containers'])}"
        restarts = str(sum(c.get("restartCount", 0) for c in cs))
        rows.append((p["metadata"]["namespace"], p["metadata"]["name"], ready, p["status"].get("phase", ""),
                     restarts, p["status"].get("podIP", ""), p["spec"].get("nodeName", "")))  # fmt: skip
    return table(rows)


def pods_in(api: Any, ns: str) -> list[dict[str, Any]]:
    return list(api.get(f"/api/v1/namespaces/{ns}/pods")["items"])


def all_ready(api: Any, ns: str, n: int) -> list[dict[str, Any]] | None:
    """The namespace's pods when exactly ``n`` (not being deleted) are Running with every
    container ready, else None (for wait_for)."""
    pods = [p for p in pods_in(api, ns) if not p["metadata"].get("deletionTimestamp")]
    ok = len(pods) == n and all(
        p["status"].get("phase") == "Running"
        and all(s["ready"] for s in p["status"].get("containerStatuses") or [{"ready": False}])
        for p in pods
    )
    return pods if ok else None


def main() -> None:
    ap = argparse.ArgumentParser(description="Start N real nodes here; print KUBECONFIG; ^C tears down.")
    ap.add_argument("dir", nargs="?", type=Path, default=Path("/tmp/swarmscope-realcluster"))
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument(
        "--images", action="store_true", help="import the project's image and Jaeger's into every node"
    )
    ap.add_argument("--ig", action="store_true", help="deploy Inspektor Gadget (tests/igcluster.py)")
    a = ap.parse_args()
    shutil.rmtree(a.dir, ignore_errors=True)
    a.dir.mkdir(parents=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # teardown runs on SIGTERM too
    with Cluster.start(find_tools(), a.dir, nodes=0, endpoint_reconciler="none") as c:
        with RealCluster.start(c, find_node_tools(), a.nodes) as rc:
            if a.images:
                from imagebuild import find_swarmscope_image

                rc.import_image(find_swarmscope_image(), "ghcr.io/swarmscope/swarmscope")
                rc.import_image(rc.nodes[0].tools.jaeger_tar, "docker.io/jaegertracing/jaeger")
            print(nodes_wide(c.api.get("/api/v1/nodes")["items"]))
            print(f"KUBECONFIG={c.kubeconfig}")
            with contextlib.ExitStack() as ig:
                if a.ig:
                    from igcluster import deploy_ig

                    print(f"kubectl-gadget: {ig.enter_context(deploy_ig(rc)).kubectl_gadget}")
                print("^C (or SIGTERM) tears the nodes down", flush=True)
                with contextlib.suppress(KeyboardInterrupt):
                    signal.pause()


if __name__ == "__main__":
    main()
