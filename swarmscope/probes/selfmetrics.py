"""The probe's own Prometheus metrics (``swarmscope probe --metrics-port 9647``) and the small
HTTP server (``/metrics``, ``/healthz``) it and ``top-ebpf --prometheus`` share.

    m = ProbeSelfMetrics(lambda: agent.programs)     # agent = ProbeAgent(..., metrics=m)
    server = serve(m.registry, 9647)                 # background thread; server.shutdown()

Metric names (labels in braces):

- ``swarmscope_probe_windows_opened_total`` / ``swarmscope_probe_windows_closed_total``
- ``swarmscope_probe_readings_sent_total`` — Readings queued to the controller
- ``swarmscope_probe_program_run_count_total{program,func}`` — runs of each loaded BPF function
- ``swarmscope_probe_program_run_time_seconds_total{program,func}`` — their run time (BPF stats)
- ``swarmscope_probe_map_entries{program,map}`` / ``swarmscope_probe_map_max_entries{program,map}``
- ``swarmscope_probe_map_fill_ratio{program,map}`` — entries / max_entries
- ``swarmscope_probe_ringbuf_events_total{program,outcome}`` — per-event ring buffer records,
  ``outcome`` = delivered | dropped
- ``swarmscope_probe_ringbuf_map_ratio{program}`` — ring-buffer events / events counted in maps
- ``swarmscope_probe_feature_available{feature}`` — 1 when a reading works, 0 when the probe
  dropped it for a missing capability (``program_stats``: BPF_ENABLE_STATS needs CAP_SYS_ADMIN)

The ring buffer families are always present (HELP/TYPE, no samples) so dashboards can be built
before a program uses one; a program opts in with a ``ringbuf_stats() -> (delivered, dropped,
counted_in_map)`` method. Caveats: run counts grow only while BPF statistics are on (the probe
turns them on with ``--metrics-port``); counting a hash map's entries walks its keys (one
syscall each) on every scrape, capped at ``MAX_WALK``; array maps are always full. The text
format is written here (``TextRegistry``), not with prometheus_client: that library imports
``ssl`` and costs the probe about 8 MiB of RSS with it (docs/probe.md); ``serve`` also takes a
prometheus_client registry (``top-ebpf --prometheus``). The server answers GET with HTTP/1.0 on
``socketserver`` alone: ``http.server`` imports the ``email`` package and idna, 0.8 MiB of the
probe's RSS for header parsing a scraper does not need.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from socketserver import StreamRequestHandler, ThreadingTCPServer
from typing import Any

from swarmscope.core.errors import BpfError, ProbeError
from swarmscope.core.sys import bpf
from swarmscope.probes import bpfstats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Family:
    """One metric family of the text format; a counter's samples are named ``<name>_total``."""

    def __init__(self, name: str, kind: str, doc: str, labels: Iterable[str] = ()) -> None:
        self.name, self.kind, self.doc, self.labels = name, kind, doc, tuple(labels)
        self.samples: list[tuple[tuple[str, ...], float]] = []

    def add_metric(self, values: Iterable[str], value: float) -> None:
        self.samples.append((tuple(values), float(value)))

    def render(self) -> str:
        sample = self.name + ("_total" if self.kind == "counter" else "")
        lines = [f"# HELP {sample} {self.doc}", f"# TYPE {sample} {self.kind}"]
        for values, v in self.samples:
            pairs = sorted(zip(self.labels, values, strict=True))  # as prometheus_client writes them
            labels = ",".join(f'{k}="{_escape(x)}"' for k, x in pairs)
            lines.append(f"{sample}{{{labels}}} {v!r}" if labels else f"{sample} {v!r}")
        return "\n".join(lines) + "\n"


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class TextRegistry:
    """Collectors (each ``collect() -> Iterable[Family]``) rendered in the Prometheus text format."""

    def __init__(self) -> None:
        self.collectors: list[Callable[[], Iterable[Family]]] = []

    def render(self) -> bytes:
        return "".join(f.render() for c in self.collectors for f in c()).encode()


