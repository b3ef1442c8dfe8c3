"""Ready-made command tracers: Debian's bpftrace, Inspektor Gadget's ``ig`` v0.35, and IG in a cluster.

    tracer = make_tracer({"tracer": "bpftrace"})   # exec tracer filtered to the window's cgroups
    tracer = make_tracer({"tracer": "ig"})         # ig built by the kind's prepare (targets/ebpf_tools)
    tracer = make_tracer({"tracer": "ig-cluster"}) # kubectl-gadget: IG's DaemonSet, every node's execs

Both are the ``command`` adapter with a command line and a way to attribute lines; any
``tracer_command`` / ``tracer_match`` / ``tracer_json_field`` in the scenario overrides the
preset's. The bpftrace preset's program is written at each window's ``start()`` with an
in-kernel filter: the window's node cgroups (or comms, for a node without a cgroup id) and
this window's sentinels. Its "Lost N events" is then about those execs only, so
``reported + lost - sentinels_lost == kernel`` holds exactly even on a busy host; without the
filter every other process's exec could fill its buffers and be counted as lost. ig traces
the whole host (v0.35 has no cgroup filter for exec).

``ig-cluster`` is Inspektor Gadget deployed in the cluster (its DaemonSet, docs/cluster.md): one
``kubectl-gadget trace exec -o json`` streams every node's execs through the API server's
port-forward to each gadget pod. Each event names its node and pod (``k8s.node``,
``k8s.podName``, the pod's labels): an event of a worker pod (the chart's label
``app.kubernetes.io/component: workers``) counts for the node it names. It traces
the pods of the controller's own namespace (``POD_NAMESPACE``, the chart's: workers and the
controller, whose sentinel execs mark readiness, and the probes, whose sentinels drain each node), or
every namespace.

Caveats: ig v0.35's exec event carries no cgroup id, so it is attributed by ``comm`` — the
node's exec storm must exec its binary under the node's own name (``NodeKey.comm``). ig needs
its own pid namespace here (``unshare --pid --fork --mount-proc``: reading /proc/1/ns/mnt is
denied otherwise, docs/platform.md#tracers-and-lost-events). ig-cluster's drain is run by each
node's probe, in the probe's pod: a node whose probe is missing is not drained, and says so
(docs/ig-cluster.md).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from swarmscope.controller.tracers.base import (
    DEFAULT_DRAIN_TIMEOUT_S,
    DEFAULT_LOST_REGEX,
    NodeKey,
    TracerConfig,
    register_tracer,
)
from swarmscope.controller.tracers.command import CommandTracer, build_command
from swarmscope.core.errors import SetupError
from swarmscope.targets.ebpf_tools import ig_binary

BPFTRACE_PROGRAM = 'tracepoint:sched:sched_process_exec { printf("%s %llu\\n", comm, cgroup); }'
# comm may contain spaces; the cgroup id is the last field.
BPFTRACE_MATCH = r"^(?P<comm>.*) (?P<cgroup>\d+)$"
IG_JSON_FIELD = "comm"
# ig-cluster: the event's node, for events of the chart's worker pods (their pod labels; JSON keys
# in Go's order: k8s{node, namespace, podName, podLabels{sorted}}). Every exec of a worker's
# container is one the kernel counted for its node: the storm's and each burst's own launcher.
IG_CLUSTER_MATCH = (
    r'"k8s":\{"node":"(?P<node>[^"]*)"[^{}]*"podLabels":\{[^{}]*"app\.kubernetes\.io/component":"workers"'
)
# Its losses: a gadget's perf ring ("lost N samples", a warn event) and the gadget service's
# per-client event buffer, whose gaps the client prints as "expected seq A, got B, N messages
# dropped". Both are counted, each for the node it names (`node`): the warn event's
# {"k8s":{"node":"X"},...}, the client's log line msg="X<padding> | expected seq ..." (the `(?(json)`
# conditional ends the name at the quote or at the bar). A record in another form is still counted,
# for no node. The lookahead at ^ rejects an event line in one pass: the regex runs on every line.
_IG_LOST = r"(?:\blost |, )(?P<n>\d+) (?:events?|samples?|messages dropped)\b"
IG_CLUSTER_LOST_REGEX = (
    r"(?i)^(?=.*?" + _IG_LOST.replace("(?P<n>", "(?:") + r")"
    r'(?:.*?(?:(?P<json>"node":")|msg=")(?P<node>[^"|]*?)(?(json)"|\s*\|))?.*?' + _IG_LOST
)
# The node an event came from, for the drain's sentinels: each node's probe execs them in its own
# pod (traced, never a worker's), and they are awaited per node (CommandTracer.node_drain).
IG_CLUSTER_SENTINEL_NODE = r'"k8s":\{"node":"(?P<node>[^"]*)"'
# Its default bound on that wait: a node's stream can be many seconds behind the others (one
# client, every node's stream through the API server; 5-7 s seen on this machine).
IG_CLUSTER_DRAIN_TIMEOUT_S = 30.0
# Where a pod finds the client: the chart mounts IG's image there (an image volume).
IG_CLIENT_DIRS = (Path("/opt/inspektor-gadget/bin"),)
# The client's in-cluster config (or a kubeconfig) is all it takes from the controller's environment.
KUBE_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG")


def bpftrace_binary() -> str:
    path = shutil.which("bpftrace")
    if not path:
        raise SetupError("bpftrace is not installed: run tools/setup.sh (Debian package bpftrace)")
    return path


def bpftrace_argv() -> list[str]:
    # -B line: bpftrace must flush each event, or the readiness sentinel waits in its buffer.
    return [bpftrace_binary(), "-B", "line", "-e", BPFTRACE_PROGRAM]


def bpftrace_filter(nodes: list[NodeKey], sentinel_prefix: str) -> str:
    """The predicate: an exec in one of the nodes' cgroups (by comm when a node has no
    cgroup id; the kernel keeps 15 characters of it) or one of this window's sentinels."""
    terms = []
    for n in nodes:
        if n.cgroup_id is not None:
            terms.append(f"cgroup == {int(n.cgroup_id)}")
        elif n.comm:
            terms.append(f'comm == "{_bpftrace_str(n.comm[:15])}"')
    p = _bpftrace_str(sentinel_prefix)
    terms.append(f'strncmp(comm, "{p}", {len(sentinel_prefix)}) == 0')
    return " || ".join(terms)


