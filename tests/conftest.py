"""Markers that mean something, and a skip policy that lets no test skip where it could run.

    pytest -m "not cluster and not slow"   # `make test-fast`: the development loop
    pytest -m bpf tests/              # only the tests that load BPF programs

- ``root``: skipped with reason ``not root`` when the euid is not 0. The one way a test says it
  needs root (no ``skipif`` of its own), so ``-m "not root"`` deselects exactly what would skip.
- ``bpf``: also needs root, and skipped with reason ``kernel lacks BPF: …`` when a probe that
  loads a two-instruction socket filter through bpf(2) really fails.
- ``cluster``: needs the kube/node/image/Jaeger builds of `make tools` (selection only:
  ``make test-fast`` is ``-m "not cluster and not slow"``).
- ``slow``: selection only (``-m "not slow"``): every test measured over ~2 s (all phases, on
  this 2-core machine), so ``make test-fast`` stays under 3 minutes. An unmarked test that takes
  longer than SLOW_S is listed at the end of the run, so the marker stays true (SLOW_S leaves
  room for a loaded machine, where the same test takes two to three times as long).

Skip policy: a skip is allowed only when its reason is one of ALLOWED_REASONS (``not root`` /
``needs root…`` while not root, ``kernel lacks …``). Any other skip — a missing tool, a missing
binary, a fixture that gave up — is turned into a failure that quotes the reason: CI is root with
BPF, so there a skip can only hide a broken setup. Every skip's reason is printed (``-rs``).

At the session's end tests/reaper.py removes what the run's tests left behind (processes that
carry the run's mark, real nodes' mounts, dirs, netns, cgroups) and the summary lists it.

Caveats: ``kernel lacks …`` is trusted as written; use it only after a probe of the feature
really failed (as ``bpf_unavailable`` does here).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
import reaper

if TYPE_CHECKING:
    from realchart import ChartNode
    from realcluster import RealCluster
    from realnode import RealNode

SLOW_S = 5.0

# Reasons a skip may give (prefix match). Root reasons count only while not root: as root
# the same skip means a test's own condition is wrong.
ROOT_REASONS = ("not root", "needs root")
KERNEL_REASON = "kernel lacks"


@functools.cache
def bpf_unavailable() -> str | None:
    """Why BPF programs cannot be loaded here, or None when they can (one real BPF_PROG_LOAD)."""
    if os.geteuid() != 0:
        return "not root"
    if platform.system() != "Linux":
        return f"{KERNEL_REASON} BPF: not Linux"
    # BPF_PROG_LOAD of a socket filter "r0 = 0; exit": the smallest program every BPF kernel takes.
    insns = (ctypes.c_uint64 * 2)(0x00000000000000B7, 0x0000000000000095)
    license_ = ctypes.create_string_buffer(b"GPL")

    class Attr(ctypes.Structure):
        _fields_ = (
            ("prog_type", ctypes.c_uint32),
            ("insn_cnt", ctypes.c_uint32),
            ("insns", ctypes.c_uint64),
            ("license", ctypes.c_uint64),
            ("pad", ctypes.c_uint8 * 112),
        )

    attr = Attr(1, 2, ctypes.addressof(insns), ctypes.addressof(license_))  # 1 = SOCKET_FILTER
    libc = ctypes.CDLL(None, use_errno=True)
    nr_bpf = {"x86_64": 321, "aarch64": 280}.get(platform.machine())
    if nr_bpf is None:
        return None  # unknown syscall number: let the tests themselves find out
    fd = libc.syscall(nr_bpf, 5, ctypes.byref(attr), ctypes.sizeof(attr))  # 5 = BPF_PROG_LOAD
    if fd < 0:
        return f"{KERNEL_REASON} BPF: BPF_PROG_LOAD failed: {os.strerror(ctypes.get_errno())}"
    os.close(fd)
    return None


def allowed_skip(reason: str) -> bool:
    """Whether a skip with this reason is allowed on this machine (see the module docstring)."""
    r = reason.strip()
    if r.startswith("Skipped: "):
        r = r[len("Skipped: ") :]
    if os.geteuid() != 0 and r.startswith(ROOT_REASONS):
        return True
    return r.startswith(KERNEL_REASON)


def pytest_configure(config: pytest.Config) -> None:
    # No test builds a tool: the build scripts exit 3 naming `make tools` when one is missing
    # (tests/prebuilt.py), so a cold build never runs inside a test's timeout.
    os.environ["SWARMSCOPE_NO_BUILD"] = "1"
    # Every process this run starts carries the mark: the reaper finds what the tests lost.
    os.environ[reaper.MARK] = str(os.getpid())
    # Every skip prints its reason in the summary, whatever -r the caller gave.
    chars = config.option.reportchars or ""
    if "s" not in chars and "a" not in chars and "A" not in chars:
        config.option.reportchars = chars + "s"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("root") and os.geteuid() != 0:
        pytest.skip("not root (marked root; CI runs as root)")
    if item.get_closest_marker("bpf"):
        why = bpf_unavailable()
        if why is not None:
            pytest.skip(why)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    report: pytest.TestReport = yield
    if report.skipped and not hasattr(report, "wasxfail") and isinstance(report.longrepr, tuple):
        path, line, reason = report.longrepr
        if not allowed_skip(reason):
            report.outcome = "failed"
            report.longrepr = (
                f"skip not allowed on this machine (only 'not root' while not root, or "
                f"'kernel lacks …' after a failed feature probe): {path}:{line}: {reason}"
            )
    if report.when == "call" and report.passed and report.duration > SLOW_S:
        if item.get_closest_marker("slow") is None:
            item.config.stash.setdefault(_UNMARKED_SLOW, []).append((item.nodeid, report.duration))
    return report


_UNMARKED_SLOW = pytest.StashKey[list[tuple[str, float]]]()
_REAPED = pytest.StashKey[list[str]]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """After every fixture's teardown: what the tests left (tests/reaper.py), removed."""
    if os.geteuid() == 0:  # the run's basetemp, if a test made it (kubelet volumes are under it)
        basetemp = getattr(getattr(session.config, "_tmp_path_factory", None), "_basetemp", None)
        session.config.stash[_REAPED] = reaper.reap(os.getpid(), basetemp)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    reaped = terminalreporter.config.stash.get(_REAPED, [])
    if reaped:
        terminalreporter.section("left behind by the tests, removed at the session's end")
        for line in reaped:
            terminalreporter.write_line(line)
    slow = terminalreporter.config.stash.get(_UNMARKED_SLOW, [])
    if slow:
        terminalreporter.section(f"tests over {SLOW_S:.0f} s without the slow marker")
        for nodeid, secs in sorted(slow, key=lambda s: -s[1]):
            terminalreporter.write_line(f"{secs:7.1f} s  {nodeid}")


