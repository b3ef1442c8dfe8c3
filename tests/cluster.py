"""A real, throw-away Kubernetes control plane on 127.0.0.1 for the Helm chart tests.

    tools = find_tools()                       # helm/etcd/kube/kwok as `make tools` built them
    with Cluster.start(tools, tmp_path, nodes=3) as c:
        c.helm("install", "r1", "charts/swarmscope", "-n", "t1", "--create-namespace", "--wait")
        c.api.get("/apis/apps/v1/namespaces/t1/daemonsets")

etcd, kube-apiserver (client-certificate auth, RBAC authorization), kube-controller-manager,
kube-scheduler and kwok run as child processes on random free loopback ports, everything in
one temporary directory; they are stopped (SIGTERM, then SIGKILL) on exit. kwok fakes the
nodes' kubelets: the fake nodes stay Ready and scheduled pods are marked Running/Ready without
running any container, so `helm install --wait` exercises the real API server, admission,
controllers and scheduler but no image is pulled.

Caveats: every wait is bounded (see the *_TIMEOUT constants); on a failure the last lines of
each component's log are part of the exception. The binaries come from tools/k8s/build.sh,
run by `make tools`; a test that finds one missing fails at once (tests/prebuilt.py).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import prebuilt

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "tools" / "k8s" / "build.sh"

START_TIMEOUT = 90.0  # one component becoming ready (the apiserver is the slow one)
NODES_TIMEOUT = 60.0  # fake nodes turning Ready
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class Tools:
    helm: Path
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    kwok_stages: Path  # directory of stage YAML files shipped with kwok


def find_tools(need: tuple[str, ...] = ("etcd", "kwok", "helm", "kube")) -> Tools:
    """The cluster's binaries, as `make tools` cached them; the test fails if one of ``need`` is
    not (``need=("helm",)`` for the tests that only render the chart)."""
    prebuilt.run([str(BUILD), *need])
    etcd, kwok, helm, kube = (
        Path(p) for p in prebuilt.run([str(BUILD), "--path", "etcd", "kwok", "helm", "kube"]).split()
    )
    return Tools(
        helm=helm / "bin" / "helm",
        etcd=etcd / "bin" / "etcd",
        kube_apiserver=kube / "bin" / "kube-apiserver",
        kube_controller_manager=kube / "bin" / "kube-controller-manager",
        kube_scheduler=kube / "bin" / "kube-scheduler",
        kwok=kwok / "bin" / "kwok",
        kwok_stages=kwok / "stage",
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flags(**kw: object) -> list[str]:
    """flags(data_dir=p, secure_port=1) -> ["--data-dir=p", "--secure-port=1"]"""
    return [f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(d: Path) -> None:
    """CA, apiserver serving cert, admin client cert (system:masters), service-account keys."""
    d.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=swarmscope-test-ca",
        "-keyout",
        str(d / "ca.key"),
        "-out",
        str(d / "ca.crt"),
    )
    ext = d / "server.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n"
    )
    for name, subj, extfile in (
        ("server", "/CN=kube-apiserver", ext),
        ("admin", "/O=system:masters/CN=admin", None),
    ):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            subj,
            "-keyout",
            str(d / f"{name}.key"),
            "-out",
            str(d / f"{name}.csr"),
        )
        sign = [
            "x509",
            "-req",
            "-in",
            str(d / f"{name}.csr"),
            "-CA",
            str(d / "ca.crt"),
            "-CAkey",
            str(d / "ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            str(d / f"{name}.crt"),
        ]
        if extfile:
            sign += ["-extfile", str(extfile)]
        _openssl(*sign)
    _openssl("genrsa", "-out", str(d / "sa.key"), "2048")
    _openssl("rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub"))


def write_kubeconfig(path: Path, server: str, pki: Path) -> None:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "t", "cluster": {"server": server, "certificate-authority-data": b64(pki / "ca.crt")}}
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": b64(pki / "admin.crt"),
                    "client-key-data": b64(pki / "admin.key"),
                },
            }
        ],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "admin"}}],
        "current-context": "t",
    }
    path.write_text(json.dumps(cfg))  # JSON is YAML; every client reads it
    path.chmod(0o600)


class ApiError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class Api:
    """Minimal JSON client for the API server (admin client certificate)."""

    def __init__(self, server: str, pki: Path) -> None:
        self.server = server
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def request(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace")) from e
        return json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode()

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def can(
        self, user: str, verb: str, resource: str, namespace: str = "", groups: list[str] | None = None
    ) -> bool:
        """SubjectAccessReview: what RBAC really grants ``user`` (the authorizer decides)."""
        spec: dict[str, Any] = {"user": user, "resourceAttributes": {"verb": verb, "resource": resource}}
        if groups:
            spec["groups"] = groups
        if namespace:
            spec["resourceAttributes"]["namespace"] = namespace
        r = self.post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        return bool(r["status"].get("allowed"))


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, n: int = 15) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            return ""
        return "\n".join(f"  [{self.name}] {line}" for line in lines)


def _wait(what: str, cond: Any, timeout: float, procs: list[Proc]) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        for p in procs:
            if p.popen.poll() is not None:
                raise RuntimeError(
                    f"{p.name} exited (rc={p.popen.returncode}) while waiting for {what}\n{p.tail()}"
                )
        try:
            if cond():
                return
        except Exception as e:  # not up yet: keep polling until the deadline
            last = e
        time.sleep(0.5)
    logs = "\n".join(p.tail() for p in procs)
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s (last error: {last})\n{logs}")


@dataclass
class Cluster:
    tools: Tools
    dir: Path
    kubeconfig: Path
    api: Api
    nodes: list[str]
    procs: list[Proc] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    # "none": the API server leaves the `kubernetes` Service's endpoints alone (its own would be
    # 127.0.0.1, where no pod reaches it); a real node writes one it can reach (tests/realnode.py).
    endpoint_reconciler: str = "lease"

    @classmethod
    @contextlib.contextmanager
    def start(
        cls, tools: Tools, workdir: Path, nodes: int = 3, endpoint_reconciler: str = "lease"
    ) -> Iterator[Cluster]:
        procs: list[Proc] = []
        t0 = time.monotonic()
        timings: dict[str, float] = {}
        try:
            c = cls._start(tools, workdir, nodes, procs, timings, endpoint_reconciler)
            timings["total"] = time.monotonic() - t0
            print("cluster: up: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()), flush=True)
            yield c
        finally:
            stop(procs)

    @classmethod
    def _start(
        cls,
        tools: Tools,
        d: Path,
        n_nodes: int,
        procs: list[Proc],
        timings: dict[str, float],
        endpoint_reconciler: str = "lease",
    ) -> Cluster:
        pki = d / "pki"
        t = time.monotonic()
        make_pki(pki)
        timings["pki"] = time.monotonic() - t

        def spawn(name: str, argv: list[str]) -> Proc:
            log = d / f"{name}.log"
            f = log.open("wb")
            # Own session: the whole component (and anything it forks) is signalled as a group.
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=d, start_new_session=True)
            f.close()
            proc = Proc(name, p, log)
            procs.append(proc)
            return proc

        # etcd
        t = time.monotonic()
        ec, ep = free_port(), free_port()
        etcd_url, peer_url = f"http://127.0.0.1:{ec}", f"http://127.0.0.1:{ep}"
        spawn("etcd", [str(tools.etcd), *flags(
            name="t", data_dir=d / "etcd", log_level="warn",
            listen_client_urls=etcd_url, advertise_client_urls=etcd_url,
            listen_peer_urls=peer_url, initial_advertise_peer_urls=peer_url,
            initial_cluster=f"t={peer_url}", listen_metrics_urls=f"http://127.0.0.1:{free_port()}",
        )])  # fmt: skip

        def etcd_ok() -> bool:
            with urllib.request.urlopen(etcd_url + "/health", timeout=2) as r:
                return bool(json.loads(r.read()).get("health") == "true")

        _wait("etcd", etcd_ok, START_TIMEOUT, procs)
        timings["etcd"] = time.monotonic() - t

        # kube-apiserver: client certificates (admin is in system:masters) + RBAC, so the chart's
        # Roles are evaluated by the real authorizer. Privileged containers stay forbidden
        # (--allow-privileged=false): a probe pod asking for privileged would be rejected.
        t = time.monotonic()
        port = free_port()
        server = f"https://127.0.0.1:{port}"
        spawn("kube-apiserver", [str(tools.kube_apiserver), *flags(
            etcd_servers=etcd_url, bind_address="127.0.0.1", advertise_address="127.0.0.1",
            secure_port=port, cert_dir=d / "apiserver-certs",
            tls_cert_file=pki / "server.crt", tls_private_key_file=pki / "server.key",
            client_ca_file=pki / "ca.crt", service_account_key_file=pki / "sa.pub",
            service_account_signing_key_file=pki / "sa.key",
            service_account_issuer="https://kubernetes.default.svc",
            service_cluster_ip_range="10.0.0.0/24", authorization_mode="RBAC",
            allow_privileged="false", enable_priority_and_fairness="false", profiling="false",
            # a real node (tests/realnode.py) is reached by its IP: its name resolves nowhere
            kubelet_preferred_address_types="InternalIP,Hostname",
            endpoint_reconciler_type=endpoint_reconciler,
        )])  # fmt: skip
        api = Api(server, pki)
        _wait("kube-apiserver /readyz", lambda: api.get("/readyz") == "ok", START_TIMEOUT, procs)
        timings["kube-apiserver"] = time.monotonic() - t
        kubeconfig = d / "admin.kubeconfig"
        write_kubeconfig(kubeconfig, server, pki)

        # Controller manager (Deployments, ReplicaSets, DaemonSets, service-account tokens) and
        # scheduler (binds pods to the fake nodes). Their HTTPS ports are random loopback ports.
        t = time.monotonic()
        kc: dict[str, object] = {
            "kubeconfig": kubeconfig,
            "authentication_kubeconfig": kubeconfig,
            "authorization_kubeconfig": kubeconfig,
            "bind_address": "127.0.0.1",
            "leader_elect": "false",
        }
        spawn("kube-controller-manager", [str(tools.kube_controller_manager), *flags(
            **kc, secure_port=free_port(), cert_dir=d / "kcm-certs",
            service_account_private_key_file=pki / "sa.key", root_ca_file=pki / "ca.crt",
            use_service_account_credentials="true",
        )])  # fmt: skip
        spawn("kube-scheduler", [str(tools.kube_scheduler), *flags(
            **kc, secure_port=free_port(), cert_dir=d / "sched-certs",
        )])  # fmt: skip
        # kwok: only nodes annotated kwok.x-k8s.io/node=fake; the stage files move fake pods to
        # Running/Ready and keep the nodes' heartbeats (Ready) going.
        stages = sorted(str(p) for p in tools.kwok_stages.rglob("*.yaml") if _is_fast_stage(p))
        spawn("kwok", [str(tools.kwok), *flags(
            kubeconfig=kubeconfig, manage_all_nodes="false",
            manage_nodes_with_annotation_selector=f"{KWOK_NODE_ANNOTATION}=fake",
            node_ip="127.0.0.1", node_port=free_port(), server_address=f"127.0.0.1:{free_port()}",
            cidr="10.244.0.0/16",
        ), *(f"--config={s}" for s in stages)])  # fmt: skip

        def default_sa() -> bool:
            # the service-account controller is working once "default" exists in "default"
            api.get("/api/v1/namespaces/default/serviceaccounts/default")
            return True

        _wait("kube-controller-manager (default ServiceAccount)", default_sa, START_TIMEOUT, procs)
        timings["controllers"] = time.monotonic() - t

        t = time.monotonic()
        names = [f"kwok-node-{i}" for i in range(n_nodes)]
        for name in names:
            api.post("/api/v1/nodes", fake_node(name))

        def nodes_ready() -> bool:
            items = api.get("/api/v1/nodes")["items"]
            ready = [
                n
                for n in items
                if any(
                    c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", [])
                )
            ]
            return len(ready) == n_nodes

        _wait(f"{n_nodes} fake nodes Ready", nodes_ready, NODES_TIMEOUT, procs)
        timings["nodes"] = time.monotonic() - t
        return cls(tools, d, kubeconfig, api, names, procs, timings, endpoint_reconciler)

    def helm(
        self, *args: str, check: bool = True, timeout: float = 300.0, home: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = helm_env(home or self.dir)
        env["KUBECONFIG"] = str(self.kubeconfig)
        r = subprocess.run(
            [str(self.tools.helm), *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        if check and r.returncode != 0:
            logs = "\n".join(p.tail(8) for p in self.procs)
            raise RuntimeError(f"helm {' '.join(args)} failed (rc={r.returncode}):\n{r.stderr}\n{logs}")
        return r


def helm_env(d: Path) -> dict[str, str]:
    """helm's config/cache/data and client-go's discovery cache (~/.kube/cache) go under d.

    A per-directory cache also means a fresh discovery: an API added to the cluster (a CRD) is
    seen by the next helm call with another d, not hidden by a cache from earlier calls."""
    env = dict(os.environ)
    env["HOME"] = str(d / "home")
    for k in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[k] = str(d / "helm" / k.lower())
    env.pop("KUBECONFIG", None)
    return env


# kwok ships stage sets under kustomize/stage/<kind>/<set>/. "fast" moves nodes and pods to
# their final state at once (no simulated delays), which keeps --wait short; the lease
# heartbeat keeps the fake nodes Ready like a kubelet would.
KWOK_STAGE_SETS = {("node", "fast"), ("node", "heartbeat-with-lease"), ("pod", "fast")}


def _is_fast_stage(p: Path) -> bool:
    return (p.parent.parent.name, p.parent.name) in KWOK_STAGE_SETS and p.name != "kustomization.yaml"


def fake_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "32", "memory": "64Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "64Gi", "pods": "110"},
        },
    }


def stop(procs: list[Proc], grace: float = 10.0) -> None:
    """SIGTERM every component (reverse start order), then SIGKILL what is left."""
    for p in reversed(procs):
        if p.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.popen.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in reversed(procs):
        try:
            p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.popen.pid, signal.SIGKILL)
            p.popen.wait(timeout=5)


if __name__ == "__main__":
    # Manual use: python tests/cluster.py  -> builds, starts, prints the kubeconfig, waits for ^C.
    tools = find_tools()
    work = (
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(os.environ.get("TMPDIR", "/tmp")) / "swarmscope-cluster"
    )
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with Cluster.start(tools, work) as c:
        print(f"KUBECONFIG={c.kubeconfig}")
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
