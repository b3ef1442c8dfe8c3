"""``swarmscope tracer-check``: run a tracer under test against exactly K execs in a fresh cgroup.

    swarmscope tracer-check --tracer bpftrace --execs 5000
    swarmscope tracer-check --tracer ig --execs 40000 --procs 2 --set tracer_stall_s=300
    swarmscope tracer-check --tracer bpftrace --execs 3000 --set tracer_read_rate=500

Prints the truth (K), what the tracer reported for the node, what it said it lost (host-wide)
and whether reported + lost accounts for K. It is the quickest way to see a tracer's
behaviour (and the transport-pressure knobs) on a machine without a whole scenario run.

Caveats: needs root and cgroup v2. The execs are of ``--binary`` (default /bin/true, ≈1k/s
per core; a tiny static binary is 3x faster) run through a symlink named after the node, so
comm-only tracers (ig) can attribute them. ``lost`` is host-wide: other execs on the host
count in it too.
"""

from __future__ import annotations

import argparse
import pathlib
import secrets
import subprocess
import sys
import tempfile
import time

from swarmscope.controller.tracers.base import (
    TRACER_FIELDS,
    NodeKey,
    TracerConfig,
    make_tracer,
    tracer_cross_check,
)
from swarmscope.core.config import Schema
from swarmscope.core.errors import SetupError
from swarmscope.core.sys.cgroups import cgroup_id, temp_cgroup

_EXEC_LOOP = (
    "import os, sys\n"
    "open(sys.argv[1] + '/cgroup.procs', 'w').write(str(os.getpid()))\n"
    "for _ in range(int(sys.argv[2])):\n"
    "    os.waitpid(os.posix_spawn(sys.argv[3], [sys.argv[3]], {}), 0)\n"
)


def exec_in_cgroup(cg: pathlib.Path, k: int, binary: pathlib.Path, procs: int = 1) -> None:
    """Exactly ``k`` execs of ``binary`` inside ``cg``, split over ``procs`` helper processes.

    Each helper joins the cgroup first, so its own exec (of Python) is outside it.
    """
    shares = [k // procs + (1 if i < k % procs else 0) for i in range(procs)]
    ps = [
        subprocess.Popen([sys.executable, "-c", _EXEC_LOOP, str(cg), str(n), str(binary)])
        for n in shares
        if n
    ]
    for p in ps:
        if p.wait(timeout=600) != 0:
            raise SetupError(f"exec helper failed with status {p.returncode}")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tracer-check", help="run a tracer under test against exactly K execs in a fresh cgroup"
    )
    p.add_argument("--tracer", default="bpftrace", help="bpftrace, ig, stream or command (default bpftrace)")
    p.add_argument("--execs", type=int, default=2000, help="K, the execs to make (default 2000)")
    p.add_argument("--procs", type=int, default=1, help="parallel exec helpers (default 1)")
    p.add_argument("--binary", default="/bin/true", help="binary to exec (default /bin/true)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any tracer_* key")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    schema = Schema(TRACER_FIELDS, cross_checks=[tracer_cross_check], cls=TracerConfig)
    named = any(s.startswith("tracer=") for s in args.set)  # --set tracer= wins, and is named so
    cfg = schema.load(
        sets=[f"tracer={args.tracer}", *args.set], set_labels={} if named else {"tracer": "--tracer"}
    )
    assert isinstance(cfg, TracerConfig)
    tracer = make_tracer(cfg)
    if tracer is None:
        print("tracer is none: nothing to check")
        return 0
    with temp_cgroup("ss-tracer-check") as cg, tempfile.TemporaryDirectory() as tmp:
        cgid = cgroup_id(cg)
        comm = f"ss-c{secrets.token_hex(2)}"
        binary = pathlib.Path(tmp) / comm
        binary.symlink_to(pathlib.Path(args.binary).resolve())
        t0 = time.monotonic()
        tracer.start("check", [NodeKey("node", cgroup_id=cgid, comm=comm)])
        ready = time.monotonic() - t0
        t1 = time.monotonic()
        exec_in_cgroup(cg, args.execs, binary, args.procs)
        storm = time.monotonic() - t1
        t2 = time.monotonic()
        res = tracer.stop()
        stop = time.monotonic() - t2
    k, got = args.execs, res.per_node["node"]
    lost = res.lost
    print(f"tracer        {tracer.name}  (ready in {ready:.2f} s, stop/drain {stop:.2f} s)")
    print(f"execs (truth) {k}  at {k / storm:.0f}/s")
    print(f"reported      {got}  ({100.0 * got / k:.1f} %)")
    print(f"lost (own)    {lost}  host-wide; sentinels among them: {res.sentinels_lost}")
    print(f"other events  {res.other}  (rest of the host)   lines {res.lines}")
    if lost is not None:
        acc = got + lost - res.sentinels_lost
        verdict = "exact" if acc == k else ("covers (host-wide loss)" if acc > k else "SHORT")
        print(f"reported+lost {acc}  vs truth {k}: {verdict}")
    for w in res.warnings[:5]:
        print(f"warning       {w[:160]}")
    if res.error:
        print(f"error         {res.error}")
        return 1
    return 0
