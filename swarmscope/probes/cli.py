"""``swarmscope probe``: run the node agent, or count for a few seconds and print (``--once``).

    swarmscope probe --controller 10.0.0.5:7070 --token-file /etc/swarmscope/token --node n1
    swarmscope probe --once --seconds 5            # table of per-cgroup deltas
    swarmscope probe --once --seconds 1 --json     # the same as JSON

BCC compiles and loads each program in a short-lived loader process (``probes.loader``) that
pins it and exits; this process reads the pins (``probes.pinned``) and never imports BCC. Window
spans go over OTLP when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set. ``--help`` lists
every program with its params (declared next to its code; start-up values from their env vars,
per-window ones from the controller's OpenWindow.options). Settings: ``--controller`` else
$SWARMSCOPE_CONTROLLER; ``--token-file`` else $SWARMSCOPE_TOKEN (never the token itself on the
command line: /proc shows arguments to every user); ``--node`` else $NODE_NAME else the
hostname. Caveats: needs root and BCC (for the loader); a missing piece comes out as one
SetupError line. ``--once`` resolves cgroup ids to paths by walking the cgroup v2 mount, so a
cgroup removed during the interval shows its id only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import time
from typing import Any

from swarmscope.core.errors import ConfigError, Problem, SetupError

ENV_CONTROLLER = "SWARMSCOPE_CONTROLLER"

# TLS to the controller (each flag else $SWARMSCOPE_TLS_<FLAG>); see docs/security.md.
TLS_FLAGS = {
    "ca": "TLS: the CA that signed the controller's certificate (PEM); turns TLS on [$SWARMSCOPE_TLS_CA]",
    "cert": "mTLS: this probe's client certificate (PEM) [$SWARMSCOPE_TLS_CERT]",
    "key": "mTLS: the key of --tls-cert (PEM) [$SWARMSCOPE_TLS_KEY]",
    "server-name": "TLS: the name to check in the controller's certificate, if not the dialled host "
    "[$SWARMSCOPE_TLS_SERVER_NAME]",
}


# The epilog lists every program's params, which means importing every program module: done
# only when help is printed, not in every long-lived probe (a few MiB of RSS on each node).
_PARAMS_EPILOG = "<programs and their params>"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    def add_text(self, text: str | None) -> None:
        if text == _PARAMS_EPILOG:
            from swarmscope.probes.programs.params import describe_program_params

            text = "programs and their params (KEY (type, default, $ENV at start-up, scope): help):\n"
            text += describe_program_params()
        super().add_text(text)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "probe",
        help="run the node probe agent (or --once: count for S seconds and print)",
        description="The swarmscope node agent: loads programs from bpf/ and serves an "
        "authenticated controller. With --once it runs standalone and prints per-cgroup deltas.",
        epilog=_PARAMS_EPILOG,
        formatter_class=_HelpFormatter,
    )
    p.add_argument("--controller", metavar="HOST:PORT", help=f"controller address (else ${ENV_CONTROLLER})")
    p.add_argument(
        "--token-file", metavar="FILE", help="file holding the shared token (else $SWARMSCOPE_TOKEN)"
    )
    p.add_argument(
        "--node-key-file",
        metavar="FILE",
        help="file holding this node's key instead of the token (else $SWARMSCOPE_NODE_KEY): the "
        "probe can then speak for its own node only (`swarmscope node-key` makes one)",
    )
    p.add_argument("--node", metavar="NAME", help="node name (else $NODE_NAME, else the hostname)")
    for flag, what in TLS_FLAGS.items():
        p.add_argument(f"--tls-{flag}", metavar="FILE" if flag != "server-name" else "NAME", help=what)
    from swarmscope.probes.programs.base import PROGRAMS

    p.add_argument(
        "--programs",
        default="exec_count",
        help=f"comma-separated programs (default: exec_count). Known: {', '.join(PROGRAMS)} (below)",
    )
    p.add_argument(
        "--heartbeat", type=float, default=1.0, help="heartbeat seconds if the controller sets none"
    )
    p.add_argument("--retries", type=int, default=5, help="reconnect attempts before giving up (default 5)")
    p.add_argument(
        "--failback",
        type=float,
        default=30.0,
        metavar="S",
        help="served by a later upstream of --controller (a,b,...), check the first one every S "
        "seconds (jittered) and move back to it between windows when it answers; 0 = never (default 30)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve the probe's own metrics (swarmscope_probe_*) on PORT: /metrics, /healthz (chart: 9647)",
    )
    p.add_argument(
        "--metrics-bind",
        default="127.0.0.1",
        metavar="ADDR",
        help="address of --metrics-port (default 127.0.0.1; the chart's DaemonSet: 0.0.0.0)",
    )
    p.add_argument(
        "--pod-logs-dir",
        metavar="DIR",
        help="the kubelet's pod log dir, read for its names only: cgroups named as namespace/pod/"
        "container (default /var/log/pods; none there: no pod names) [$SWARMSCOPE_POD_LOGS_DIR]",
    )
    p.add_argument(
        "--container-logs-dir",
        metavar="DIR",
        help="the kubelet's container log links (default /var/log/containers) "
        "[$SWARMSCOPE_CONTAINER_LOGS_DIR]",
    )
    p.add_argument("--once", action="store_true", help="standalone: count for --seconds, print, exit")
    p.add_argument("--seconds", type=float, default=5.0, help="with --once: how long to count (default 5)")
    p.add_argument("--json", action="store_true", help="with --once: print JSON instead of a table")
    p.set_defaults(func=run)
    k = subparsers.add_parser(
        "node-key",
        help="write the key a probe of one node proves (from the fleet token): give that probe "
        "--node-key-file instead of the token, and it can speak for its own node only",
    )
    k.add_argument("--node", required=True, metavar="NAME", help="the node (the probe's --node)")
    k.add_argument("--token-file", metavar="FILE", help="the fleet token (else $SWARMSCOPE_TOKEN)")
    k.add_argument("--out", required=True, metavar="FILE", help="where to write it (made 0600)")
    k.set_defaults(func=_node_key)


def _node_key(args: argparse.Namespace) -> int:
    from swarmscope.core import auth

    key = auth.node_key(auth.load_token(args.token_file), args.node)
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key + "\n")
    except OSError as e:
        raise SetupError(f"cannot write the node key {args.out}: {e.strerror}") from e
    return 0


def _programs(spec: str) -> list[str]:
    from swarmscope.probes.programs.base import PROGRAMS

    names = [n.strip() for n in spec.split(",") if n.strip()]
    problems = [
        Problem("--programs", n, f"unknown program (known: {', '.join(sorted(PROGRAMS))})")
        for n in names
        if n not in PROGRAMS
    ]
    if not names:
        problems.append(Problem("--programs", "programs", "empty"))
    if problems:
        raise ConfigError(problems)
    return names


def without_openssl() -> None:
    """Keep Python's OpenSSL bindings out of this process: 4.7 MiB of its RSS (docs/probe.md).

    Called before grpc is first imported (its asyncio import pulls in ``ssl``). Nothing here
    needs them: gRPC's TLS is BoringSSL inside grpcio, and HMAC-SHA256 (core.auth) runs on
    Python's builtin ``_sha256`` when ``_hashlib`` is absent. A module already imported stays.
    Caveat: the probe's OTLP/HTTP export then speaks plain HTTP only (no https:// endpoint)."""
    import sys

    for name in ("ssl", "_ssl", "_hashlib"):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "import fails"


