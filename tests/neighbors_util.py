"""Shared helpers of the tests/test_neighbors_*.py files (real processes, real sockets)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from swarmscope.targets.neighbors.sweep import start_server, stop
from swarmscope.v1 import neighbors_pb2_grpc as pbg

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF / makes namespaces: needs root")


@contextmanager
def control_plane(db: str) -> Iterator[tuple[subprocess.Popen[str], str, pbg.NeighborStoreStub]]:
    p, addr = start_server(db)
    ch = grpc.insecure_channel(addr)
    try:
        yield p, addr, pbg.NeighborStoreStub(ch)
    finally:
        ch.close()
        if p.poll() is None:
            stop(p)


@contextmanager
def pin_dir() -> Iterator[str]:
    d = f"/sys/fs/bpf/ss-test-{secrets.token_hex(3)}"
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def agent_cmd(addr: str, pins: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "swarmscope.targets.neighbors.agent",
        "--control-plane",
        addr,
        "--pin-dir",
        pins,
    ]
