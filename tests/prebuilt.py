"""The Go tools and the image the tests run, found where `make tools` put them; never built here.

    out = prebuilt.run([str(BUILD), "etcd", "helm"])   # the script's stdout (its cached paths)
    k6 = prebuilt.found(lambda: k6_binary(build=False))  # the product's own lookup, no build

tests/conftest.py sets SWARMSCOPE_NO_BUILD=1, so every build script (tools/k8s/build.sh,
build_jaeger.sh, build_k6.sh, build_ig.sh, go_build.sh, build_image.py) prints the cached path
when the tool is built and otherwise exits 3 saying "… is not built: run `make tools`". A test
that finds a tool missing fails at once with that line: a cold build never runs inside a test's
timeout, nor leaves a half-written build directory in the shared cache when the timeout kills it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import TypeVar

import pytest

from swarmscope.core.errors import SetupError
from swarmscope.core.sys.trust import untrusted

T = TypeVar("T")

MAKE = "make tools"


def run(argv: list[str], timeout: float = 60.0) -> str:
    """``argv``'s stdout; a failure (a missing tool above all) fails the test quoting its stderr."""
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if r.returncode != 0:
        tail = "\n".join(r.stderr.strip().splitlines()[-5:])
        why = f"{argv[0]} (rc={r.returncode}): {tail}\n(the tests build nothing: run `{MAKE}`)"
        pytest.fail(why, pytrace=False)
    for line in r.stdout.splitlines():
        if line.startswith("/") and os.path.exists(line) and (why := untrusted(line)) is not None:
            pytest.fail(f"{argv[0]} gave {line}, which the tests will not run: {why}", pytrace=False)
    return r.stdout


def found(get: Callable[[], T]) -> T:
    """``get()``, the product's lookup of a tool; its SetupError (not built) fails the test."""
    try:
        return get()
    except SetupError as e:
        pytest.fail(f"{e}\n(the tests build nothing: run `{MAKE}`)", pytrace=False)