MAX_CONNECTIONS = 8  # scrapers at once; a Prometheus scrapes one at a time
CONNECTION_TIMEOUT_S = 5.0  # a client that sends nothing (or reads nothing) is dropped then


MAX_REQUEST = 8192  # bytes of request line and headers read; the rest is ignored


class BoundedHTTPServer(ThreadingTCPServer):
    """A threading server with a cap on live connections and a per-connection timeout: a thread
    per connection without a cap let any peer that reaches the port (a hostNetwork probe's is
    on the node's address) grow the probe by a thread stack per idle connection. Over the cap a
    connection is closed at once; it costs no thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        request.settimeout(CONNECTION_TIMEOUT_S)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self._slots.release()  # before the close: a client that saw it closed finds a slot
            self.shutdown_request(request)


def _read_request(rfile: Any) -> tuple[str, str]:
    """(method, path) of one request; its headers are read (bounded) and dropped."""
    line = rfile.readline(MAX_REQUEST)
    total, header = len(line), line
    while header not in (b"\r\n", b"\n", b"") and total < MAX_REQUEST:
        header = rfile.readline(MAX_REQUEST - total)
        total += len(header)
    words = line.decode("latin-1").split()
    return (words[0], words[1].split("?", 1)[0]) if len(words) >= 2 else ("", "")


def serve(registry: Any, port: int, host: str = "127.0.0.1", fd: int | None = None) -> BoundedHTTPServer:
    """Serve ``/metrics`` (a TextRegistry, or a prometheus_client registry) and ``/healthz`` on a
    daemon thread; port 0 picks one. With ``fd``, on that inherited listening socket instead (the
    flow agent's, made outside its network namespace)."""
    if isinstance(registry, TextRegistry):
        render, ctype_metrics = registry.render, CONTENT_TYPE
    else:
        from prometheus_client import generate_latest
        from prometheus_client.exposition import CONTENT_TYPE_LATEST

        render, ctype_metrics = (lambda: generate_latest(registry)), CONTENT_TYPE_LATEST

    class Handler(StreamRequestHandler):
        def handle(self) -> None:
            try:  # a client that sends nothing in time, or goes away, is dropped quietly
                method, path = _read_request(self.rfile)
                if method != "GET":
                    body, ctype, status = b"not implemented\n", "text/plain", "501 Not Implemented"
                elif path == "/metrics":
                    body, ctype, status = render(), ctype_metrics, "200 OK"
                elif path == "/healthz":
                    body, ctype, status = b"ok\n", "text/plain", "200 OK"
                else:
                    body, ctype, status = b"not found\n", "text/plain", "404 Not Found"
                head = f"HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
                self.wfile.write(head.encode() + body)
            except OSError:
                pass

    if fd is None:
        server = BoundedHTTPServer((host, port), Handler)
    else:
        server = BoundedHTTPServer((host, port), Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = socket.socket(fileno=fd)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


def bcc_of(program: Any) -> Any:
    """The loaded object behind one of our programs (they keep it in ``_bpf``), or None."""
    return getattr(program, "_bpf", None)


class ProbeSelfMetrics:
    def __init__(self, programs: Callable[[], Mapping[str, Any]] = dict) -> None:
        self.registry = TextRegistry()
        self._programs = programs
        self.windows_opened = self.windows_closed = self.readings_sent = 0
        # feature -> 1 if the reading works here, 0 if dropped for a missing capability
        self.features: dict[str, int] = {}
        self.registry.collectors += [self._own, _ProgramCollector(self).collect]

    def _own(self) -> Iterator[Family]:
        for name, doc, v in (
            ("swarmscope_probe_windows_opened", "windows opened on this probe", self.windows_opened),
            ("swarmscope_probe_windows_closed", "windows closed on this probe", self.windows_closed),
            ("swarmscope_probe_readings_sent", "readings queued to the controller", self.readings_sent),
        ):
            f = Family(name, "counter", doc)
            f.add_metric((), v)
            yield f
        f = Family(
            "swarmscope_probe_feature_available",
            "gauge",
            "1 if the reading works here, 0 if dropped for a missing capability",
            ["feature"],
        )
        for feature, v in sorted(self.features.items()):
            f.add_metric([feature], v)
        yield f

    # The agent calls these (see ProbeAgent(metrics=...)).
    def window_opened(self) -> None:
        self.windows_opened += 1

    def window_closed(self, readings: int) -> None:
        self.windows_closed += 1
        self.readings_sent += readings

    def set_programs(self, programs: Callable[[], Mapping[str, Any]]) -> None:
        self._programs = programs

    def programs(self) -> Mapping[str, Any]:
        return self._programs()


def held_map_fds(b: Any) -> dict[int, int]:
    """{map id: fd} of the maps a loaded program holds (its pins, opened: probes.pinned)."""
    return {int(bpf.map_info(m.fd).id): m.fd for m in dict(getattr(b, "maps", {}) or {}).values()}


def _fill_by_id(map_id: int) -> bpfstats.MapFill | None:
    """A map the module does not hold: by id, which needs CAP_SYS_ADMIN (skipped without)."""
    try:
        return bpfstats.map_fill(map_id)
    except BpfError as e:
        if e.errno == errno.EPERM:
            return None
        raise


class _ProgramCollector:
    def __init__(self, owner: ProbeSelfMetrics) -> None:
        self.owner = owner

    def collect(self) -> Iterator[Family]:
        pl = ["program", "func"]
        runs = Family(
            "swarmscope_probe_program_run_count", "counter", "runs of the probe's BPF functions", pl
        )
        secs = Family(
            "swarmscope_probe_program_run_time_seconds",
            "counter",
            "run time of the probe's BPF functions",
            pl,
        )
        ml = ["program", "map"]
        entries = Family("swarmscope_probe_map_entries", "gauge", "entries in the map", ml)
        maxe = Family("swarmscope_probe_map_max_entries", "gauge", "capacity of the map", ml)
        fill = Family("swarmscope_probe_map_fill_ratio", "gauge", "entries / max_entries", ml)
        rb = Family(
            "swarmscope_probe_ringbuf_events",
            "counter",
            "per-event ring buffer records by outcome",
            ["program", "outcome"],
        )
        ratio = Family(
            "swarmscope_probe_ringbuf_map_ratio",
            "gauge",
            "ring-buffer events / events counted in maps",
            ["program"],
        )
        for pname, prog in self.owner.programs().items():
            b = bcc_of(prog)
            map_ids: set[int] = set()
            held = held_map_fds(b)  # its own maps' fds: no CAP_SYS_ADMIN needed to read them
            for fname, fn in dict(getattr(b, "funcs", {}) or {}).items():
                try:
                    info = bpf.prog_info(fn.fd)
                except ProbeError:
                    continue
                label = [pname, fname.decode() if isinstance(fname, bytes) else str(fname)]
                runs.add_metric(label, info.run_cnt)
                secs.add_metric(label, info.run_time_ns / 1e9)
                map_ids.update(bpfstats.prog_map_ids(fn.fd))
            for mid in sorted(map_ids):
                m = bpfstats.map_fill_fd(held[mid]) if mid in held else _fill_by_id(mid)
                if m is None:
                    continue
                label = [pname, m.name]
                entries.add_metric(label, m.entries)
                maxe.add_metric(label, m.max_entries)
                fill.add_metric(label, m.entries / m.max_entries if m.max_entries else 0.0)
            stats = getattr(prog, "ringbuf_stats", None)
            if callable(stats):
                delivered, dropped, in_map = stats()
                rb.add_metric([pname, "delivered"], delivered)
                rb.add_metric([pname, "dropped"], dropped)
                ratio.add_metric([pname], (delivered + dropped) / in_map if in_map else 0.0)
        yield from (runs, secs, entries, maxe, fill, rb, ratio)
