"""Inspektor Gadget v0.35 deployed in the real cluster (tests/realcluster.py): one gadget pod per node.

    with deploy_ig(rc) as ig:                       # image imported, DaemonSet Running on every node
        subprocess.run([*ig.client, "trace", "exec", "-o", "json", "-n", ns])   # every node's execs

    python tests/realcluster.py --nodes 3 --ig      # by hand: the nodes, then IG in them; ^C ends

The manifests are the ones `kubectl-gadget deploy --print-only` renders (image built here by
tools/build_igcluster_image.py, pull policy Never, hook mode podinformer), changed where this
machine or several nodes on one kernel need it (docs/ig-cluster.md):
- capability SYS_RESOURCE dropped: the machine's bounding set lacks it (docs/platform.md#cgroups);
  on kernel >= 5.11 BPF memory is charged to the cgroup, so IG's RemoveMemlock has nothing to do;
- hook mode podinformer: the default (fanotify+ebpf) needs a kprobe (fsnotify_remove_first_event);
- /run an emptyDir, not the host's /run: every node's gadget pod would otherwise remove and
  re-create the same /run/gadgettracermanager.socket (all nodes share this machine's /run);
- bpffs: the host's /sys/fs/bpf/<node> (subPathExpr), so the nodes' pins do not collide;
- /host/etc and /host/opt read-only: they are written only for the CRI-O and NRI hook modes.
- the host's /proc/1 is unreadable here (its namespace links: EACCES; pid 1 holds a capability
  the rest of the machine lacks), and IG compares its own namespaces with pid 1's at start-up
  ("Detecting pid namespace: stat /host/proc/1/ns/pid: permission denied"): the pod's command
  first bind-mounts kthreadd's entry (/host/proc/2, in every initial namespace, readable) over
  /host/proc/1 in its own mount namespace, then execs IG's entrypoint.

Caveats: undeploy removes everything the manifests made, cluster-scoped objects included, and the
bpffs directories; it waits for the gadget pods to be gone (bounded).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import prebuilt
import yaml
from realnode import wait_for

ROOT = Path(__file__).resolve().parent.parent
REPO = "ghcr.io/inspektor-gadget/inspektor-gadget"
VERSION = "v0.35.0"
NS = "gadget"
READY_TIMEOUT = 180.0
# Appears in order: what later objects refer to first.
ORDER = ("Namespace", "CustomResourceDefinition", "ServiceAccount", "ConfigMap", "ClusterRole",
         "ClusterRoleBinding", "Role", "RoleBinding", "DaemonSet")  # fmt: skip
DROP_CAPS = {"SYS_RESOURCE"}


@dataclass
class IG:
    kubeconfig: Path
    kubectl_gadget: Path
    image: str
    pods: dict[str, str]  # node -> gadget pod

    @property
    def client(self) -> list[str]:
        return [str(self.kubectl_gadget), "--kubeconfig", str(self.kubeconfig)]


def find_ig() -> tuple[Path, Path]:
    """(kubectl-gadget, the gadget image's OCI archive), as `make tools` built them."""
    bin_dir = Path(prebuilt.run([str(ROOT / "tools" / "build_igcluster.sh")]).split()[-1]) / "bin"
    archive = prebuilt.run([sys.executable, str(ROOT / "tools" / "build_igcluster_image.py")]).split()[-1]
    return bin_dir / "kubectl-gadget", Path(archive)


def manifests(kubectl_gadget: Path, image: str) -> list[dict[str, Any]]:
    """What `kubectl-gadget deploy` would apply, with this machine's changes (module docstring)."""
    out = subprocess.run(
        [str(kubectl_gadget), "deploy", "--print-only", "--image", image, "--image-pull-policy", "Never",
         "--hook-mode", "podinformer", "--verify-image=false"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    objs = [o for o in yaml.safe_load_all(out.stdout) if o]
    (ds,) = [o for o in objs if o["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    caps = c["securityContext"]["capabilities"]
    caps["add"] = [x for x in caps["add"] if x not in DROP_CAPS]
    for m in c["volumeMounts"]:
        if m["mountPath"] == "/run":
            m["name"] = "gadget-run"
        elif m["mountPath"] == "/sys/fs/bpf":
            m["subPathExpr"] = "$(NODE_NAME)"
        elif m["mountPath"] in ("/host/etc", "/host/opt"):
            m["readOnly"] = True
    spec["volumes"].append({"name": "gadget-run", "emptyDir": {}})
    remount = "/bin/busybox mount --bind /host/proc/2 /host/proc/1"
    c["command"] = ["/bin/busybox", "sh", "-c", f"{remount} && exec {' '.join(c['command'])}"]
    return sorted(objs, key=lambda o: ORDER.index(o["kind"]))


def _path(obj: dict[str, Any], name: bool = False) -> str:
    api = obj["apiVersion"]
    base = f"/api/{api}" if api == "v1" else f"/apis/{api}"
    ns = obj["metadata"].get("namespace")
    p = f"{base}/namespaces/{ns}" if ns else base
    p += f"/{obj['kind'].lower()}s"
    return f"{p}/{obj['metadata']['name']}" if name else p


def _gadget_pods(api: Any) -> list[dict[str, Any]]:
    return list(api.get(f"/api/v1/namespaces/{NS}/pods?labelSelector=k8s-app%3Dgadget")["items"])


@contextlib.contextmanager
def deploy_ig(rc: Any) -> Iterator[IG]:
    """Import the gadget image into every node, apply the manifests, wait for one ready gadget pod
    per node; undeploy at exit."""
    kubectl_gadget, archive = find_ig()
    image = rc.import_image(archive, REPO)
    if image != f"{REPO}:{VERSION}":
        raise RuntimeError(f"igcluster: {archive} imported as {image}, not {REPO}:{VERSION}")
    api, objs = rc.cluster.api, manifests(kubectl_gadget, image)
    t = time.monotonic()
    try:
        for o in objs:
            api.post(_path(o), o)
        names = sorted(n.name for n in rc.nodes)

        def ready() -> dict[str, str] | None:
            pods = _gadget_pods(api)
            ok = [
                p for p in pods if all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}])
            ]
            by = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in ok}
            return by if sorted(by) == names and len(pods) == len(names) else None

        pods = wait_for("a ready gadget pod on every node", ready, READY_TIMEOUT)
        print(f"igcluster: {len(pods)} gadget pods ready in {time.monotonic() - t:.1f} s", flush=True)
        yield IG(rc.cluster.kubeconfig, kubectl_gadget, image, pods)
    finally:
        for o in reversed(objs):
            with contextlib.suppress(Exception):  # what failed to be made is not there to delete
                api.request("DELETE", _path(o, name=True))
        wait_for("the gadget pods gone", lambda: not _gadget_pods(api), READY_TIMEOUT)
        for n in rc.nodes:
            shutil.rmtree(f"/sys/fs/bpf/{n.name}", ignore_errors=True)