def run(args: argparse.Namespace) -> int:
    without_openssl()
    programs = _programs(args.programs)
    if args.once:
        if args.seconds <= 0:
            raise ConfigError([Problem("--seconds", "seconds", "must be > 0")])
        result = once(programs, args.seconds, _factory())
        print(json.dumps(result, indent=2) if args.json else format_table(result))
        return 0
    return _agent(args, programs)


def _agent(args: argparse.Namespace, programs: list[str]) -> int:
    from swarmscope.core import auth

    controller = args.controller or os.environ.get(ENV_CONTROLLER, "")
    if not controller.replace(",", "").strip():  # "" or only commas: no address at all
        raise ConfigError([Problem("--controller", "controller", f"required (or set ${ENV_CONTROLLER})")])
    from swarmscope.core.tls import client_files

    node = args.node or os.environ.get("NODE_NAME") or socket.gethostname()
    key = auth.read_secret(args.node_key_file, auth.NODE_KEY_ENV, "node key")
    if args.node_key_file and not key:
        raise SetupError(f"the node key file {args.node_key_file} is empty")
    token = "" if key else auth.load_token(args.token_file)
    tls = client_files(args)
    from swarmscope.probes.agent import ProbeAgent

    factory = _factory()
    metrics, server, stats_fd = None, None, None
    if args.metrics_port is not None:
        from swarmscope.probes.selfmetrics import ProbeSelfMetrics, serve

        metrics = ProbeSelfMetrics()
        # Run statistics on for the probe's lifetime, so its programs' own cost is visible
        # (without CAP_SYS_ADMIN the kernel refuses: the probe drops them and says so).
        stats_fd = enable_stats_or_degrade(metrics)
        server = serve(metrics.registry, args.metrics_port, args.metrics_bind)
    agent = ProbeAgent(
        controller,
        token,
        node,
        programs,
        args.heartbeat,
        retries=args.retries,
        failback_s=args.failback,
        metrics=metrics,
        tls=tls,
        program_factory=factory,
        pods=pod_index(args),
        node_key=key,
    )
    # A daemon says what it does (registered: the agent; which pod a node is: its windows) without -v.
    for name in ("swarmscope.probes.agent", "swarmscope.probes.windows"):
        said = logging.getLogger(name)
        said.setLevel(min(said.getEffectiveLevel(), logging.INFO))
    if metrics is not None:
        metrics.set_programs(lambda: agent.programs)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: agent.stop())
    try:
        agent.run_forever()
    finally:
        agent.spans.shutdown()  # flushes the last window spans to an OTLP endpoint, if set
        if server is not None:
            server.shutdown()
            server.server_close()
        if stats_fd is not None:
            os.close(stats_fd)
    return 0


