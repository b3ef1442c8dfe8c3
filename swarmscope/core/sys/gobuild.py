"""The project's compiled (Go) programs, found or built: one rule for all of them.

    from swarmscope.core.sys.gobuild import go_binary, tool_binary
    path = go_binary(BUILD, "the simulated probes", env_var="SWARMSCOPE_SIMPROBES")
    path = tool_binary("k6 v1.8.1", cached, [str(TOOLS / "build_k6.sh")], "4.5 min")

``tool_binary`` is for the third-party tools a run may need (k6, ig): found in the cache, else
built on first use with a progress line on stderr (what, roughly how long, then how long it
took). Callers build them before the first measurement window opens (the kinds' ``prepare``,
the drivers' set-up), never inside one. A cached or built binary is run only when root (or
this user) owns it and every directory above it and nobody else can write there
(``core/sys/trust.py``): otherwise a SetupError says why, since a run executes it as root.
``$SWARMSCOPE_BUILD_<NAME>`` replaces the build script (same contract: prints the binary's path
last), e.g. a prebuilt copy or a test's fake.

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
import time
from pathlib import Path

from swarmscope.core.errors import SetupError
from swarmscope.core.sys.trust import check_tool


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
    return check_tool(p.stdout.strip().splitlines()[-1], what)


def build_script(name: str, default: Path) -> str:
    """The script that builds tool ``name``: ``$SWARMSCOPE_BUILD_<NAME>``, else ``default``."""
    return os.environ.get(f"SWARMSCOPE_BUILD_{name.upper()}", "").strip() or str(default)


def tool_binary(
    what: str, cached: Path, build: list[str], eta: str, env: dict[str, str] | None = None
) -> str:
    """``cached`` when it is an executable file; else ``build`` (argv) is run once, between two
    progress lines on stderr, and the path it prints last is returned."""
    if cached.is_file() and os.access(cached, os.X_OK):
        return check_tool(cached, what)
    say = lambda msg: print(f"swarmscope: {msg}", file=sys.stderr, flush=True)  # noqa: E731
    say(f"building {what} before any measurement window (first use here, ≈ {eta}; cached as {cached})")
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(build, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    except OSError as e:
        raise SetupError(f"cannot build {what} with {build[0]}: {e.strerror or e}") from e
    while True:  # a line a minute, so a long build is not mistaken for a hang
        try:
            out, err = p.communicate(timeout=60)
            break
        except subprocess.TimeoutExpired:
            say(f"still building {what}: {time.monotonic() - t0:.0f} s")
        except BaseException:
            p.kill()
            p.wait()
            raise
    if p.returncode != 0:
        tail = "\n".join(err.strip().splitlines()[-8:])
        raise SetupError(f"building {what} failed ({' '.join(build)}, exit {p.returncode}):\n{tail}")
    lines = out.strip().splitlines()
    built = Path(lines[-1]) if lines else cached
    if not (built.is_file() and os.access(built, os.X_OK)):
        raise SetupError(f"building {what}: {build[0]} did not produce an executable ({built})")
    say(f"built {what} in {time.monotonic() - t0:.0f} s ({built})")
    return check_tool(built, what)
