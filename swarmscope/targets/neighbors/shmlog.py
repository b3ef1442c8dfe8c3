"""The control plane's committed log in shared memory: written by the server, read by agents.

    log = LogWriter(capacity=256 << 20)          # server: a memfd, mapped read-write
    log.append(rev, keys, values, deleted)        # after the durable commit, under the store lock
    r = LogReader(fd)                             # agent: the fd it got over the Unix socket
    for rec in r.records(upto=r.tail()): ...      # Record(rev, n, keys_addr, values_addr, ...)

The layout (little endian): a 64-byte header ``magic, tail, revision, capacity`` then records
``revision u64, n keys u32, n deleted u32, keys (4 n), values (12 n), deleted (4 nd)``, each
padded to 8 bytes. Records are immutable once written; the writer stores the record first and
the header's ``tail`` last, as one aligned 8-byte store (ctypes), so a reader that loads
``tail`` once sees only whole records before it. This relies on x86-64's store order (stores
are not reordered with stores); a weakly ordered CPU would need a release/acquire barrier here.

The agent maps the fd read-only (the server hands out an ``O_RDONLY`` reopen of the memfd) and
programs the BPF map straight from the mapping: no copy, no decode, no round trip. Caveat: the
log is append-only and bounded by ``capacity`` (sparse: only written pages cost memory); when
it is full the server stops publishing and ends its watchers (:class:`LogFull`), they list again
over gRPC. A new segment with a compacted snapshot would lift this bound; it is not built.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

from swarmscope.core.errors import SwarmscopeError
from swarmscope.targets.neighbors import records as R

MAGIC = b"SSNLOG01"
HEADER = struct.Struct("<8sQQQ")  # magic, tail, revision, capacity
HEADER_SIZE = 64
REC = struct.Struct("<QII")  # revision, keys, deleted keys
DEFAULT_CAPACITY = 256 << 20  # 16 B per entry: ~16M entries over a control plane's life

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value


class LogFull(SwarmscopeError):
    """The shared log has no room for the next record."""


class Record(NamedTuple):
    """One committed transaction as addresses into the reader's mapping."""

    revision: int
    n: int  # entries put
    keys: int  # address of n packed keys
    values: int  # address of n packed values
    nd: int  # keys deleted
    deleted: int  # address of nd packed keys
    end: int  # offset of the next record


def _pad(n: int) -> int:
    return (n + 7) & ~7


class LogWriter:
    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self.capacity = capacity
        self.fd = os.memfd_create("ss-neigh-log", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, capacity)
        self.mm = mmap.mmap(self.fd, capacity)
        self.mm[0:HEADER_SIZE] = HEADER.pack(MAGIC, HEADER_SIZE, 0, capacity).ljust(HEADER_SIZE, b"\0")
        # ctypes views of the header words: one aligned 8-byte store each (see the module doc).
        self._tail = ctypes.c_uint64.from_buffer(self.mm, 8)
        self._rev = ctypes.c_uint64.from_buffer(self.mm, 16)
        self.tail = HEADER_SIZE
        self.full = False

    def append(self, rev: int, keys: bytes, values: bytes, deleted: bytes = b"") -> int:
        """Publish one committed transaction; returns the new tail. LogFull when out of room."""
        n, nd = len(keys) // R.KEY_SIZE, len(deleted) // R.KEY_SIZE
        size = _pad(REC.size + len(keys) + len(values) + len(deleted))
        at = self.tail
        if self.full or at + size > self.capacity:
            self.full = True
            raise LogFull(f"shared log full ({self.capacity} bytes): list again over gRPC")
        REC.pack_into(self.mm, at, rev, n, nd)
        o = at + REC.size
        self.mm[o : o + len(keys)] = keys
        o += len(keys)
        self.mm[o : o + len(values)] = values
        o += len(values)
        self.mm[o : o + len(deleted)] = deleted
        self._rev.value = rev
        self.tail = at + size
        self._tail.value = self.tail  # last: readers that see it see the whole record
        return self.tail

    def reader_fd(self) -> int:
        """A new read-only fd of the same memory, for an agent (the caller closes it)."""
        return os.open(f"/proc/self/fd/{self.fd}", os.O_RDONLY | os.O_CLOEXEC)

    def close(self) -> None:
        del self._tail, self._rev  # release the buffer exports before unmapping
        self.mm.close()
        os.close(self.fd)


class LogReader:
    """An agent's read-only mapping of the log (from the fd the control plane sent)."""

    def __init__(self, fd: int):
        size = os.fstat(fd).st_size
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, MAP_FAILED):
            err = ctypes.get_errno()
            raise SwarmscopeError(f"cannot map the control plane's log: {os.strerror(err)}")
        self.addr: int = addr
        self.size = size
        magic, _, _, cap = HEADER.unpack(ctypes.string_at(addr, HEADER.size))
        if magic != MAGIC or cap != size:
            self.close()
            raise SwarmscopeError("not a neighbor control plane log (bad magic or size)")
        self._tail = ctypes.c_uint64.from_address(addr + 8)
        self._rev = ctypes.c_uint64.from_address(addr + 16)
        self.offset = HEADER_SIZE  # the next record this reader has not consumed

    def tail(self) -> int:
        return int(self._tail.value)  # one aligned 8-byte load

    def revision(self) -> int:
        return int(self._rev.value)

    def records(self, start: int, upto: int) -> Iterator[Record]:
        """The records in [start, upto) (byte offsets; ``upto`` a tail this reader loaded)."""
        at, base = start, self.addr
        while at < upto:
            rev, n, nd = REC.unpack(ctypes.string_at(base + at, REC.size))
            k = base + at + REC.size
            v = k + n * R.KEY_SIZE
            d = v + n * R.VALUE_SIZE
            at += _pad(REC.size + n * (R.KEY_SIZE + R.VALUE_SIZE) + nd * R.KEY_SIZE)
            yield Record(rev, n, k, v, nd, d, at)

    def close(self) -> None:
        if self.addr:
            _libc.munmap(self.addr, self.size)
            self.addr = 0