def pod_index(args: argparse.Namespace) -> Any:
    """The pod names of this node's cgroups (probes.pods), or None where there is no kubelet."""
    from swarmscope.probes.pods import PodIndex

    idx = PodIndex.from_env(getattr(args, "pod_logs_dir", None), getattr(args, "container_logs_dir", None))
    if not idx.available():  # not a Kubernetes node (the usual case on one machine): say nothing
        return None
    idx.scan()
    return idx


def _factory() -> Any:
    """The program factory, after checking the machine for the loader (root, BCC, kernel
    headers, tracefs: without importing BCC here) and sweeping the pins of probes that died."""
    import sys

    from swarmscope.probes import bcc_env, pinned
    from swarmscope.probes.programs.base import get_program

    bcc_env.check(import_bcc=False)
    swept = pinned.sweep_stale()
    if swept:
        print(f"probe: removed the pins of probes that died: {', '.join(swept)}", file=sys.stderr)
    return get_program


def enable_stats_or_degrade(metrics: Any) -> int | None:
    """Run statistics on for the probe's lifetime, so its programs' own cost is visible.

    BPF_ENABLE_STATS needs CAP_SYS_ADMIN, which the chart grants only with
    probes.features.programStats: without it the probe drops that reading (run time stays 0),
    says so on stderr and in ``swarmscope_probe_feature_available{feature="program_stats"}``,
    and keeps counting."""
    import errno
    import sys

    from swarmscope.core.errors import BpfError
    from swarmscope.core.sys import bpf

    try:
        fd = bpf.enable_stats()
    except BpfError as e:
        if e.errno != errno.EPERM:
            raise
        print(
            f"probe: program run-time statistics dropped: {e} (CAP_SYS_ADMIN is needed; "
            "the chart grants it with probes.features.programStats=true)",
            file=sys.stderr,
            flush=True,
        )
        metrics.features["program_stats"] = 0
        return None
    metrics.features["program_stats"] = 1
    return fd


