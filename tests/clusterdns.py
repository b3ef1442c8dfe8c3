"""The real node's cluster DNS: Service names answered from the test API server (a CoreDNS stand-in).

    with ClusterDNS.serve(cluster.api, "10.231.7.1") as dns:   # UDP port 53 on the node IP
        ...  # a pod resolves r1-swarmscope-controller.t1.svc -> the Service's ClusterIP
    dns.queries   # every (name, type, rcode) answered, for a test to assert on

The chart addresses the controller and Jaeger by Service name (`<svc>.<ns>.svc`), so pods on the
real node need cluster DNS. This answers A queries for `<svc>.<ns>.svc.<domain>` with the
Service's ClusterIP (kube-proxy in the node's netns routes it, see tests/realnode.py), or for a
headless Service with its ready endpoints' pod IPs. Any other name gets NXDOMAIN: nothing is
forwarded off this machine. AAAA and other types of a known name get an empty NOERROR answer, so
resolvers fall back to the A record at once.

Caveats: UDP only (answers are far below 512 bytes, so no truncation, no TCP fallback); no
caching (each query asks the API server, which is local); one thread.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

DOMAIN = "cluster.local"
TTL = 5
A, NOERROR, NXDOMAIN, FORMERR = 1, 0, 3, 1


class _Api(Protocol):
    def get(self, path: str) -> Any: ...


def parse_question(msg: bytes) -> tuple[int, str, int, int]:
    """(id, lowercase name, qtype, offset past the question) of a one-question query."""
    qid, _flags, qd = struct.unpack("!HHH", msg[:6])
    if qd != 1:
        raise ValueError(f"{qd} questions")
    labels, i = [], 12
    while msg[i]:
        n = msg[i]
        if n & 0xC0:
            raise ValueError("compressed name in a question")
        labels.append(msg[i + 1 : i + 1 + n].decode("ascii").lower())
        i += 1 + n
    qtype, _qclass = struct.unpack("!HH", msg[i + 1 : i + 5])
    return qid, ".".join(labels), qtype, i + 5


def answer(msg: bytes, end: int, rcode: int, ips: list[str]) -> bytes:
    """The response to ``msg`` (question echoed up to ``end``) with one A record per ip."""
    qid, flags = struct.unpack("!HH", msg[:4])
    head = struct.pack("!HHHHHH", qid, 0x8180 | (flags & 0x0100) | rcode, 1, len(ips), 0, 0)
    rrs = b"".join(
        struct.pack("!HHHIH", 0xC00C, A, 1, TTL, 4) + socket.inet_aton(ip) for ip in ips
    )  # 0xC00C: a pointer to the question's name
    return head + msg[12:end] + rrs


@dataclass
class ClusterDNS:
    api: _Api
    host: str
    queries: list[tuple[str, int, int]] = field(default_factory=list)

    def resolve(self, name: str) -> list[str] | None:
        """The A records of a Service name; None if it names no Service."""
        suffix = f".svc.{DOMAIN}"
        if not name.endswith(suffix):
            return None
        parts = name[: -len(suffix)].split(".")
        if len(parts) != 2:
            return None
        svc, ns = parts
        try:
            s = self.api.get(f"/api/v1/namespaces/{ns}/services/{svc}")
        except Exception:  # the API's 404 (or any failure): no such Service
            return None
        ip = s["spec"].get("clusterIP")
        if ip and ip != "None":
            return [ip]
        sel = f"kubernetes.io/service-name={svc}"
        slices = self.api.get(f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector={sel}")
        return sorted(
            a
            for sl in slices["items"]
            for ep in sl.get("endpoints") or []
            if (ep.get("conditions") or {}).get("ready", True)
            for a in ep["addresses"]
        )

    def handle(self, msg: bytes) -> bytes:
        try:
            _qid, name, qtype, end = parse_question(msg)
        except (ValueError, IndexError, struct.error, UnicodeDecodeError):
            return msg[:2] + struct.pack("!HHHHH", 0x8180 | FORMERR, 0, 0, 0, 0) if len(msg) >= 2 else b""
        ips = self.resolve(name)
        rcode = NXDOMAIN if ips is None else NOERROR
        self.queries.append((name, qtype, rcode))
        return answer(msg, end, rcode, ips if ips and qtype == A else [])

    @classmethod
    @contextlib.contextmanager
    def serve(cls, api: _Api, host: str, port: int = 53) -> Iterator[ClusterDNS]:
        dns = cls(api, host)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((host, port))
        sock.settimeout(0.2)
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                try:
                    msg, peer = sock.recvfrom(512)
                except TimeoutError:
                    continue
                except OSError:
                    return
                with contextlib.suppress(OSError):
                    sock.sendto(dns.handle(msg), peer)

        t = threading.Thread(target=loop, name=f"clusterdns-{host}", daemon=True)
        t.start()
        try:
            yield dns
        finally:
            stop.set()
            t.join(timeout=5)
            sock.close()
