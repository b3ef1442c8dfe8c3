"""A port already in use, said as the error a user can act on: which port, who holds it, the fix.

    raise port_in_use("Prometheus metrics", "0.0.0.0:9646", "metrics_port") from e
    check_free("0.0.0.0", 8089, "Locust's web UI", "--web-port")   # SetupError when taken

Caveat: the holder is found through /proc (psutil), so another user's process shows only when
this one runs as root; otherwise the message names the port alone.
"""

from __future__ import annotations

import errno
import socket

from swarmscope.core.errors import SetupError


def holder(port: int) -> str:
    """``pid N (command line)`` of the process listening on TCP ``port``; "" when unknown."""
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return ""
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            try:
                p = psutil.Process(c.pid)
                cmd = " ".join(" ".join(p.cmdline()).split()) or p.name()  # one line
            except psutil.Error:
                cmd = "?"
            return f"pid {c.pid} ({cmd[:100]})"
    return ""


def port_in_use(what: str, addr: str, option: str) -> SetupError:
    """The error for ``addr`` (host:port) taken when listening for ``what``; ``option`` moves it."""
    port = int(addr.rsplit(":", 1)[1])
    who = holder(port)
    held = f"port {port} is in use by {who}" if who else f"port {port} is in use"
    return SetupError(
        f"cannot listen on {addr} for {what}: {held}; stop it, or choose another port ({option})"
    )


def check_free(host: str, port: int, what: str, option: str) -> None:
    """Raise ``port_in_use`` when nothing could listen on ``host:port`` now (port 0: any is free)."""
    if not port:
        return
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        s.bind((host, port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise port_in_use(what, f"{host or '0.0.0.0'}:{port}", option) from e
    finally:
        s.close()
