"""Run blocking, pure-compute work off gevent's loop, so a Locust worker keeps its heartbeats.

    from swarmscope.workers.offloop import off_loop
    xdp = off_loop(XdpTarget, None, 1 << 20)     # BCC's compile: seconds, in a real thread

In a gevent-patched process (every Locust worker) ``fn`` runs in the hub's thread pool (a real
OS thread) while the calling greenlet waits cooperatively, so the loop keeps serving Locust's
heartbeats: a worker whose loop is stuck for more than ~3 heartbeat intervals is dropped by the
master as missing (seen with the neighbor kind's BCC compile and 1M-entry map reads under
load). Elsewhere it is a plain call. Caveat: ``fn`` must not start subprocesses or use
gevent-patched sockets or pipes: gevent's child watchers exist only on the main loop, and an
object bound to one hub cannot be used from another thread. ctypes calls (libbcc, bpf()) and
plain Python are fine; ctypes releases the GIL while in C.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _patched() -> bool:
    try:
        from gevent import monkey
    except ImportError:
        return False
    return bool(monkey.is_module_patched("threading"))


def off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    if not _patched():
        return fn(*args, **kwargs)
    import gevent

    result: T = gevent.get_hub().threadpool.apply(fn, args, kwargs)
    return result