def _bpftrace_str(s: str) -> str:
    if not s.isprintable() or '"' in s or "\\" in s:
        raise SetupError(f"cannot put {s!r} in a bpftrace string literal")
    return s


def bpftrace_window_argv(nodes: list[NodeKey], sentinel_prefix: str) -> list[str]:
    """bpftrace for one window, its program filtered in the kernel (see the module docstring)."""
    prog = (
        f"tracepoint:sched:sched_process_exec /{bpftrace_filter(nodes, sentinel_prefix)}/ "
        '{ printf("%s %llu\\n", comm, cgroup); }'
    )
    return [bpftrace_binary(), "-B", "line", "-e", prog]


def ig_argv(ig: Path | None = None) -> list[str]:
    ig = ig or ig_binary()
    return ["unshare", "--pid", "--fork", "--mount-proc", str(ig), "trace", "exec", "--host", "-o", "json"]


@register_tracer("bpftrace")
def bpftrace_tracer(cfg: TracerConfig, sentinel: str | None) -> CommandTracer:
    if cfg.tracer_command:  # the scenario's own command wins, run as given
        return build_command(cfg, sentinel, name="bpftrace", match=BPFTRACE_MATCH)
    return build_command(
        cfg,
        sentinel,
        name="bpftrace",
        argv=bpftrace_argv(),
        match=BPFTRACE_MATCH,
        argv_for=bpftrace_window_argv,
    )


@register_tracer("ig")
def ig_tracer(cfg: TracerConfig, sentinel: str | None) -> CommandTracer:
    argv = None if cfg.tracer_command else ig_argv()
    return build_command(cfg, sentinel, name="ig", argv=argv, json_field=IG_JSON_FIELD)


def kubectl_gadget_binary() -> str:
    """kubectl-gadget: on PATH, in the chart's image volume, or tools/build_igcluster.sh's build."""
    from swarmscope.targets.ebpf_tools import IG_VERSION

    cache = Path(os.environ.get("SWARMSCOPE_CACHE", "/var/cache/swarmscope"))
    built = cache / "tools" / f"igcluster-{IG_VERSION}" / "bin"
    found = shutil.which("kubectl-gadget", path=os.pathsep.join(map(str, (*IG_CLIENT_DIRS, built))))
    found = shutil.which("kubectl-gadget") or found
    if not found:
        raise SetupError(
            "kubectl-gadget is not here: in the chart, mount IG's image (docs/cluster.md); "
            "on this machine run tools/build_igcluster.sh"
        )
    return found


def ig_cluster_argv(client: str | None = None) -> list[str]:
    ns = os.environ.get("POD_NAMESPACE")  # the chart's controller; outside a pod, every namespace
    scope = ["-n", ns] if ns else ["-A"]
    return [client or kubectl_gadget_binary(), "trace", "exec", "-o", "json", *scope]


@register_tracer("ig-cluster")
def ig_cluster_tracer(cfg: TracerConfig, sentinel: str | None) -> CommandTracer:
    argv = None if cfg.tracer_command else ig_cluster_argv()
    env = {k: os.environ[k] for k in KUBE_ENV if k in os.environ}
    how = {"match": IG_CLUSTER_MATCH, "env": env, "sentinel_node": IG_CLUSTER_SENTINEL_NODE}
    if cfg.tracer_lost_regex == DEFAULT_LOST_REGEX:  # the scenario's own regex wins
        cfg = cfg.replace(tracer_lost_regex=IG_CLUSTER_LOST_REGEX)
    if cfg.tracer_drain_timeout_s == DEFAULT_DRAIN_TIMEOUT_S:  # and its own bound
        cfg = cfg.replace(tracer_drain_timeout_s=IG_CLUSTER_DRAIN_TIMEOUT_S)
    return build_command(cfg, sentinel, name="ig-cluster", argv=argv, **how)