@dataclass
class _Shared:
    """A session fixture closed right after the last test that uses it, not at the session's
    end: a real node or cluster holds gigabytes and a few processes the later tests need not
    share the machine with."""

    users: int = 0
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


_SHARED = pytest.StashKey[dict[str, _Shared]]()


def _shared(config: pytest.Config, name: str) -> _Shared:
    return config.stash.setdefault(_SHARED, {}).setdefault(name, _Shared())


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        for name in getattr(item, "fixturenames", ()):
            if name in ("real_cluster", "real_node"):
                _shared(session.config, name).users += 1


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        return (yield)
    finally:
        for name, shared in item.config.stash.get(_SHARED, {}).items():
            if name in getattr(item, "fixturenames", ()):
                shared.users -= 1
                if shared.users == 0:
                    shared.stack.close()


@pytest.fixture(scope="session")
def real_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealCluster]:
    """Three real nodes (tests/realcluster.py), started once per run: tests share them, each in
    its own namespace, and leave nothing of theirs behind."""
    from cluster import Cluster, find_tools
    from realcluster import RealCluster
    from realnode import find_node_tools

    stack = _shared(request.config, "real_cluster").stack
    nodes: list[RealNode] = []
    stack.callback(_left_nothing, nodes)  # last: after the nodes' teardown
    try:
        c = stack.enter_context(
            Cluster.start(find_tools(), tmp_path_factory.mktemp("rc"), nodes=0, endpoint_reconciler="none")
        )
        rc = stack.enter_context(RealCluster.start(c, find_node_tools(), 3))
        nodes += rc.nodes
    except BaseException:
        stack.close()
        raise
    yield rc
    stack.close()


@pytest.fixture(scope="session")
def real_node(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChartNode]:
    """One real node for the chart tests (tests/realchart.py), started once per run; images are
    imported into it once, on first use; each test installs its own release and removes it."""
    from cluster import Cluster, find_tools
    from realchart import ChartNode
    from realnode import RealNode, find_node_tools

    stack = _shared(request.config, "real_node").stack
    nodes: list[RealNode] = []
    stack.callback(_left_nothing, nodes)
    try:
        # endpoint_reconciler none: the `kubernetes` Service points at the node (pods reach the
        # API server: the ingress flood's kill-pod fault). "-n": not the name test_realnode.py's
        # own node or a real_cluster node takes.
        c = stack.enter_context(
            Cluster.start(find_tools(), tmp_path_factory.mktemp("rn"), nodes=0, endpoint_reconciler="none")
        )
        nodes.append(stack.enter_context(RealNode.start(c, find_node_tools(), f"ssrn{os.getpid()}-n")))
    except BaseException:
        stack.close()
        raise
    yield ChartNode(nodes[0])
    stack.close()


def _left_nothing(nodes: list[RealNode]) -> None:
    left = [x for n in nodes for x in n.leftovers()]
    assert left == [], f"the real nodes left {left}"
