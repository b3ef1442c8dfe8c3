"""The kernel neighbor table as a target: hand-packed RTM_NEWNEIGH, many per send().

    kt = KernelTable(ifindex, netns="ss-test-x")   # socket opened inside that namespace
    kt.apply(keys, values)                         # NUD_PERMANENT entries, 256 per send()
    kt.close()

One sendmsg carries ``per_send`` messages; only the last asks for an ACK, so the kernel's
error messages (any failed entry) and that ACK are read once per send. NUD_PERMANENT because
other states stop at gc_thresh3 with ENOBUFS (docs/platform.md#neighbor-table-and-maps). The
namespace switch is per-thread (setns) and undone at once: a socket keeps the namespace it was
made in.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import time

from swarmscope.core.errors import ProbeError
from swarmscope.targets.neighbors import records as R

RTM_NEWNEIGH, RTM_DELNEIGH = 28, 29
NLM_F_REQUEST, NLM_F_ACK, NLM_F_REPLACE, NLM_F_CREATE = 0x1, 0x4, 0x100, 0x400
NLMSG_ERROR = 2
NUD_PERMANENT = 0x80
NDA_DST, NDA_LLADDR = 1, 2
CLONE_NEWNET = 0x40000000
# nlmsghdr(16) + ndmsg(12) + rtattr NDA_DST(4+4) + rtattr NDA_LLADDR(4+6, padded to 12)
MSG = struct.Struct("=IHHII BxxxiHBB HH4s HH6s2x")


def netns_socket(netns: str | None) -> socket.socket:
    if not netns:
        return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise ProbeError(f"setns {netns}: {os.strerror(ctypes.get_errno())}")
        try:
            return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        finally:
            libc.setns(own, CLONE_NEWNET)
    finally:
        os.close(own)
        os.close(target)


class KernelTable:
    def __init__(self, ifindex: int, netns: str | None = None, per_send: int = 256):
        self.ifindex = ifindex
        self.per_send = per_send
        self.sock = netns_socket(netns)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind((0, 0))
        self.seq = 0
        self.total = 0
        self.send_ns: list[tuple[int, int]] = []  # (entries so far, monotonic ns after the ACK)

    def _msgs(self, keys: bytes, values: bytes, kind: int, ack_last: bool) -> bytes:
        n = len(keys) // R.KEY_SIZE
        flags = NLM_F_REQUEST | (NLM_F_CREATE | NLM_F_REPLACE if kind == RTM_NEWNEIGH else 0)
        out = []
        for i in range(n):
            self.seq += 1
            f = flags | (NLM_F_ACK if ack_last and i == n - 1 else 0)
            k = keys[i * 4 : i * 4 + 4]
            mac = values[i * 12 : i * 12 + 6] if values else b"\0" * 6
            out.append(
                MSG.pack(
                    MSG.size,
                    kind,
                    f,
                    self.seq,
                    0,
                    socket.AF_INET,
                    self.ifindex,
                    NUD_PERMANENT,
                    0,
                    1,
                    8,
                    NDA_DST,
                    k,
                    10,
                    NDA_LLADDR,
                    mac,
                )
            )
        return b"".join(out)

    def _send(self, data: bytes) -> None:
        self.sock.send(data)
        want = self.seq
        while True:
            buf = self.sock.recv(1 << 20)
            off = 0
            while off + 16 <= len(buf):
                ln, typ, _fl, seq, _pid = struct.unpack_from("=IHHII", buf, off)
                if typ == NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", buf, off + 16)
                    if err != 0:
                        raise ProbeError(f"RTM_NEWNEIGH failed: {os.strerror(-err)} (seq {seq})")
                    if seq == want:
                        return
                off += (ln + 3) & ~3

    def apply(self, keys: bytes, values: bytes, deleted: bytes = b"") -> int:
        n = len(keys) // R.KEY_SIZE
        for a in range(0, n, self.per_send):
            b = min(n, a + self.per_send)
            self._send(self._msgs(keys[a * 4 : b * 4], values[a * 12 : b * 12], RTM_NEWNEIGH, True))
            self.total += b - a
            self.send_ns.append((self.total, time.monotonic_ns()))
        nd = len(deleted) // R.KEY_SIZE
        for a in range(0, nd, self.per_send):
            b = min(nd, a + self.per_send)
            try:
                self._send(self._msgs(deleted[a * 4 : b * 4], b"", RTM_DELNEIGH, True))
            except ProbeError:
                pass  # absent entries: a delete of a missing neighbor is not an error here
        return n

    def close(self) -> None:
        self.sock.close()
