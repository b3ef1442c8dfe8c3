"""``swarmscope relay --engine native``: become the compiled relay (controller/relayd, Go).

    swarmscope relay --engine native --upstream ctl:7070 --bind 0.0.0.0:7071   # execs swarmscope-relayd

The Go relay speaks the same protocol as controller/relay.py (a fleet towards the probes, a
relay towards the upstream) at a fraction of its CPU per window (docs/scale-out.md, "A native
relay"). This process checks the settings (relay_cli.py declares them, once), then replaces
itself with the binary (``execve``: same pid, so a signal to it reaches the relay, and the
default relay id ``relay-<hostname>-<pid>`` is the same). The token goes in
``$SWARMSCOPE_TOKEN``, never in argv. The binary: ``$SWARMSCOPE_RELAYD``, else
``tools/build_relayd.sh`` (cached by a hash of its source under $SWARMSCOPE_CACHE/tools; a cold
build fetches Go modules). The container image sets ``$SWARMSCOPE_RELAYD`` to its
/usr/local/bin/swarmscope-relayd (the Dockerfile's native stage), so a pod never builds.
Caveat: the native relay takes probes only (no relay below it).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from swarmscope.core.paths import TOOLS
from swarmscope.core.sys.gobuild import go_binary
from swarmscope.core.sys.limits import raise_nofile

ENV_RELAYD = "SWARMSCOPE_RELAYD"
BUILD = TOOLS / "build_relayd.sh"


def relayd_binary() -> str:
    """The relay's path: ``$SWARMSCOPE_RELAYD``, else built (or found cached) by the tool."""
    return go_binary(BUILD, "native relay", env_var=ENV_RELAYD)


def exec_relayd(flags: dict[str, str], token: str) -> NoReturn:
    """Replace this process with the Go relay, given ``{flag: value}`` (never returns)."""
    binary = relayd_binary()
    # The soft RLIMIT_NOFILE to the hard one, as the Python relay does (sys/limits.py): Go's
    # runtime would raise it itself, but to hard - 1.
    raise_nofile()
    argv = [binary, *(f"--{k}={v}" for k, v in flags.items() if v != "")]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(binary, argv, dict(os.environ, SWARMSCOPE_TOKEN=token))
