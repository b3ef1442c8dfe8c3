"""A real Kubernetes node on this machine: containerd + runc + kubelet joined to the test cluster.

    tools, node_tools = find_tools(), find_node_tools()
    with Cluster.start(tools, tmp_path / "c", nodes=0) as c, RealNode.start(c, node_tools) as n:
        busybox = n.import_image(node_tools.busybox_tar, "swarmscope.local/busybox")
        c.api.post("/api/v1/namespaces/default/pods", pod_on(n.name, ...))

containerd v2.1, runc v1.3, the CNI plugins v1.7 and the kubelet (same version as the API
server) come from tools/k8s/build.sh, cached by version. The choices this machine needs (see
docs/realnode.md): cgroup v1 controllers plus v2 at /sys/fs/cgroup/unified (a hybrid layout) ->
KubeletConfiguration failCgroupV1: false and cgroupDriver: cgroupfs; a negative oom_score_adj is
refused here -> containerd's restrict_oom_score_adj = true (else every sandbox fails with "can't
get final child's PID from pipe").

Isolation (six people share the machine): containerd runs in a network namespace the fixture
makes (`nsenter --net`, so the mount namespace stays the host's and the kubelet's volume mounts
are visible to runc), so the pods' CNI bridge lives there; a veth joins it to a host bridge
(tests/nodenet.py: a lone node's own, or the one tests/realcluster.py's nodes share), and the
node's IP is a host address on that bridge (the kubelet refuses a loopback node IP). The
kubelet's cgroup root is /<name> in every hierarchy, its root dir, pod logs, containerd's
root/state and every socket are under the node's own directories, and pod network namespaces are
mounted under containerd's state dir. Teardown deletes the pods, stops the kubelet, kills and
removes what containerd still runs, stops containerd, unmounts what is left under the node's
dirs, removes the cgroups and the network namespace: `leftovers()` lists anything that survived.

Services: kube-proxy (nftables mode) runs inside the node's network namespace, where the pods'
bridge is, so its rules never touch the host's; the node IP serves the cluster DNS
(tests/clusterdns.py, Service name -> ClusterIP) that the kubelet writes into pods' resolv.conf.

Caveats: the kubelet's API (logs/exec/port-forward) listens on the host end of the veth without
authentication, reachable from this machine only. containerd's CRI streaming server (exec,
port-forward) listens on the namespace's end of the veth: the kubelet, in the host's namespace,
proxies those streams to it, and could not reach a loopback address inside the namespace. Every
wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import prebuilt
from cluster import BUILD, Cluster, Proc, _wait, free_port, stop
from clusterdns import ClusterDNS
from nodenet import Bridge, Net, run
from tcpforward import forward

CGROUP_ROOT = Path("/sys/fs/cgroup")
START_TIMEOUT = 90.0  # containerd serving / the node turning Ready
POD_TIMEOUT = 120.0  # a pod being deleted at teardown
IMPORT_TIMEOUT = 600.0  # `ctr images import` of one archive
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
SHIM_SOCKETS = Path("/run/containerd/s")  # every shim's socket, whatever containerd is told
# Fixed paths the kubelet and containerd's shims use whatever they are told; removed at teardown
# (only when empty) if the node created them.
GLOBAL_DIRS = (
    Path("/var/log/containers"),
    Path("/var/log/pods"),  # the chart's probe mounts it (DirectoryOrCreate): its kubelet logs elsewhere
    Path("/run/containerd/runc/k8s.io"),
    Path("/run/containerd/runc"),
    SHIM_SOCKETS,
    Path("/run/containerd"),
)


def _remove_dead_sockets(d: Path) -> None:
    """Unlink the unix sockets in ``d`` that refuse a connect (their process is gone)."""
    for f in d.iterdir() if d.is_dir() else ():
        if not f.is_socket():
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(1.0)
            try:
                c.connect(str(f))
            except (ConnectionRefusedError, FileNotFoundError):
                f.unlink(missing_ok=True)
            except OSError:
                pass  # busy or slow: alive, or not ours to judge


@dataclass(frozen=True)
class NodeTools:
    kubelet: Path
    kube_proxy: Path
    containerd_bin: Path  # containerd, containerd-shim-runc-v2, ctr
    runc: Path
    cni_bin: Path
    pause_tar: Path
    busybox_tar: Path
    jaeger_tar: Path  # the chart's Jaeger (docker.io/jaegertracing/jaeger:2.13.0)


def find_node_tools() -> NodeTools:
    """The node's binaries and base images, as `make tools` cached them (fails the test if not)."""
    names = ["kubelet", "kubeproxy", "containerd", "runc", "cni", "nodeimages", "jaegerimage"]
    out = prebuilt.run([str(BUILD), *names])
    kubelet, kube_proxy, containerd, runc, cni, images, jaeger = (Path(p) for p in out.split())
    return NodeTools(
        kubelet=kubelet / "bin" / "kubelet",
        kube_proxy=kube_proxy / "bin" / "kube-proxy",
        containerd_bin=containerd / "bin",
        runc=runc / "bin" / "runc",
        cni_bin=cni / "bin",
        pause_tar=images / "pause.tar",
        busybox_tar=images / "busybox.tar",
        jaeger_tar=jaeger / "jaeger.tar",
    )


