"""Which pod a cgroup (or a process) is: namespace, pod and container, from the kubelet's own names.

    idx = PodIndex()                        # /var/log/pods and /var/log/containers (read-only)
    idx.lookup("/kubepods/besteffort/pod0c1d.../4f2e...")   # PodRef("ns", "web-7d4", "nginx", ...)
    str(idx.of_pid(1234) or "")             # "ns/web-7d4/nginx", "" when not a pod's process

The kubelet puts every container in ``<root>/kubepods/[<qos>/]pod<uid>/<container-id>``
(cgroupfs driver; the systemd driver spells it ``kubepods-<qos>-pod<uid_with_underscores>.slice``
and ``cri-containerd-<id>.scope``), so the cgroup path gives the pod's uid and the container's
id. Names come from the two directories the kubelet keeps for logs, read for their **names
only** (never a log's content): ``/var/log/pods/<namespace>_<pod>_<uid>/<container>/`` and its
links ``/var/log/containers/<pod>_<namespace>_<container>-<container-id>.log``. Neither name
part can hold ``_`` (namespaces, pods and containers are DNS names), so the split is exact.
docs/pod-attribution.md says why this and not the CRI socket or the API server.

Caveats: a container id missing from ``/var/log/containers`` (a runtime that does not link
there) still names its pod from ``/var/log/pods``, and its container too when the pod has only
one; otherwise the container is "". A miss rescans at most every ``rescan_s`` (pods come and
go); a pod deleted since keeps its last name until then. Paths outside ``kubepods`` are no pod.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PODS_DIR = "/var/log/pods"
CONTAINERS_DIR = "/var/log/containers"
# Where the kubelet keeps them elsewhere (its podLogsDir): the probe's and top-ebpf's setting.
ENV_PODS_DIR = "SWARMSCOPE_POD_LOGS_DIR"
ENV_CONTAINERS_DIR = "SWARMSCOPE_CONTAINER_LOGS_DIR"

# pod<uid> (cgroupfs) or kubepods-<qos>-pod<uid_with_underscores>.slice (systemd).
_UID = r"[0-9a-fA-F]{8}[-_](?:[0-9a-fA-F]{4}[-_]){3}[0-9a-fA-F]{12}"
_POD_SEG = re.compile(rf"^(?:kubepods(?:-[a-z]+)*-)?pod({_UID})(?:\.slice)?$")
# <id>, or <runtime>-<id>.scope (systemd): cri-containerd-, crio-, docker-.
_CTR_SEG = re.compile(r"^(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$")
_LOG_LINK = re.compile(r"^([^_]+)_([^_]+)_(.+)-([0-9a-f]{64})\.log$")


@dataclass(frozen=True)
class PodRef:
    namespace: str
    pod: str
    container: str  # "" when the container could not be told apart
    uid: str

    def __str__(self) -> str:
        return (
            f"{self.namespace}/{self.pod}/{self.container}"
            if self.container
            else f"{self.namespace}/{self.pod}"
        )


def parse_cgroup_path(path: str) -> tuple[str, str] | None:
    """``(pod uid, container id)`` of a kubelet cgroup path (id "" for the pod's own cgroup)."""
    segs = [s for s in path.split("/") if s]
    for i, seg in enumerate(segs):
        m = _POD_SEG.match(seg)
        if m is None or not any(s.startswith("kubepods") for s in segs[: i + 1]):
            continue  # pod<uid> only counts under the kubelet's kubepods tree
        uid = m.group(1).replace("_", "-").lower()
        c = _CTR_SEG.match(segs[i + 1]) if i + 1 < len(segs) else None
        return uid, c.group(1) if c else ""
    return None


class PodIndex:
    """cgroup path / pid -> PodRef, from the kubelet's log directory names (see the module doc)."""

    def __init__(
        self,
        pods_dir: str | os.PathLike[str] = PODS_DIR,
        containers_dir: str | os.PathLike[str] = CONTAINERS_DIR,
        *,
        rescan_s: float = 1.0,
        proc: str = "/proc",
    ) -> None:
        self.pods_dir = Path(pods_dir)
        self.containers_dir = Path(containers_dir)
        self.rescan_s = rescan_s
        self.proc = Path(proc)
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[str, str, list[str]]] = {}  # uid -> (namespace, pod, containers)
        self._ctrs: dict[str, tuple[str, str, str]] = {}  # container id -> (namespace, pod, container)
        self._scanned = float("-inf")

    @classmethod
    def from_env(cls, pods_dir: str | None = None, containers_dir: str | None = None) -> PodIndex:
        """The given dirs, else ``$SWARMSCOPE_POD_LOGS_DIR`` / ``$SWARMSCOPE_CONTAINER_LOGS_DIR``,
        else the kubelet's defaults."""
        return cls(
            pods_dir or os.environ.get(ENV_PODS_DIR) or PODS_DIR,
            containers_dir or os.environ.get(ENV_CONTAINERS_DIR) or CONTAINERS_DIR,
        )

    def available(self) -> bool:
        """Whether the kubelet's pod log directory is there to read (a Kubernetes node)."""
        return self.pods_dir.is_dir()

    def scan(self) -> None:
        """Read both directories' names again."""
        pods: dict[str, tuple[str, str, list[str]]] = {}
        for name in _listdir(self.pods_dir):
            parts = name.split("_")
            if len(parts) == 3:
                ns, pod, uid = parts
                pods[uid.lower()] = (ns, pod, sorted(_listdir(self.pods_dir / name)))
        ctrs: dict[str, tuple[str, str, str]] = {}
        for name in _listdir(self.containers_dir):
            m = _LOG_LINK.match(name)
            if m is not None:
                pod, ns, ctr, cid = m.groups()
                ctrs[cid] = (ns, pod, ctr)
        with self._lock:
            self._pods, self._ctrs, self._scanned = pods, ctrs, time.monotonic()

    def lookup(self, cgroup_path: str) -> PodRef | None:
        """The pod (and container) whose cgroup ``cgroup_path`` is; None when it is no pod's."""
        ids = parse_cgroup_path(cgroup_path)
        if ids is None:
            return None
        ref = self._find(*ids)
        if ref is None and time.monotonic() - self._scanned >= self.rescan_s:
            self.scan()
            ref = self._find(*ids)
        return ref

    def of_pid(self, pid: int) -> PodRef | None:
        """The pod of process ``pid`` (from /proc/<pid>/cgroup); None when it is no pod's or gone."""
        try:
            lines = (self.proc / str(pid) / "cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            path = line.split(":", 2)[-1]
            if parse_cgroup_path(path) is not None:
                return self.lookup(path)
        return None

    def _find(self, uid: str, cid: str) -> PodRef | None:
        with self._lock:
            pod = self._pods.get(uid)
            ctr = self._ctrs.get(cid) if cid else None
        if ctr is not None and (pod is None or pod[:2] == ctr[:2]):
            return PodRef(ctr[0], ctr[1], ctr[2], uid)
        if pod is None:
            return None
        ns, name, containers = pod
        # A lone container needs no id to be named; the pause (sandbox) has no log dir.
        return PodRef(ns, name, containers[0] if len(containers) == 1 and cid else "", uid)


def _listdir(d: Path) -> list[str]:
    try:
        return os.listdir(d)
    except OSError:
        return []
