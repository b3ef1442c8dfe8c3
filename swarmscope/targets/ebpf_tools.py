"""Third-party eBPF tools whose own cost the ``ebpf_cost`` scenario measures (the top-ebpf write-up).

    tools = start_tools(["seccomp", "open"], cgroup_id=4711)   # bpftrace scripts, attached
    tools[0].programs      # {prog_id: "sys_enter"}: found through the process's prog fds
    stop_tools(tools)

The write-up started Inspektor Gadget's seccomp advisor and trace-open gadgets on a pod and ran
a busy loop in it. Here the same two jobs are Debian's bpftrace, each a script that watches one
node (a cgroup) the way the gadgets watch one pod:

- ``seccomp``: ours, standing in for the seccomp advisor (``ig`` v0.35 has none; its ``audit
  seccomp`` is another gadget and needs a kprobe): ``raw_syscalls:sys_enter``, counted per
  syscall number for the node's cgroup (the advisor builds a profile from exactly that).
- ``open``: trace-open: enter and exit of ``open`` and ``openat`` (the gadget's four programs),
  printing each of the node's opens with its result.
- ``ig-open``: Inspektor Gadget's own ``ig trace open`` (v0.35, the cached build), host-wide.

As in the write-up, each program runs for every event of the host and checks the cgroup
inside, so even an idle node's tools cost something. Tools run as root in their own session;
their output is drained to a file so a full pipe never stalls them.

Caveats: bpftrace names a tracepoint program after the tracepoint (15 characters kept), with
no BTF for the full name; ``ig`` needs its own pid namespace here (docs/platform.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from swarmscope.core.errors import SetupError
from swarmscope.core.paths import TOOLS as REPO_TOOLS
from swarmscope.core.sys.gobuild import build_script, tool_binary

SECCOMP = "tracepoint:raw_syscalls:sys_enter /cgroup == CG/ { @syscalls[args->id] = count(); }"
OPEN = " ".join(
    f"tracepoint:syscalls:sys_enter_{s} /cgroup == CG/ {{ @fname[tid] = args->filename; }} "
    f"tracepoint:syscalls:sys_exit_{s} /@fname[tid] != 0/ "
    f'{{ printf("{s} %s %d\\n", str(@fname[tid]), args->ret); delete(@fname[tid]); }}'
    for s in ("open", "openat")
)
SCRIPTS = {"seccomp": (SECCOMP, 1), "open": (OPEN, 4)}  # script, programs it loads
TOOLS = (*SCRIPTS, "ig-open")
START_TIMEOUT_S = 60.0
IG_VERSION = os.environ.get("SWARMSCOPE_IG_VERSION", "v0.35.0")


def ig_binary(build: bool = True) -> Path:
    """The cached ``ig`` (tools/build_ig.sh's); built on first use when ``build`` (2-4 min, a
    progress line on stderr), by the kinds' ``prepare`` before any window: ``ig-open`` here
    and the exec storm's ``tracer: ig`` (controller/tracers/presets.py)."""
    cache = Path(os.environ.get("SWARMSCOPE_CACHE", "/var/cache/swarmscope"))
    path = cache / "tools" / f"ig-{IG_VERSION}" / "ig"
    if not build and not (path.is_file() and os.access(path, os.X_OK)):
        raise SetupError(f"ig {IG_VERSION} is not built ({path}): run tools/build_ig.sh")
    script = build_script("ig", REPO_TOOLS / "build_ig.sh")
    env = {**os.environ, "IG_VERSION": IG_VERSION}
    return Path(tool_binary(f"Inspektor Gadget ig {IG_VERSION}", path, [script], "2-4 min", env=env))


@dataclass
class Tool:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    programs: dict[int, str] = field(default_factory=dict)  # prog id -> name

    @property
    def pid(self) -> int:
        return self.proc.pid


def _argv(name: str, cgroup_id: int) -> list[str]:
    if name in SCRIPTS:
        bt = shutil.which("bpftrace")
        if not bt:
            raise SetupError("bpftrace is not installed: run tools/setup.sh (Debian package bpftrace)")
        return [bt, "-B", "line", "-e", SCRIPTS[name][0].replace("CG", str(int(cgroup_id)))]
    if name == "ig-open":
        ig = ig_binary()
        return ["unshare", "--pid", "--fork", "--mount-proc", str(ig), "trace", "open", "--host"]
    raise SetupError(f"unknown eBPF tool {name!r}; known: {', '.join(TOOLS)}")


def _expected(name: str) -> int:
    return SCRIPTS[name][1] if name in SCRIPTS else 4


def _owned(pids: set[int]) -> dict[int, str]:
    from swarmscope.probes import bpfstats

    out: dict[int, str] = {}
    for prog_id, owners in bpfstats.owners().items():
        if any(pid in pids for pid, _ in owners):
            out[prog_id] = ""
    if out:
        progs = bpfstats.list_programs(maps=False)
        out = {i: progs[i].name for i in out if i in progs}
    return out


def _tree(pid: int) -> set[int]:
    """``pid`` and its descendants (ig runs under unshare's fork)."""
    found, todo = {pid}, [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            for kid in Path(f"/proc/{p}/task/{p}/children").read_text().split():
                found.add(int(kid))
                todo.append(int(kid))
    return found


def tool_pids(tool: Tool) -> set[int]:
    """The tool's processes (itself and its children)."""
    return _tree(tool.pid)


def start_tool(name: str, cgroup_id: int, logdir: Path) -> Tool:
    """Start one tool and return when all its programs are loaded and attached."""
    log = logdir / f"{name}.log"
    with open(log, "wb") as fh:
        try:
            proc = subprocess.Popen(
                _argv(name, cgroup_id), stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        except OSError as e:
            raise SetupError(f"cannot start eBPF tool {name}: {e}") from e
    tool = Tool(name, proc, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    want = _expected(name)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SetupError(f"eBPF tool {name} exited ({proc.returncode}): {log.read_text()[-600:]}")
        tool.programs = _owned(_tree(proc.pid))
        # bpftrace prints "Attaching N probes..." before attaching: wait for all programs too.
        if len(tool.programs) >= want:
            return tool
        time.sleep(0.2)
    stop_tools([tool])
    raise SetupError(f"eBPF tool {name} did not load its {want} programs in {START_TIMEOUT_S:g} s")


def start_tools(names: list[str], cgroup_id: int) -> list[Tool]:
    logdir = Path(tempfile.mkdtemp(prefix="swarmscope-ebpf-tools-"))
    tools: list[Tool] = []
    try:
        for n in names:
            tools.append(start_tool(n, cgroup_id, logdir))
    except BaseException:
        stop_tools(tools)
        raise
    return tools


def stop_tools(tools: list[Tool]) -> None:
    for t in tools:
        if t.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(t.proc.pid, signal.SIGINT)
    for t in tools:
        try:
            t.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(t.proc.pid, signal.SIGKILL)
            t.proc.wait(timeout=10)
    for t in tools:
        shutil.rmtree(t.log.parent, ignore_errors=True)
