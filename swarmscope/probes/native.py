"""The native light probe: load and pin with BCC (the light probe's loader), then become the
compiled reader (probes/reader, Go), so the long-lived process holds no Python, grpcio or
OpenTelemetry.

    swarmscope probe --mode native --controller 127.0.0.1:7070 --programs exec_count
    # what runs: check settings -> loader child pins each program -> os.execv(reader, ...)

The reader speaks the same fleet protocol as probes/agent.py (token challenge, TLS/mTLS,
heartbeats with its own CPU and RSS, windows, WindowDone with the window span as OTLP bytes;
OTLP/gRPC export when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set). It replaces this process with
``execve``, so its pid and start time are this process's: the pin directory's claim
(swarmscope.core.sys.owners, keyed by both) stays valid, the reader removes pins and claim at exit,
and a SIGKILLed reader's pins are swept as any dead light probe's.

The binary: ``$SWARMSCOPE_PROBE_READER``, else ``tools/build_probe_reader.sh`` (cached by a hash
of the reader's source under $SWARMSCOPE_CACHE/tools; a cold build fetches Go modules, ~1 min).
The container image sets it to its /usr/local/bin/swarmscope-probe-reader, so a pod never builds.
Caveats: carries ``exec_count``, ``neigh_events``, ``syscall_count``, ``pkt_count`` and
``bpf_stats`` (``NATIVE``; the reader enables run statistics itself), with their start-up
settings only: neigh_events' family is compiled in by the
loader, pkt_count's interfaces are attached by it (XDP links), syscall_count's
filter ($SWARMSCOPE_SYSCALLS) is written into its pinned map here; a per-window filter would
need the BCC loader again, so the reader fails a window that asks for one, naming the key. The
other programs are refused at start, each with the mode that has it. No ``--metrics-port`` (the
self-metrics server is Python's) and no ``--once`` (use ``--mode light``).
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

from swarmscope.core.errors import ConfigError, Problem, SetupError
from swarmscope.core.paths import TOOLS
from swarmscope.core.sys.gobuild import go_binary

ENV_READER = "SWARMSCOPE_PROBE_READER"
NATIVE = ("exec_count", "neigh_events", "syscall_count", "pkt_count", "bpf_stats")
# Read by the reader itself, without a loader or pins.
_UNPINNED = ("bpf_stats",)
BUILD = TOOLS / "build_probe_reader.sh"


def check_programs(programs: list[str], metrics_port: int | None, once: bool) -> None:
    """ConfigError naming every setting the native reader does not carry."""
    problems = [
        Problem(
            "--programs", n, "not carried by the native reader (exec_count only): use --mode light or full"
        )
        for n in programs
        if n not in NATIVE
    ]
    if metrics_port is not None:
        problems.append(
            Problem("--metrics-port", "metrics_port", "not served by the native reader: use --mode light")
        )
    if once:
        problems.append(Problem("--once", "once", "not in native mode: use --mode light --once"))
    if problems:
        raise ConfigError(problems)


def reader_binary() -> str:
    """The reader's path: ``$SWARMSCOPE_PROBE_READER``, else built (or found cached) by the tool."""
    return go_binary(BUILD, "native probe reader", env_var=ENV_READER)


def exec_reader(args: Any, programs: list[str], controller: str, node: str) -> NoReturn:
    """Load and pin ``programs``, then replace this process with the reader (never returns)."""
    from swarmscope import __version__
    from swarmscope.core.sys import owners
    from swarmscope.core.tls import client_files
    from swarmscope.probes.programs.light import light_factory

    programs = list(dict.fromkeys(programs))
    binary = reader_binary()  # before loading: a missing reader leaves no pins behind
    factory = light_factory(programs)  # the loader's machine checks; sweeps dead probes' pins
    objs: list[Any] = []
    filter_nrs: list[int] | None = None
    ifaces: dict[int, str] = {}
    try:
        for name in programs:
            if name in _UNPINNED:
                objs.append(None)
                continue
            prog: Any = factory(name)  # a light program: its _bpf is the PinnedObject
            prog.load()  # the loader child pins it (syscall_count: and its filter is written)
            objs.append(prog._bpf)  # the PinnedObject (what the self-metrics read as well)
            if name == "syscall_count":
                filter_nrs = prog.filter
            if name == "pkt_count":
                ifaces = dict(prog._ifindex)  # ifindex in the interfaces' netns -> name
    except BaseException:
        _unpin(objs)
        raise
    argv = [binary, "--controller", controller, "--node", node, "--version", __version__]
    for name, obj in zip(programs, objs, strict=True):
        if obj is None:
            argv += ["--pins", f"{name}=-"]
            continue
        argv += ["--pins", f"{name}={obj.path}", "--claim", str(owners.OWNERS_DIR / "pindir" / obj.claim)]
    argv += ["--heartbeat", str(args.heartbeat), "--retries", str(args.retries)]
    argv += ["--failback", str(args.failback)]
    if "syscall_count" in programs:
        from swarmscope.probes.programs.syscall_count import UNISTD

        argv += ["--syscall-names", UNISTD, "--syscall-filter", ",".join(map(str, filter_nrs or ()))]
    for ifindex, dev in sorted(ifaces.items()):
        argv += ["--pkt-iface", f"{ifindex}={dev}"]
    if args.token_file:
        argv += ["--token-file", args.token_file]
    tls = client_files(args)
    tls_args = {"ca": tls.ca, "cert": tls.cert, "key": tls.key, "server-name": tls.server_name}
    for flag, value in tls_args.items():
        if value:
            argv += [f"--tls-{flag}", value]
    # Our fds on the pins are O_CLOEXEC; closed anyway, the reader opens the pins itself.
    for obj in filter(None, objs):
        for fd in [f.fd for f in obj.funcs.values()] + [m.fd for m in obj.maps.values()]:
            os.close(fd)
        obj.funcs.clear()
        obj.maps.clear()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(binary, argv)
    except OSError as e:
        _unpin(objs)
        raise SetupError(f"cannot run the native probe reader {binary}: {e.strerror}") from e


def _unpin(objs: list[Any]) -> None:
    for obj in filter(None, objs):
        obj.cleanup()
