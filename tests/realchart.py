"""The real-node chart tests' shared parts: one node per pytest run, one release per test.

    def test_x(real_node: ChartNode) -> None:              # the session fixture (conftest.py)
        assert real_node.image(IMAGE_REPO) == IMAGE          # imported once per node
        with real_node.release("rx", "ssrx", "-f", str(values)) as r:
            pods = wait_for("every pod Running and ready", lambda: r.all_ready(4), TIMEOUT)
            rep = json.loads(wait_for("the report", r.first_report, TIMEOUT).read_text())

A node costs its start-up, the 1.5 GB image's import (30-90 s, up to 3 min on a busy machine)
and a teardown that deletes the unpacked image (30-100 s): paid once per run, not per test.
Each test installs its own release in its own namespace; leaving `release()` uninstalls it,
deletes the namespace, waits until its pods are gone, and fails the test if the release left a
probe's BPF pins behind (a pindir claim in the node's /run/swarmscope/owners whose owner died
without removing them: its programs would keep counting in the next test). So the tests stay
independent, in any order.

Caveats: claims are the machine's, shared with other test runs: a release's are those that went
stale while it was installed and were made in the PID namespace of one of the node's pods at
its uninstall (a probe pod an upgrade replaced earlier is not looked at; the next probe's
start-up sweep would remove its pins).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster import ApiError, Cluster
from imagebuild import find_swarmscope_image
from realnode import CGROUP_ROOT, RealNode, wait_for

from swarmscope.core.sys import owners

ROOT = Path(__file__).resolve().parent.parent
CHART = str(ROOT / "charts" / "swarmscope")
IMAGE_REPO = "ghcr.io/swarmscope/swarmscope"  # values.yaml image.repository, tag = appVersion
JAEGER_REPO = "docker.io/jaegertracing/jaeger"  # values.yaml jaeger.image.repository
IMAGE = f"{IMAGE_REPO}:0.1.0"
JAEGER = f"{JAEGER_REPO}:2.13.0"
RUNNING_TIMEOUT = 300.0  # helm install/upgrade -> pods Running, a run's report
PROBE_PINS = "/sys/fs/bpf/ss-probe-"  # swarmscope/probes/pinned.py
GONE_TIMEOUT = 180.0  # a release's pods and namespace gone after its uninstall
# After `--`: Locust's own flags, one short headless run with the one worker pod. -t counts
# from Locust's start, and the window opens only once the probe has (re)connected to the new
# controller (its retries back off to 8 s): 3 s was seen to end first, with no window at all.
EXEC_STORM_HEADLESS = ["--", "--headless", "-u", "1", "-r", "1", "-t", "15s", "--expect-workers", "1"]


@dataclass
class ChartNode:
    """The shared real node (its cluster: ``node.cluster``) and the images imported into it."""

    node: RealNode
    images: dict[str, str] = field(default_factory=dict)

    @property
    def cluster(self) -> Cluster:
        return self.node.cluster

    def image(self, repo: str) -> str:
        """The image's name in the node's containerd: the project's or Jaeger's, imported once."""
        if repo not in self.images:
            tar = find_swarmscope_image() if repo == IMAGE_REPO else self.node.tools.jaeger_tar
            t = time.monotonic()
            self.images[repo] = self.node.import_image(tar, repo)
            print(f"realchart: {tar.name} imported in {time.monotonic() - t:.1f} s", flush=True)
        return self.images[repo]

    @contextlib.contextmanager
    def release(self, name: str, ns: str, *helm_args: str) -> Iterator[Release]:
        """`helm install` into a new namespace; on exit everything of it removed (see above)."""
        before = {n for n, _ in owners.stale("pindir")}
        self.cluster.helm("install", name, CHART, "-n", ns, "--create-namespace", *helm_args)
        r = Release(self, name, ns)
        passed = False
        try:
            yield r
            passed = True
        finally:
            left = r.remove(before)
            if left and not passed:  # the test's own failure is the one to read
                print(f"realchart: release {name} also left {left}", flush=True)
        assert left == [], f"release {name} left {left}"

    @contextlib.contextmanager
    def sweep(
        self, name: str, ns: str, values: dict[str, Any], d: Path, timeout: float
    ) -> Iterator[tuple[Release, dict[str, Any], dict[str, Any]]]:
        """A release whose controller runs one sweep (the chart's --run-once: it idles after
        it instead of sweeping again): the release, the sweep's report and the worker pod."""
        assert self.image(IMAGE_REPO) == IMAGE
        t = time.monotonic()
        with self.release(name, ns, "-f", values_file(d / "values.json", values)) as r:
            try:
                path = wait_for("the sweep's report", r.first_report, timeout, every=2.0)
            except Exception:
                print(r.logs(), flush=True)
                raise
            print(f"helm install -> the sweep's report in {time.monotonic() - t:.1f} s", flush=True)
            (worker,) = r.pods("workers")
            yield r, json.loads(path.read_text()), worker