def cgroup_hierarchies() -> list[Path]:
    """Every cgroup hierarchy mounted under /sys/fs/cgroup (v1 controllers and the v2 one).

    Only there: an image build's chroot mounts the same v2 hierarchy again elsewhere, and a
    second mount of one hierarchy is the same directory tree, not another one."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _dev, mnt, fstype, *_ = line.split()
        if fstype in ("cgroup", "cgroup2") and Path(mnt).is_relative_to(CGROUP_ROOT):
            out.append(Path(mnt))
    return out


def _rm_cgroup_tree(d: Path) -> None:
    """rmdir depth-first (cgroup dirs cannot be removed with their files, only emptied)."""
    if not d.is_dir():
        return
    for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            sub.rmdir()
    with contextlib.suppress(OSError):
        d.rmdir()


@dataclass
class RealNode:
    name: str
    dir: Path
    run: Path  # short dir for unix sockets (sun_path is 108 bytes)
    net: Net
    tools: NodeTools
    cluster: Cluster
    procs: list[Proc] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    absent: list[Path] = field(default_factory=list)  # GLOBAL_DIRS that did not exist at start
    dns: ClusterDNS | None = None
    api_port: int = 0  # the API server's port on the node IP (tests/tcpforward.py)
    kubernetes_endpoint: bool = True
    down: bool = False
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def cgroup_root(self) -> str:
        return f"/{self.name}"

    @property
    def pod_logs(self) -> Path:
        """The kubelet's podLogsDir: its own (a kubelet deletes the dirs of pods it does not run)."""
        return self.dir / "pod-logs"

    @property
    def containerd_sock(self) -> Path:
        return self.run / "containerd.sock"

    def ctr(self, *args: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return run(
            str(self.tools.containerd_bin / "ctr"), "--address", str(self.containerd_sock),
            "-n", "k8s.io", *args, check=check, timeout=timeout,
        )  # fmt: skip

    def import_image(self, tar: Path, repo: str) -> str:
        """Import an OCI archive into the CRI's namespace as ``repo:<the archive's tag>``.

        The image gets exactly that one fully qualified name (`--base-name`): the CRI resolves
        an image by id to one of its names, and `--index-name` would add a second
        docker.io/library/import-<date> name that the CRI then fails to find."""
        # The project's image is ~1.5 GB unpacked: minutes on a busy machine.
        self.ctr("images", "import", "--base-name", repo, str(tar), timeout=IMPORT_TIMEOUT)
        names = [n for n in self.ctr("images", "ls", "-q").stdout.split() if n.startswith(repo + ":")]
        if len(names) != 1:
            raise RuntimeError(f"realnode: importing {tar} as {repo} gave {names}")
        return names[0]

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        cluster: Cluster,
        tools: NodeTools,
        name: str | None = None,
        *,
        net: Net | None = None,
        kubernetes_endpoint: bool = True,
    ) -> Iterator[RealNode]:
        """One node; without ``net`` on a bridge of its own (tests/realcluster.py joins several).

        ``kubernetes_endpoint``: this node's API forwarder is the `kubernetes` Service's endpoint
        (one node of a cluster does it)."""
        name = name or f"ssrn{os.getpid()}"
        with contextlib.ExitStack() as own:
            if net is None:
                net = own.enter_context(Bridge.up()).net(0, name)
                d = cluster.dir / "realnode"
            else:
                d = cluster.dir / name
            node = cls(name, d, Path("/run") / name, net, tools, cluster)
            node.kubernetes_endpoint = kubernetes_endpoint
            t0 = time.monotonic()
            try:
                node._start()
                node.timings["total"] = time.monotonic() - t0
                print(
                    f"realnode {name}: up: " + ", ".join(f"{k} {v:.1f} s" for k, v in node.timings.items()),
                    flush=True,
                )
                yield node
            finally:
                node.teardown()

    def memory(self) -> dict[str, float]:
        """RSS (MiB) of the node's own processes: containerd, kubelet, kube-proxy (not its pods)."""
        out = {}
        for p in self.procs:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{p.popen.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[p.name] = int(line.split()[1]) / 1024
        return out

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        log = self.dir / f"{name}.log"
        f = log.open("wb")
        p = subprocess.Popen(
            argv, stdout=f, stderr=subprocess.STDOUT, cwd=self.dir, env=env, start_new_session=True
        )
        f.close()
        proc = Proc(name, p, log)
        self.procs.append(proc)
        return proc

    def _start(self) -> None:
        t = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.absent = [p for p in GLOBAL_DIRS if not p.exists()]
        self.run.mkdir(mode=0o700)
        self.net.up()
        for h in cgroup_hierarchies():
            (h / self.name).mkdir()
        self.dns = self._stack.enter_context(ClusterDNS.serve(self.cluster.api, self.net.host_ip))
        api = urllib.parse.urlsplit(self.cluster.api.server)
        target = (api.hostname or "127.0.0.1", api.port or 443)
        self.api_port = self._stack.enter_context(forward(self.net.host_ip, target))
        if self.cluster.endpoint_reconciler == "none" and self.kubernetes_endpoint:
            self._point_kubernetes_service()
        self.timings["net+cgroups"] = time.monotonic() - t

        t = time.monotonic()
        self._write_configs()
        env = dict(os.environ)
        # containerd finds its shim on PATH; the shim is told runc's path by the runtime options.
        env["PATH"] = f"{self.tools.containerd_bin}:{env.get('PATH', '/usr/bin:/bin')}"
        self._spawn("containerd", [
            "nsenter", f"--net=/run/netns/{self.net.netns}", "--",
            str(self.tools.containerd_bin / "containerd"), "--config", str(self.dir / "containerd.toml"),
        ], env)  # fmt: skip
        _wait("containerd", lambda: self.ctr("version").returncode == 0, START_TIMEOUT, self.procs)
        if self.import_image(self.tools.pause_tar, PAUSE_IMAGE.split(":")[0]) != PAUSE_IMAGE:
            raise RuntimeError(f"realnode: {self.tools.pause_tar} is not {PAUSE_IMAGE}")
        self.timings["containerd"] = time.monotonic() - t

        # kube-proxy in the node's netns: Service ClusterIPs route for the pods on its bridge.
        self._spawn("kube-proxy", [
            "nsenter", f"--net=/run/netns/{self.net.netns}", "--",
            str(self.tools.kube_proxy), f"--config={self.dir / 'kube-proxy.yaml'}", "--v=1",
        ])  # fmt: skip

        t = time.monotonic()
        self._spawn("kubelet", [
            str(self.tools.kubelet), f"--config={self.dir / 'kubelet.yaml'}",
            f"--kubeconfig={self.cluster.kubeconfig}", f"--hostname-override={self.name}",
            f"--node-ip={self.net.host_ip}", f"--root-dir={self.dir / 'kubelet'}",
            f"--cert-dir={self.dir / 'kubelet' / 'pki'}", "--v=1",
        ])  # fmt: skip
        _wait(f"node {self.name} Ready", self._ready, START_TIMEOUT, self.procs)
        self.timings["kubelet"] = time.monotonic() - t

    def _point_kubernetes_service(self) -> None:
        """The `kubernetes` Service's endpoint: the API server's forwarder on the node IP.

        A real cluster's API server advertises an address its pods reach; this one listens on
        127.0.0.1 only, so in-cluster clients (the kill-pod fault) go 10.0.0.1:443 -> kube-proxy
        -> node IP:api_port -> the API server. Its certificate names 10.0.0.1 (tests/cluster.py).
        The cluster runs with --endpoint-reconciler-type=none, which leaves these to us."""
        port = {"name": "https", "port": self.api_port, "protocol": "TCP"}
        self.cluster.api.post("/api/v1/namespaces/default/endpoints", {
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "kubernetes",
                         "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": self.net.host_ip}], "ports": [port]}],
        })  # fmt: skip
        self.cluster.api.post("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.net.host_ip], "conditions": {"ready": True}}],
            "ports": [port],
        })  # fmt: skip

    def _ready(self) -> bool:
        n = self.cluster.api.get(f"/api/v1/nodes/{self.name}")
        return any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))

    def _write_configs(self) -> None:
        d, st = self.dir, self.dir / "containerd"
        cni_conf = d / "cni"
        cni_conf.mkdir(exist_ok=True)
        (cni_conf / "10-bridge.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": self.name,
            "plugins": [{
                "type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": self.net.pod_subnet}]],
                         "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(d / "cni-ipam")},
            }],
        }))  # fmt: skip
        # containerd 2.x config (version 3). Everything that defaults to a machine-wide path
        # (/var/lib/containerd, /run/containerd, /opt/containerd, /var/run/netns, the NRI
        # socket) is moved under the node's dirs or disabled.
        (d / "containerd.toml").write_text(f"""version = 3
root = "{st / "root"}"
state = "{self.run / "state"}"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.containerd_sock}"
[ttrpc]
  address = "{self.run / "containerd.ttrpc.sock"}"
[debug]
  address = "{self.run / "debug.sock"}"
[plugins.'io.containerd.internal.v1.opt']
  path = "{st / "opt"}"
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "{self.net.ns_ip}"
  stream_server_port = "0"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{self.tools.cni_bin}"]
    conf_dir = "{cni_conf}"
    max_conf_num = 1
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{self.tools.runc}"
        Root = "{self.run / "runc"}"
        SystemdCgroup = false
""")
        kubelet: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # hybrid cgroups: v1 controllers, v2 only at /sys/fs/cgroup/unified; no systemd here.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{self.containerd_sock}",
            "address": self.net.host_ip,
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            # Reachable from this machine only (veth); the API server's logs/exec need no cert.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": str(self.pod_logs),
            "failSwapOn": False,
            "resolvConf": "",
            "clusterDNS": [self.net.host_ip],
            "clusterDomain": "cluster.local",
            # No eviction or image GC: a busy shared disk must not evict test pods or delete
            # the imported images (they cannot be pulled back: no registry).
            "evictionHard": {"memory.available": "0%", "nodefs.available": "0%",
                             "imagefs.available": "0%", "nodefs.inodesFree": "0%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "shutdownGracePeriod": "0s",
            "localStorageCapacityIsolation": False,
        }  # fmt: skip
        (d / "kubelet.yaml").write_text(json.dumps(kubelet))
        # kube-proxy's kubeconfig: the admin one, through the forwarder on the node IP.
        kc = json.loads(self.cluster.kubeconfig.read_text())
        kc["clusters"][0]["cluster"]["server"] = f"https://{self.net.host_ip}:{self.api_port}"
        kc["clusters"][0]["cluster"]["tls-server-name"] = "127.0.0.1"
        (d / "node.kubeconfig").write_text(json.dumps(kc))
        (d / "node.kubeconfig").chmod(0o600)
        (d / "kube-proxy.yaml").write_text(json.dumps({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "nftables",
            "clientConnection": {"kubeconfig": str(d / "node.kubeconfig")},
            "hostnameOverride": self.name, "clusterCIDR": self.net.pod_subnet,
            # Its own netns: loopback ports collide with nobody.
            "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
            # Leave the machine's conntrack sysctls alone (they are not per-netns to set here).
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
        }))  # fmt: skip

    # ---- teardown -------------------------------------------------------------------------

    def teardown(self) -> None:
        """Leave nothing behind: pods, processes, mounts, cgroups, the netns, the node object.

        Once: a later call returns at once (tests/realcluster.py tears nodes down in parallel)."""
        if self.down:
            return
        self.down, t = True, time.monotonic()
        kubelet = next((p for p in self.procs if p.name == "kubelet"), None)
        if kubelet and kubelet.popen.poll() is None:
            with contextlib.suppress(Exception):
                self._delete_pods()
        stop([p for p in self.procs if p.name in ("kubelet", "kube-proxy")])
        self._stack.close()
        containerd = next((p for p in self.procs if p.name == "containerd"), None)
        if containerd and containerd.popen.poll() is None:
            self._kill_containers()
        stop([p for p in self.procs if p.name == "containerd"])
        self._kill_shims()
        self._unmount_all()
        for h in cgroup_hierarchies():
            _rm_cgroup_tree(h / self.name)
        self.net.down()
        with contextlib.suppress(Exception):
            self.cluster.api.request("DELETE", f"/api/v1/nodes/{self.name}")
        for link in _container_log_links(self.dir):
            link.unlink(missing_ok=True)
        # A killed shim leaves its socket file in /run/containerd/s, so the dir stayed (seen in
        # CI): dead sockets go; a live one (another node's shim) stays, for leftovers() to report.
        if SHIM_SOCKETS in self.absent:
            _remove_dead_sockets(SHIM_SOCKETS)
        deadline = time.monotonic() + 5.0  # a shim exiting just now removes its own: retried
        for g in self.absent:
            while g.exists():
                try:
                    g.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
        shutil.rmtree(self.run, ignore_errors=True)
        shutil.rmtree(self.dir / "containerd", ignore_errors=True)
        shutil.rmtree(self.dir / "kubelet", ignore_errors=True)
        print(f"realnode {self.name}: down in {time.monotonic() - t:.1f} s", flush=True)

    def _delete_pods(self) -> None:
        api = self.cluster.api
        sel = f"spec.nodeName={self.name}"
        for p in api.get(f"/api/v1/pods?fieldSelector={sel}")["items"]:
            m = p["metadata"]
            with contextlib.suppress(Exception):
                api.request("DELETE", f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}")

        def gone() -> bool:
            return not api.get(f"/api/v1/pods?fieldSelector={sel}")["items"]

        with contextlib.suppress(TimeoutError, RuntimeError):
            _wait(f"pods on {self.name} deleted", gone, POD_TIMEOUT, [])

    def _kill_containers(self) -> None:
        """Whatever the kubelet left (or never got to delete): kill and remove via containerd."""
        tasks = self.ctr("tasks", "ls", "-q", check=False).stdout.split()
        for t in tasks:
            self.ctr("tasks", "kill", "-s", "SIGKILL", t, check=False)
        for t in tasks:
            for _ in range(20):
                if self.ctr("tasks", "delete", t, check=False).returncode == 0:
                    break
                time.sleep(0.25)
        for c in self.ctr("containers", "ls", "-q", check=False).stdout.split():
            self.ctr("containers", "delete", c, check=False)

    def _kill_shims(self) -> None:
        """Shims daemonize out of containerd's process group: find them by our socket dir."""
        mark = str(self.containerd_sock).encode()
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"containerd-shim" in cmd and mark in cmd:
                    os.kill(int(pid), 9)

    def _unmount_all(self) -> None:
        roots = (str(self.dir), str(self.run))
        for _ in range(3):  # nested mounts: unmount deepest first, lazily as a last resort
            mounts = [m for m in _mountpoints() if m.startswith(roots)]
            if not mounts:
                return
            for m in sorted(mounts, key=len, reverse=True):
                if subprocess.run(["umount", m], capture_output=True).returncode != 0:
                    subprocess.run(["umount", "-l", m], capture_output=True)

    def leftovers(self) -> list[str]:
        """Anything of this node still on the machine (empty after a clean teardown)."""
        left = [f"process {p.name} pid {p.popen.pid}" for p in self.procs if p.popen.poll() is None]
        roots = (str(self.dir), str(self.run))
        left += [f"mount {m}" for m in _mountpoints() if m.startswith(roots)]
        left += [f"cgroup {h / self.name}" for h in cgroup_hierarchies() if (h / self.name).exists()]
        if Path(f"/run/netns/{self.net.netns}").exists():
            left.append(f"netns {self.net.netns}")
        if Path(f"/sys/class/net/{self.net.host_if}").exists():
            left.append(f"link {self.net.host_if}")
        if self.run.exists():
            left.append(f"dir {self.run}")
        left += [f"dir {g}" for g in self.absent if g.exists()]
        left += [f"log link {p}" for p in _container_log_links(self.dir)]
        mark = str(self.containerd_sock).encode()
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                if mark in cmd or str(self.dir).encode() in cmd:
                    left.append(f"process {pid} {cmd[:80]!r}")
        return left


