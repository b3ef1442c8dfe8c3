"""The project's compiled (Go) programs, found or built: one rule for all of them.

    from swarmscope.core.sys.gobuild import go_binary
    path = go_binary(BUILD, "the probe reader", env_var="SWARMSCOPE_PROBE_READER")

``$env_var`` when set (an image sets it to its prebuilt copy; it must be executable), else the
program's ``tools/build_*.sh`` builds it, or finds it cached by a hash of its sources
(tools/go_build.sh), and prints its path last. Caveat: a cold build fetches Go modules through
the module proxy (minutes on 2 cores); the build gets this Python as $PYTHON (its grpc_tools
generates the Go code of probe.proto).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from swarmscope.core.errors import SetupError


def go_binary(build: Path, what: str, env_var: str = "") -> str:
    """The path of ``what`` (e.g. "the probe reader"): ``$env_var``, else built by ``build``."""
    given = os.environ.get(env_var, "").strip() if env_var else ""
    if given:
        if not os.access(given, os.X_OK):
            raise SetupError(f"${env_var}={given}: not an executable file")
        return given
    if not build.exists():
        hint = f"set ${env_var} ({build.name} builds one)" if env_var else f"{build} is missing"
        raise SetupError(f"no {what}: {hint}")
    env = dict(os.environ, PYTHON=sys.executable)
    try:
        p = subprocess.run(["bash", str(build)], capture_output=True, text=True, env=env, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SetupError(f"cannot build {what} ({build}): {e}") from e
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-8:])
        raise SetupError(f"building {what} failed ({build}):\n{tail}")
    return p.stdout.strip().splitlines()[-1]
