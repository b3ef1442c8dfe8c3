"""swarmscope's own exceptions. Everything the user can cause or fix is one of these.

    try:
        ...
    except SwarmscopeError as e:
        print(e); sys.exit(e.exit_code)

Library errors (grpc, netlink, bpf, OSError) are wrapped with ``raise ... from e`` at the
boundary where we know what the user was trying to do, so the message says that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class SwarmscopeError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class SetupError(SwarmscopeError):
    """The machine lacks something (root, BCC, kernel headers, a tool). Says what to run."""

    exit_code = 3


@dataclass(frozen=True)
class Problem:
    """One problem in a configuration: where it is, which key, and why it is wrong."""

    source: str  # file path, "env SWARMSCOPE_X", "--set", "default"
    key: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: {self.key}: {self.reason}"


class ConfigError(SwarmscopeError):
    """Invalid configuration; carries every problem found, not just the first."""

    exit_code = 2

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in the configuration:\n{lines}")


class ProbeError(SwarmscopeError):
    """A BPF program failed to compile, load, attach or be read."""


class IncompleteSamplesError(ProbeError):
    """A program's per-event samples of a window are incomplete (ring buffer drops, truncation).

    ``samples`` holds what it does have (by node name), so a reading can carry them with the error.
    """

    def __init__(self, message: str, samples: dict[str, list[Any]]):
        super().__init__(message)
        self.samples = samples


class BpfError(ProbeError):
    """A bpf() call failed; ``errno`` is the kernel's (e.g. errno.EPERM when not root)."""

    def __init__(self, message: str, errno: int = 0):
        super().__init__(message)
        self.errno = errno


class FleetError(SwarmscopeError):
    """Controller <-> probe communication failed (gRPC, authentication, timeouts)."""


class LoadGenError(SwarmscopeError):
    """A load generator could not run (helper missing, cgroup not writable, ...)."""


class TracerError(SwarmscopeError):
    """The tracer under test could not be started or read."""


class ResultsError(SwarmscopeError):
    """The results store could not be opened, read or written, or has no such run."""
