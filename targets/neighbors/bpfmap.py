"""Batched BPF map access from packed bytes, through the bpf() syscall (no per-entry objects).

    update_batch(fd, keys, values)            # BPF_MAP_UPDATE_BATCH, keys/values as bytes
    for k, v in lookup_batches(fd, 4, 12): ...# BPF_MAP_LOOKUP_BATCH pages, as bytes
    fd = obj_get("/sys/fs/bpf/ss/neighbors")  # open a pinned map

The byte strings are handed to the kernel by address (``bytes`` is immutable, the kernel only
reads them), so programming 1M entries costs two pointer conversions and the syscall, not 2M
ctypes objects (the bottleneck PLATFORM.md measured). Caveat: x86-64 syscall number.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterator

from swarmscope.errors import ProbeError

SYS_BPF = 321  # x86-64
BPF_MAP_LOOKUP_ELEM = 1
BPF_OBJ_GET = 7
BPF_MAP_LOOKUP_BATCH = 24
BPF_MAP_UPDATE_BATCH = 26
BPF_MAP_DELETE_BATCH = 27

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _BatchAttr(ctypes.Structure):
    _fields_ = [  # noqa: RUF012 - ctypes layout of union bpf_attr's batch member
        ("in_batch", ctypes.c_uint64),
        ("out_batch", ctypes.c_uint64),
        ("keys", ctypes.c_uint64),
        ("values", ctypes.c_uint64),
        ("count", ctypes.c_uint32),
        ("map_fd", ctypes.c_uint32),
        ("elem_flags", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    ]


def _addr(b: bytes) -> int:
    return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value or 0


def _bpf(cmd: int, attr: ctypes.Structure | ctypes.Array[ctypes.c_char]) -> int:
    r = _libc.syscall(SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if r < 0:
        return -ctypes.get_errno()
    return int(r)


def update_batch(fd: int, keys: bytes, values: bytes, key_size: int = 4, value_size: int = 12) -> int:
    """Write every (key, value) in one BPF_MAP_UPDATE_BATCH; returns the count processed."""
    n = len(keys) // key_size
    if n == 0:
        return 0
    if len(values) != n * value_size:
        raise ProbeError(f"update_batch: {n} keys but {len(values)} value bytes")
    attr = _BatchAttr(keys=_addr(keys), values=_addr(values), count=n, map_fd=fd)
    r = _bpf(BPF_MAP_UPDATE_BATCH, attr)
    if r < 0:
        raise ProbeError(f"BPF_MAP_UPDATE_BATCH of {n} entries failed after {attr.count}: {os.strerror(-r)}")
    return int(attr.count)


def delete_batch(fd: int, keys: bytes, key_size: int = 4) -> int:
    """Delete keys; keys not present are skipped one by one (the batch call stops at ENOENT)."""
    n = len(keys) // key_size
    done = 0
    while done < n:
        rest = keys[done * key_size :]
        attr = _BatchAttr(keys=_addr(rest), count=n - done, map_fd=fd)
        r = _bpf(BPF_MAP_DELETE_BATCH, attr)
        done += int(attr.count)
        if r == -2:  # ENOENT: this key was absent; skip it
            done += 1
        elif r < 0:
            raise ProbeError(f"BPF_MAP_DELETE_BATCH failed: {os.strerror(-r)}")
    return n


def lookup_batches(
    fd: int, key_size: int = 4, value_size: int = 12, chunk: int = 65536
) -> Iterator[tuple[bytes, bytes]]:
    """Read the whole map, ``chunk`` entries per BPF_MAP_LOOKUP_BATCH call."""
    keys = ctypes.create_string_buffer(chunk * key_size)
    vals = ctypes.create_string_buffer(chunk * value_size)
    tok_in = ctypes.create_string_buffer(max(key_size, 8))
    tok_out = ctypes.create_string_buffer(max(key_size, 8))
    first = True
    while True:
        attr = _BatchAttr(
            in_batch=0 if first else ctypes.addressof(tok_in),
            out_batch=ctypes.addressof(tok_out),
            keys=ctypes.addressof(keys),
            values=ctypes.addressof(vals),
            count=chunk,
            map_fd=fd,
        )
        r = _bpf(BPF_MAP_LOOKUP_BATCH, attr)
        if r < 0 and r != -2:
            raise ProbeError(f"BPF_MAP_LOOKUP_BATCH failed: {os.strerror(-r)}")
        n = int(attr.count)
        if n:
            yield keys.raw[: n * key_size], vals.raw[: n * value_size]
        if r == -2:  # ENOENT: no more entries
            return
        ctypes.memmove(tok_in, tok_out, len(tok_out))
        first = False


def read_all(fd: int, key_size: int = 4, value_size: int = 12) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for k, v in lookup_batches(fd, key_size, value_size):
        out.update(
            zip(
                (k[i : i + key_size] for i in range(0, len(k), key_size)),
                (v[i : i + value_size] for i in range(0, len(v), value_size)),
                strict=True,
            )
        )
    return out


def obj_get(path: str) -> int:
    """fd of a pinned BPF object."""
    p = ctypes.create_string_buffer(path.encode())
    attr = (ctypes.c_char * 16)()
    struct.pack_into("=QI", attr, 0, ctypes.addressof(p), 0)
    r = _bpf(BPF_OBJ_GET, attr)
    if r < 0:
        raise ProbeError(f"BPF_OBJ_GET {path}: {os.strerror(-r)}")
    return r


def map_id(pid: int, fd: int) -> int | None:
    """Map id behind ``fd`` of process ``pid`` (from /proc/<pid>/fdinfo), None if not a map."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
            for line in fh:
                if line.startswith("map_id:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class _ElemAttr(ctypes.Structure):
    _fields_ = [  # noqa: RUF012 - union bpf_attr's element member
        ("map_fd", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("value", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    ]


def lookup_elem(fd: int, key: bytes, value_size: int) -> bytes | None:
    """One BPF_MAP_LOOKUP_ELEM; None when the key is absent."""
    out = ctypes.create_string_buffer(value_size)
    attr = _ElemAttr(map_fd=fd, key=_addr(key), value=ctypes.addressof(out))
    r = _bpf(BPF_MAP_LOOKUP_ELEM, attr)
    if r == -2:
        return None
    if r < 0:
        raise ProbeError(f"BPF_MAP_LOOKUP_ELEM failed: {os.strerror(-r)}")
    return out.raw
