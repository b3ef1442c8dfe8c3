"""Build the native exec-storm helpers (``tiny``, ``execstorm``) once and cache them.

    from swarmscope.workers.native import ensure_built
    tools = ensure_built()          # compiles on first use, then returns at once
    subprocess.run([tools.execstorm, "--binary", tools.tiny, "--duration-s", "1"])

Binaries land in ``/var/cache/swarmscope/native/<key>/`` (``~/.cache/swarmscope/native/`` when
that is not writable), where ``<key>`` hashes the sources, the flags and ``cc --version``: an
edit or a compiler upgrade builds a new directory, a second call reuses the old one. Builds go
to a temporary directory renamed into place, so concurrent callers never see half a build.

Only a cache this user (or root) owns is used: a helper is reused when it, its directory and
every directory above it are owned by root or by us and writable by nobody else (a sticky
directory such as /tmp excepted), so an executable planted in another user's ``~/.cache`` is
never run as root; such a directory is rebuilt, not trusted.

Caveats: needs a C compiler (``cc``, or ``$CC``) and libc headers; on x86-64/aarch64 ``tiny``
is built without libc (smallest exec), elsewhere as a plain static program. No compiler raises
:class:`LoadGenError` saying what to install.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from swarmscope.core.errors import LoadGenError
from swarmscope.core.sys.trust import trusted

SRC_DIR = pathlib.Path(__file__).resolve().parent / "native"
CACHE_ROOTS = [pathlib.Path("/var/cache/swarmscope/native"), pathlib.Path.home() / ".cache/swarmscope/native"]


@dataclass(frozen=True)
class Target:
    """One executable: its file name in the cache dir, its C source, and compiler flags."""

    name: str
    source: pathlib.Path
    flags: tuple[str, ...]


@dataclass(frozen=True)
class NativeTools:
    tiny: pathlib.Path
    execstorm: pathlib.Path


def _tiny_flags() -> tuple[str, ...]:
    # Without libc: no loader, no libc start-up; one mapped segment whose first instruction exits.
    if platform.machine() in ("x86_64", "aarch64"):
        return ("-static", "-O2", "-nostdlib", "-DTINY_NOSTDLIB", "-Wl,--build-id=none", "-s")
    return ("-static", "-O2", "-s")


def _compiler() -> str:
    cc = os.environ.get("CC", "cc")
    path = shutil.which(cc)
    if not path:
        raise LoadGenError(
            f"no C compiler ({cc!r}) to build the exec-storm helpers: install gcc and libc6-dev "
            "(tools/setup.sh does) or set CC"
        )
    return path


def _cc_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise LoadGenError(f"cannot run the C compiler {cc}: {e}") from e
    return out.stdout + out.stderr


def _usable(d: pathlib.Path, targets: list[Target]) -> bool:
    return all(os.access(d / t.name, os.X_OK) and trusted(d / t.name) for t in targets)


def _writable_root() -> pathlib.Path:
    for root in CACHE_ROOTS:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(root, os.W_OK | os.X_OK) and trusted(root):
            return root
    raise LoadGenError(
        f"no writable cache directory for native helpers (tried {', '.join(map(str, CACHE_ROOTS))})"
    )


def build_cached(kind: str, targets: list[Target]) -> pathlib.Path:
    """Compile ``targets`` into one cached directory keyed by sources+flags+compiler; return it.

    Reused when present (any cache root). ``kind`` only names the directory (``native``,
    ``bench``) so listings stay readable.
    """
    cc = _compiler()
    h = hashlib.sha256(_cc_version(cc).encode())
    for t in targets:
        try:
            src = t.source.read_bytes()
        except OSError as e:
            raise LoadGenError(f"missing source {t.source}: {e}") from e
        h.update(f"\0{t.name}\0{' '.join(t.flags)}\0".encode())
        h.update(src)
    key = f"{kind}-{h.hexdigest()[:16]}"
    for root in CACHE_ROOTS:
        d = root / key
        if _usable(d, targets):
            return d
    root = _writable_root()
    final = root / key
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        for t in targets:
            cmd = [cc, *t.flags, "-o", str(tmp / t.name), str(t.source)]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
            except (OSError, subprocess.SubprocessError) as e:
                raise LoadGenError(f"compiling {t.source.name} failed: {e}") from e
            if r.returncode != 0:
                raise LoadGenError(f"compiling {t.source.name} failed ({' '.join(cmd)}):\n{r.stderr.strip()}")
        tmp.chmod(0o755)
        try:
            tmp.rename(final)
        except OSError:
            # Another process finished the same build first (use its directory), or a broken
            # leftover sits there (replace it).
            if not _usable(final, targets):
                shutil.rmtree(final, ignore_errors=True)
                try:
                    tmp.rename(final)
                except OSError as e:
                    raise LoadGenError(f"cannot install native helpers into {final}: {e}") from e
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    return final


def ensure_built() -> NativeTools:
    """The exec-storm binaries, compiled on first use and cached (see the module docstring)."""
    d = build_cached(
        "native",
        [
            Target("tiny", SRC_DIR / "tiny.c", _tiny_flags()),
            Target("execstorm", SRC_DIR / "execstorm.c", ("-O2", "-Wall", "-pthread")),
        ],
    )
    return NativeTools(tiny=d / "tiny", execstorm=d / "execstorm")
