"""Test helpers for the probe tests: throw-away cgroup v2 children, exact exec loops, and
``swarmscope probe`` as a process.

with temp_cgroup("a") as cg:
    exec_in_cgroup(cg, 7)      # exactly 7 execs counted under cgroup_id(cg)
with probe_cli(["--controller", addr], {"SWARMSCOPE_TOKEN": tok}) as proc: ...
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

from swarmscope.core.sys import cgroups

# Moves itself into cgroup $1, then runs /bin/true exactly $2 times. Everything else it uses
# (echo, [, $((...))) is a dash/bash builtin, so the only execs inside the cgroup are the
# /bin/true ones; the exec of the shell itself happens before the move, in the parent cgroup.
EXEC_LOOP = (
    'echo $$ > "$1/cgroup.procs" || exit 99; i=0; '
    'while [ "$i" -lt "$2" ]; do /bin/true || exit 98; i=$((i+1)); done'
)


def temp_cgroup(
    name: str, parent: pathlib.Path | None = None
) -> contextlib.AbstractContextManager[pathlib.Path]:
    """A throw-away child cgroup named after this test process (see swarmscope.core.sys.cgroups)."""
    return cgroups.temp_cgroup(f"swarmscope-test-{os.getpid()}-{name}", parent)


def exec_in_cgroup(cg: pathlib.Path, n: int) -> None:
    subprocess.run(["/bin/sh", "-c", EXEC_LOOP, "sh", str(cg), str(n)], check=True, timeout=60)


@contextlib.contextmanager
def probe_cli(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``swarmscope probe ARGS`` as a process (stderr piped; ``env`` on top of ours), killed if
    still running at the end."""
    cmd = [sys.executable, "-m", "swarmscope", "probe", *args]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


# map_updates_in_cgroup: argv: cgroup dir, N element updates, M batch entries. Prints
# "<pid> <map id>", then keeps
# the map fd open until stdin closes (the pump resolves fd -> map id while it is open).
MAP_UPDATES = """
import os, struct, sys
from swarmscope.core.sys import bpf
open(sys.argv[1] + "/cgroup.procs", "w").write("0")
n, m = int(sys.argv[2]), int(sys.argv[3])
fd = bpf.map_create(bpf.BPF_MAP_TYPE_HASH, "ss_test", 4, 8, 4096)
for i in range(n):
    bpf.map_update_elem(fd, struct.pack("=I", i), struct.pack("=Q", i))
keys = b"".join(struct.pack("=I", 10000 + i) for i in range(m))
vals = b"".join(struct.pack("=Q", i) for i in range(m))
assert bpf.map_update_batch(fd, keys, vals, 4, 8) == m
print(os.getpid(), bpf.fd_map_id(os.getpid(), fd), flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def map_updates_in_cgroup(cg: pathlib.Path, n: int, m: int) -> Iterator[tuple[int, int]]:
    """MAP_UPDATES in cgroup ``cg``: its (pid, map id) once it has written; it exits after the block."""
    child = subprocess.Popen(
        [sys.executable, "-c", MAP_UPDATES, str(cg), str(n), str(m)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        pid, mid = (int(x) for x in child.stdout.readline().split())
        yield pid, mid
    finally:
        child.communicate("", timeout=10)
