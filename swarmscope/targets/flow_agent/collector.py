"""swarmscope's NetFlow v9 / IPFIX collector: what a real flow exporter reported, per 5-tuple.

    c = Collector(("127.0.0.1", 2055)).start()   # a thread; parses with PyPI ``netflow`` (pinned)
    c.reset()                                    # a window begins
    ...                                          # the exporter sends its records
    c.summary()   # {"packets", "l3_bytes", "records", "export_packets", "lost_export_packets",
                  #  "flows": {(src, dst, sport, dport, proto): [packets, l3_bytes, records]}}

Runs where the exporter runs (the flow storm's source namespace, so the exporter's datagrams
cross only that namespace's loopback, never the measured veth). Parsing is the ``netflow``
library's (v9 and IPFIX templates cached across packets); a data packet that arrives before its
template is kept and parsed again when the template comes. Loss on the collector's side is
named, not guessed: the socket buffer is 64 MiB (SO_RCVBUFFORCE, we are root), and a gap in a
v9 export header's sequence number counts ``lost_export_packets`` (IPFIX numbers records, not
datagrams: its gaps are not counted here, so the adapters export v9). Records carry the
exporter's octet count, the IPv4 total length (L3); the Ethernet header is not in it.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

from netflow.ipfix import IPFIXTemplateNotRecognized
from netflow.utils import parse_packet
from netflow.v9 import V9TemplateNotRecognized

from swarmscope.core.errors import LoadGenError

SO_RCVBUFFORCE = 33  # <asm-generic/socket.h>; not in the socket module
RCVBUF = 64 << 20
FlowKey = tuple[str, str, int, int, int]

# field names: NetFlow v9 (RFC 3954) and IPFIX (RFC 7012), as the netflow library spells them
_V9 = ("IPV4_SRC_ADDR", "IPV4_DST_ADDR", "L4_SRC_PORT", "L4_DST_PORT", "PROTOCOL", "IN_PKTS", "IN_BYTES")
_IPFIX = ("sourceIPv4Address", "destinationIPv4Address", "sourceTransportPort", "destinationTransportPort",
          "protocolIdentifier", "packetDeltaCount", "octetDeltaCount")  # fmt: skip


def record_of(d: dict[str, Any]) -> tuple[FlowKey, int, int] | None:
    """One data record's (5-tuple, packets, L3 bytes); None for a record without them."""
    for names in (_V9, _IPFIX):
        if names[0] in d and names[5] in d:
            src, dst, sp, dp, proto, pk, by = (d.get(n) for n in names)
            key = (str(src), str(dst), int(sp or 0), int(dp or 0), int(proto or 0))
            return key, int(pk or 0), int(by or 0)
    return None


class Collector:
    def __init__(self, addr: tuple[str, int]) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
            self.sock.bind(addr)
        except OSError as e:
            self.sock.close()
            raise LoadGenError(f"collector cannot listen on {addr}: {e}") from e
        self.sock.settimeout(0.2)
        self.templates: dict[str, Any] = {"netflow": {}, "ipfix": {}}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="collector", daemon=True)
        self._pending: list[bytes] = []  # data before its template
        self._next_seq: dict[int, int] = {}  # v9 source id -> the sequence number expected next
        self.last_rx = 0.0
        self.reset()

    def start(self) -> Collector:
        self._thread.start()
        return self

    def reset(self) -> None:
        with self._lock:
            self.flows: dict[FlowKey, list[int]] = {}
            self.counts = dict.fromkeys(
                ("packets", "l3_bytes", "records", "export_packets", "lost_export_packets",
                 "unparsed"), 0)  # fmt: skip

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.last_rx = time.monotonic()
                self.counts["export_packets"] += 1
                self._sequence(data)
                self._parse(data)
                if self._pending:  # a template may have come: retry what waited for one
                    waiting, self._pending = self._pending, []
                    for d in waiting:
                        self._parse(d)

    def _parse(self, data: bytes) -> None:
        try:
            p = parse_packet(data, self.templates)
        except (V9TemplateNotRecognized, IPFIXTemplateNotRecognized):
            self._pending.append(data)
            return
        except Exception:  # a malformed datagram: counted, never fatal to the window
            self.counts["unparsed"] += 1
            return
        for f in p.flows:
            rec = record_of(f.data)
            if rec is None:
                continue
            key, pk, by = rec
            row = self.flows.setdefault(key, [0, 0, 0])
            row[0] += pk
            row[1] += by
            row[2] += 1
            self.counts["packets"] += pk
            self.counts["l3_bytes"] += by
            self.counts["records"] += 1

    def _sequence(self, data: bytes) -> None:
        """Gaps in a v9 exporter's datagram numbering (RFC 3954 header: version, count, uptime,
        secs, sequence, source id), read before parsing so a datagram waiting for its template
        counts too: export datagrams the collector never got."""
        if len(data) < 20 or struct.unpack_from("!H", data)[0] != 9:
            return
        seq, source = struct.unpack_from("!II", data, 12)
        want = self._next_seq.get(source)
        if want is not None and seq != want:
            self.counts["lost_export_packets"] += (seq - want) % (1 << 32)
        self._next_seq[source] = (seq + 1) % (1 << 32)

    def quiet_for(self) -> float:
        """Seconds since the last datagram (since start if none)."""
        with self._lock:
            return time.monotonic() - self.last_rx if self.last_rx else float("inf")

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return {**self.counts, "pending": len(self._pending), "flows": dict(self.flows)}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