def _container_log_links(d: Path) -> list[Path]:
    """The kubelet's symlinks in the fixed /var/log/containers that point into ``d``."""
    base = Path("/var/log/containers")
    if not base.is_dir():
        return []
    return [p for p in base.iterdir() if p.is_symlink() and os.readlink(p).startswith(str(d))]


def _mountpoints() -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mnt = line.split()[4].replace("\\040", " ")
        out.append(mnt)
    return out


def pod_on(node: str, name: str, image: str, command: list[str]) -> dict[str, Any]:
    """A minimal pod pinned to ``node`` (no scheduler involved), never pulling its image."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never", "command": command}],
        },
    }


T = TypeVar("T")


def wait_for(what: str, cond: Callable[[], T | None], timeout: float, every: float = 0.5) -> T:
    """Poll ``cond`` until it returns something truthy (returned); AssertionError at ``timeout``.

    A poll whose API request times out counts as "not yet" (a loaded API server answered one
    GET after its 10 s timeout and failed a whole real-node test); it still ends at ``timeout``,
    naming the last error."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    error: OSError | None = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except OSError as e:  # TimeoutError, URLError, a reset connection
            error = e
        else:
            error = None
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"{what} not reached in {timeout:.0f} s (last: {last!r}, last error: {error!r})")
