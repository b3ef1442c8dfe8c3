"""swarmscope.core.sys.heap: a worker's setup heap is frozen out of full collections, once.

In a subprocess: freezing is process-wide and permanent, not something to do to pytest's own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = """
import gc, json
import locust, gevent, grpc, numpy  # what a worker has imported before its first window
from swarmscope.core.sys.heap import freeze_setup_heap

n = freeze_setup_heap()
print(json.dumps({"n": n, "again": freeze_setup_heap(), "count": gc.get_freeze_count(),
                  "left": len(gc.get_objects())}))
"""


@pytest.mark.slow
def test_freeze_setup_heap_moves_the_imports_out_of_full_collections_once() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True
    )
    got = json.loads(out.stdout)
    assert got["n"] > 20_000  # Locust, gevent, grpc and numpy's objects
    assert got["again"] == 0 and got["count"] == got["n"]  # a second call freezes nothing more
    assert got["left"] < got["n"] / 10  # what a full collection still walks
