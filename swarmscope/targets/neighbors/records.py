"""Packed neighbor records: the byte layout shared by the wire, the store and the BPF map.

    keys, values = make_entries(1000, start=0)      # 4000 and 12000 bytes
    ips = unpack_keys(keys)                         # list[int] of the 4-byte keys (host order)

A key is an IPv4 address in network byte order (4 bytes); a value is ``struct neigh_value``
of bpf/xdp_neigh.bpf.c: dmac[6], flags u16 LE, ifindex u32 LE (12 bytes). Everything here
works on whole byte strings with C-level slicing (no Python loop per entry), which is what
keeps 1M entries cheap.
"""

from __future__ import annotations

import array
import socket
import struct

KEY_SIZE = 4
VALUE_SIZE = 12
BASE_IP = 0x0A400000  # 10.64.0.0: generated neighbors live in 10.64.0.0/10
VALUE = struct.Struct("<6sHI")
MAX_BATCH_ENTRIES = 1_000_000  # entries (or deleted keys) in one put-batch message, any transport
# The untimed load of the store before a list (the data "already in DB"): batched, whatever the
# writes' batch_size, so a 1M list does not wait for 1M commits first.
PRELOAD_BATCH = 5000


def make_keys(n: int, start: int = 0) -> bytes:
    """n distinct IPv4 keys (network byte order) 10.64.0.0 + start + 1 ... ."""
    a = array.array("I", range(BASE_IP + start + 1, BASE_IP + start + 1 + n))
    a.byteswap()  # host (little endian) -> network order
    return a.tobytes()


def make_values(keys: bytes, ifindex: int = 0, gen: int = 0) -> bytes:
    """One value per key: dmac 02:<gen>:<ip bytes>, flags 0, the given ifindex."""
    n = len(keys) // KEY_SIZE
    v = bytearray(VALUE_SIZE * n)
    v[0::VALUE_SIZE] = b"\x02" * n
    v[1::VALUE_SIZE] = bytes([gen & 0xFF]) * n
    for i in range(4):  # 4 strided copies, each a single C loop
        v[2 + i :: VALUE_SIZE] = keys[i::KEY_SIZE]
    if ifindex:
        b = struct.pack("<I", ifindex)
        for i in range(4):
            v[8 + i :: VALUE_SIZE] = b[i : i + 1] * n
    return bytes(v)


def make_entries(n: int, start: int = 0, ifindex: int = 0, gen: int = 0) -> tuple[bytes, bytes]:
    keys = make_keys(n, start)
    return keys, make_values(keys, ifindex, gen)


def unpack_keys(keys: bytes) -> list[int]:
    """The keys as ints (the 4 bytes read natively): dictionary keys, not addresses."""
    return memoryview(keys).cast("I").tolist()


def pack_keys(ints: list[int]) -> bytes:
    return array.array("I", ints).tobytes()


def split_values(values: bytes) -> list[bytes]:
    return [values[i : i + VALUE_SIZE] for i in range(0, len(values), VALUE_SIZE)]


def key_of(ip: str) -> int:
    """Dictionary key (native int of the 4 network-order bytes) of a dotted IPv4 address."""
    return int(memoryview(socket.inet_aton(ip)).cast("I")[0])


def ip_of(key: int) -> str:
    return socket.inet_ntoa(struct.pack("=I", key))


def value(mac: str, ifindex: int = 0, flags: int = 0) -> bytes:
    return VALUE.pack(bytes.fromhex(mac.replace(":", "")), flags, ifindex)


def check(keys: bytes, values: bytes) -> int:
    """Number of entries; ValueError when the two byte strings do not describe n entries."""
    if len(keys) % KEY_SIZE or len(values) % VALUE_SIZE or len(keys) // KEY_SIZE != len(values) // VALUE_SIZE:
        raise ValueError(f"malformed batch: {len(keys)} key bytes, {len(values)} value bytes")
    return len(keys) // KEY_SIZE


def running(counts: list[int], times: list[int]) -> list[list[int]]:
    """[[entries so far, t_ns]] per batch, from each batch's entries and time."""
    out, run = [], 0
    for c, t in zip(counts, times, strict=True):
        run += c
        out.append([run, t])
    return out
