"""Issue 27, finding 5: the neighbor control plane's IPC socket holds little before the token.

A real IpcServer on a real Unix socket: a hello frame larger than ``MAX_HELLO_FRAME`` ends
the connection at its header (not after 32 MiB), a connection that sends nothing is closed
after ``HELLO_TIMEOUT_S``, and at most ``MAX_UNAUTHENTICATED`` wait at once; a client with
the token still gets in once they are gone.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from neighbors_util import TOKEN

from swarmscope.targets.neighbors import ipc
from swarmscope.targets.neighbors.ipc import FRAME, IpcClient, IpcServer
from swarmscope.targets.neighbors.store import Store


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[IpcServer]:
    monkeypatch.setattr(ipc, "HELLO_TIMEOUT_S", 1.0)
    st = Store(str(tmp_path / "p.db"))
    srv = IpcServer(st, str(tmp_path / "cp" / "s"), TOKEN)
    yield srv
    srv.close()
    st.close()


def dial(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(path)
    return s


def closed_within(s: socket.socket, seconds: float) -> float:
    """Seconds until the server closed ``s`` (recv returns b""), failing after ``seconds``."""
    t0 = time.monotonic()
    s.settimeout(seconds)
    try:
        assert s.recv(16) == b""
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open for {seconds} s") from None
    return time.monotonic() - t0


def test_a_large_hello_frame_is_refused_at_its_header(server: IpcServer) -> None:
    s = dial(server.path)
    s.sendall(FRAME.pack(32 << 20, ord("H")) + b"x" * 4096)
    assert closed_within(s, 0.5) < 0.5
    assert server.unauthenticated == 0


def test_a_silent_connection_is_closed_after_the_hello_timeout(server: IpcServer) -> None:
    s = dial(server.path)
    assert 0.8 < closed_within(s, 3.0) < 2.0


def test_unauthenticated_connections_are_bounded(server: IpcServer) -> None:
    idle = [dial(server.path) for _ in range(ipc.MAX_UNAUTHENTICATED)]
    time.sleep(0.2)
    assert server.unauthenticated == ipc.MAX_UNAUTHENTICATED
    extra = dial(server.path)
    assert closed_within(extra, 0.5) < 0.5
    for s in idle:
        s.close()
    time.sleep(0.2)
    assert server.unauthenticated == 0
    c = IpcClient(server.path, TOKEN)
    assert c.get(b"\x00" * 4) is None
    c.close()