class _HostNode:
    name = "host"
    cgroup_id = 0


def once(programs: list[str], seconds: float, factory: Any = None) -> dict[str, Any]:
    """Load ``programs`` (through ``factory``, else the probe's), count for ``seconds``,
    return per-cgroup deltas (JSON-ready)."""
    from swarmscope.core.errors import SetupError
    from swarmscope.core.sys.cgroups import cgroup_paths
    from swarmscope.probes.programs.base import Program, delta_by_cgroup

    factory = factory or _factory()
    loaded: list[Program] = []
    try:
        for name in programs:
            prog = factory(name)
            prog.load()
            loaded.append(prog)
        before = [p.snapshot() for p in loaded]
        start = time.time_ns()
        time.sleep(seconds)
        after = [p.snapshot() for p in loaded]
        end = time.time_ns()
        gauges: dict[str, float] = {}
        host = _HostNode()
        for p in loaded:
            wg = getattr(p, "window_gauges", None)  # procstat: whole selection = the host node
            if wg is not None:
                gauges.update(wg(start, end, [host])[host.name])
    finally:
        for p in loaded:
            p.close()
    per_cg: dict[int, dict[str, int]] = {}
    total: dict[str, int] = {c: 0 for p in loaded for c in p.counters}
    for b, a in zip(before, after, strict=True):
        for cg, counters in delta_by_cgroup(b, a).items():
            per_cg.setdefault(cg, {}).update(counters)
            for c, v in counters.items():
                total[c] = total.get(c, 0) + v
    try:
        paths = cgroup_paths(wanted=set(per_cg))
    except SetupError:
        paths = {}
    rows = sorted(per_cg.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    return {
        "seconds": seconds,
        "programs": programs,
        "start_unix_ns": start,
        "end_unix_ns": end,
        "counters": sorted(total),
        "total": total,
        "gauges": gauges,
        "cgroups": [{"cgroup_id": cg, "path": paths.get(cg), "counters": cs} for cg, cs in rows],
    }


# Beyond this many counters (syscall_count unfiltered, bpf_stats) one column per counter is
# unreadable: print one line per (cgroup, non-zero counter) instead.
WIDE_MAX = 8


def format_table(result: dict[str, Any]) -> str:
    text = _format_counters(result)
    gauges: dict[str, float] = result.get("gauges") or {}
    if gauges:
        text += "\ngauges: " + "  ".join(f"{k}={v:.1f}" for k, v in sorted(gauges.items()))
    return text


def _format_counters(result: dict[str, Any]) -> str:
    names: list[str] = result["counters"]
    if len(names) > WIDE_MAX:
        return _format_long(result)
    header = ["CGROUP_ID", *[n.upper() for n in names], "PATH"]
    rows = [
        [str(r["cgroup_id"]), *[str(r["counters"].get(n, 0)) for n in names], r["path"] or "?"]
        for r in result["cgroups"]
    ]
    rows.append(["total", *[str(result["total"].get(n, 0)) for n in names], ""])
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(
            x.rjust(w) if i < len(widths) - 1 else x for i, (x, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [header, *rows]
    ]
    return f"{result['seconds']:g} s, programs: {', '.join(result['programs'])}\n" + "\n".join(
        ln.rstrip() for ln in lines
    )


def _format_long(result: dict[str, Any]) -> str:
    rows = [
        [str(r["cgroup_id"]), c, str(v), r["path"] or "?"]
        for r in result["cgroups"]
        for c, v in sorted(r["counters"].items())
        if v
    ]
    rows += [["total", c, str(v), ""] for c, v in sorted(result["total"].items()) if v]
    header = ["CGROUP_ID", "COUNTER", "VALUE", "PATH"]
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    lines = [
        f"{a.rjust(widths[0])}  {b.ljust(widths[1])}  {c.rjust(widths[2])}  {d}".rstrip()
        for a, b, c, d in [header, *rows]
    ]
    return f"{result['seconds']:g} s, programs: {', '.join(result['programs'])}\n" + "\n".join(lines)