@dataclass
class Release:
    chart_node: ChartNode
    name: str
    ns: str

    @property
    def c(self) -> Cluster:
        return self.chart_node.cluster

    @property
    def node(self) -> RealNode:
        return self.chart_node.node

    def upgrade(self, *helm_args: str) -> None:
        self.c.helm("upgrade", self.name, CHART, "-n", self.ns, *helm_args)

    def all_pods(self) -> list[dict[str, Any]]:
        return list(self.c.api.get(f"/api/v1/namespaces/{self.ns}/pods")["items"])

    def pods(self, component: str) -> list[dict[str, Any]]:
        sel = f"app.kubernetes.io/component={component}"
        return list(self.c.api.get(f"/api/v1/namespaces/{self.ns}/pods?labelSelector={sel}")["items"])

    def running(self, component: str) -> dict[str, Any]:
        """The one Running pod of a component that is not being deleted (a rollout may leave two)."""
        (p,) = [
            p for p in self.pods(component)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]  # fmt: skip
        return p

    def all_ready(self, n: int) -> list[dict[str, Any]] | None:
        """The release's pods when exactly ``n`` (not being deleted) are Running and ready."""
        pods = [p for p in self.all_pods() if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == n and all(ready(p) for p in pods) else None

    def volume(self, pod: dict[str, Any], name: str) -> Path:
        """A pod's emptyDir on the node (the kubelet's pod directory)."""
        uid = pod["metadata"]["uid"]
        return self.node.dir / "kubelet" / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / name

    def first_report(self, pods: list[dict[str, Any]] | None = None) -> Path | None:
        """The first report.json in the results volume of ``pods`` (default: every controller
        pod: the chart's --run-once controller idles after its run instead of running again)."""
        for pod in self.pods("controller") if pods is None else pods:
            d = self.volume(pod, "results")
            done = sorted(d.glob("*/report.json")) if d.is_dir() else []
            if done:
                return done[0]
        return None

    def _log_files(self, containers: tuple[str, ...]) -> list[Path]:
        """The release's container log files in the kubelet's podLogsDir (only ``containers``, if
        given)."""
        files = sorted(self.node.pod_logs.glob(f"{self.ns}_*/*/*.log"))
        return [f for f in files if not containers or f.parent.name in containers]

    def logs(self, lines: int = 40, containers: tuple[str, ...] = ()) -> str:
        """The last lines of the release's container logs (only ``containers``, if given), from
        the kubelet's own podLogsDir: for a failure's diagnosis."""
        out = []
        for f in self._log_files(containers):
            tail = [x[:300] for x in f.read_text(errors="replace").splitlines()]
            out.append(f"== {f.parent.parent.name}/{f.parent.name}/{f.name}\n" + "\n".join(tail[-lines:]))
        return "\n".join(out)

    def log_problems(self, containers: tuple[str, ...], limit: int = 4000) -> str:
        """Every warning, error and traceback in the release's logs of ``containers`` (whole
        files, not a tail: Locust's stats tables every 2 s push them out of any tail), for a
        failure's own message."""
        keep = ("Traceback", "ERROR", "WARNING", "Error", "Exception", "swarmscope:")
        out = []
        for f in self._log_files(containers):
            trace = 0  # lines left of a traceback being copied
            for line in f.read_text(errors="replace").splitlines():
                text = line.split(" ", 3)[-1]  # the kubelet's "<time> <stream> <F|P> " prefix off
                trace = 40 if "Traceback" in text else max(0, trace - 1)
                if trace or any(k in text for k in keep):
                    out.append(f"{f.parent.name}: {text[:300]}")
        text = "\n".join(out)
        return text if len(text) <= limit else "[...]\n" + text[-limit:]

    def remove(self, stale_before: set[str]) -> list[str]:
        """Uninstall, delete the namespace, wait until both are gone; what the release left."""
        t = time.monotonic()
        ours = node_pid_namespaces(self.node)  # the release's pods are the node's only ones
        self.c.helm("uninstall", self.name, "-n", self.ns, "--wait", "--timeout", "120s", check=False)
        uninstalled = time.monotonic() - t
        # Each pod's stop, timed from the uninstall (one that ignores SIGTERM lasts its grace period).
        stops, running = {}, {p["metadata"]["name"] for p in self.all_pods()}
        deadline = time.monotonic() + GONE_TIMEOUT
        while running and time.monotonic() < deadline:
            now = {p["metadata"]["name"] for p in self.all_pods()}
            stops.update({n: round(time.monotonic() - t, 1) for n in running - now})
            running &= now
            time.sleep(0.5)
        with contextlib.suppress(ApiError):  # already gone
            self.c.api.request("DELETE", f"/api/v1/namespaces/{self.ns}")

        def gone() -> bool:
            try:
                self.c.api.get(f"/api/v1/namespaces/{self.ns}")
            except ApiError as e:
                return e.status == 404
            return False

        wait_for(f"namespace {self.ns} and its pods gone", gone, GONE_TIMEOUT)
        left = []
        for claim, data in owners.stale("pindir"):
            path = str(data.get("path", ""))
            if claim not in stale_before and data.get("pidns") in ours and path.startswith(PROBE_PINS):
                left.append(f"pins {path} (claim {claim}: its probe died without removing them)")
                # Removed too, so the next test starts clean (as a probe's start-up sweep would).
                shutil.rmtree(path, ignore_errors=True)
                owners.release("pindir", claim)
        print(f"realchart: release {self.name} removed in {time.monotonic() - t:.1f} s "
              f"(helm uninstall --wait {uninstalled:.1f} s; pods gone at {stops} s)", flush=True)  # fmt: skip
        return left


def exec_storm_upgrade(r: Release) -> dict[str, Any]:
    """helm upgrade: the controller runs one headless exec storm; returns its new pod."""
    old = {p["metadata"]["uid"] for p in r.pods("controller")}
    r.upgrade(
        "--reuse-values", "--set", "scenario.exec_storm.burst_s=0.3",
        "--set-json", f"controller.extraArgs={json.dumps(EXEC_STORM_HEADLESS)}",
    )  # fmt: skip

    def new_pod() -> dict[str, Any] | None:
        fresh = [
            p for p in r.pods("controller")
            if p["status"].get("phase") == "Running" and p["metadata"]["uid"] not in old
        ]  # fmt: skip
        return fresh[0] if fresh else None

    return wait_for("the upgraded controller Running", new_pod, RUNNING_TIMEOUT)


def node_pid_namespaces(node: RealNode) -> set[str]:
    """The PID namespaces of the processes in the node's pods (its kubelet's cgroup root)."""
    out = set()
    for procs in (CGROUP_ROOT / "unified" / node.name).rglob("cgroup.procs"):
        with contextlib.suppress(OSError):  # a cgroup or a process that just went away
            for pid in procs.read_text().split():
                out.add(os.readlink(f"/proc/{pid}/ns/pid"))
    return out


def ready(pod: dict[str, Any]) -> bool:
    """Running with every container ready."""
    statuses = pod["status"].get("containerStatuses") or [{"ready": False}]
    return pod["status"].get("phase") == "Running" and all(s["ready"] for s in statuses)


def values_file(path: Path, values: dict[str, Any]) -> str:
    """``values`` written as a values file for `helm -f`; its path."""
    path.write_text(json.dumps(values))
    return str(path)
