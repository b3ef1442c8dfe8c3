"""A TCP forwarder: the test API server (loopback only) made reachable from the real node's netns.

    with forward("10.231.7.1", ("127.0.0.1", 6443)) as port:
        ...  # kube-proxy in the node's netns connects to 10.231.7.1:<port>

The API server binds 127.0.0.1, which inside the node's network namespace is that namespace's
own loopback; kube-proxy (and a pod that calls the API) reach it through this listener on the
node IP, which exists on this machine only. TLS passes through unchanged: clients keep checking
the API server's certificate (for 127.0.0.1: set `tls-server-name`).

Caveats: one thread per direction per connection; connections are closed when the context exits.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def forward(host: str, target: tuple[str, int]) -> Iterator[int]:
    """Listen on (host, a free port), relay every connection to ``target``; yields the port."""
    lsock = socket.create_server((host, 0))
    lsock.settimeout(0.2)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                c, _ = lsock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                u = socket.create_connection(target, timeout=5)
            except OSError:
                c.close()
                continue
            u.settimeout(None)
            c.settimeout(None)
            conns.extend((c, u))
            threading.Thread(target=_pump, args=(c, u), daemon=True).start()
            threading.Thread(target=_pump, args=(u, c), daemon=True).start()

    t = threading.Thread(target=accept, name=f"forward-{host}", daemon=True)
    t.start()
    try:
        yield lsock.getsockname()[1]
    finally:
        stop.set()
        t.join(timeout=5)
        lsock.close()
        for c in conns:
            with contextlib.suppress(OSError):
                c.close()
