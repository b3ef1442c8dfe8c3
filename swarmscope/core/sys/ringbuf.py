"""A BPF ring buffer read through libbpf's ``ring_buffer`` API (ctypes): no BCC needed.

    rb = RingBuffer(map_fd, lambda data: events.append(data))   # data: one record's bytes
    rb.consume()      # calls back once per record written since the last call; returns the count
    rb.close()

The map fd may be a pinned map's (``bpf_obj_get``): libbpf mmaps the ring's consumer and
producer pages itself. Caveats: ``consume`` never sleeps (the programs here submit without a
wakeup and their readers poll); the callback runs inside ``consume``, on the caller's thread,
and must not raise (an exception there is caught, kept and raised by ``consume`` afterwards).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from swarmscope.core.errors import BpfError
from swarmscope.core.sys import bpf

_SAMPLE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class RingBuffer:
    def __init__(self, map_fd: int, on_record: Callable[[bytes], None]) -> None:
        lib = bpf._lib()
        lib.ring_buffer__new.restype = ctypes.c_void_p
        lib.ring_buffer__new.argtypes = [ctypes.c_int, _SAMPLE_FN, ctypes.c_void_p, ctypes.c_void_p]
        lib.ring_buffer__consume.restype = ctypes.c_int
        lib.ring_buffer__consume.argtypes = [ctypes.c_void_p]
        lib.ring_buffer__free.restype = None
        lib.ring_buffer__free.argtypes = [ctypes.c_void_p]
        self._lib, self._on_record = lib, on_record
        self._error: BaseException | None = None
        self._cb = _SAMPLE_FN(self._sample)  # kept referenced: libbpf holds the pointer
        ctypes.set_errno(0)
        self._rb = lib.ring_buffer__new(map_fd, self._cb, None, None)
        if not self._rb:
            err = ctypes.get_errno()
            raise BpfError(f"ring_buffer__new(fd {map_fd}) failed: errno {err}", err)

    def _sample(self, _ctx: int | None, data: int | None, size: int) -> int:
        try:
            self._on_record(ctypes.string_at(data or 0, size))
        except BaseException as e:  # never unwind through C: keep it for consume()
            self._error = e
            return -1
        return 0

    def consume(self) -> int:
        """Deliver every record written so far; the number delivered."""
        if not self._rb:
            raise BpfError("ring buffer used after close()", 0)
        n = int(self._lib.ring_buffer__consume(self._rb))
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        if n < 0:
            raise BpfError(f"ring_buffer__consume failed: errno {-n}", -n)
        return n

    def close(self) -> None:
        if self._rb:
            self._lib.ring_buffer__free(self._rb)
            self._rb = None
