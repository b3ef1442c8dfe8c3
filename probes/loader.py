"""The short-lived loader of the light probe: compile and load one program with BCC, pin it, exit.

    python -m swarmscope.probes.loader neigh_events /sys/fs/bpf/ss-probe-1-neigh_events-ab -- -DSS_FAMILY=2
    # prints the manifest (JSON) and exits 0; the program stays loaded, attached and readable

Run by :func:`swarmscope.probes.pinned.load` in a child process, so BCC and LLVM (over 100 MiB)
live only for the seconds a compile takes, never in the long-lived probe. Into the pin
directory it puts, for every tracepoint program BCC attached: ``prog_<func>`` (the program),
``link_<func>`` (a BPF link on the tracepoint: pinned, it keeps the program attached after this
process exits), every map the programs use as ``map_<name>`` (the kernel's name, at most 15
characters; bpffs refuses "." in names). It prints the manifest (functions, tracepoints, map
layouts) as one JSON line; bpffs holds pins only, so the reader takes every layout from the
kernel (``map_info``) again.

Caveats: tracepoint programs only (``TRACEPOINT_PROBE``); XDP programs are attached per
interface by their program modules and are not carried by the light probe. BCC's own
perf-event attachment is removed before the link is made, so an event is never counted twice;
an event in the microseconds between the two is not counted (no window is open during a load).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from swarmscope.errors import ProbeError, SwarmscopeError
from swarmscope.probes import bcc_env
from swarmscope.probes.bpfstats import prog_map_ids
from swarmscope.sys import bpf


def pin(b: Any, pin_dir: str) -> dict[str, Any]:
    """Pin BCC object ``b``'s tracepoint programs (as links) and their maps under ``pin_dir``."""
    os.makedirs(pin_dir, exist_ok=True)
    manifest: dict[str, Any] = {"funcs": {}, "maps": {}}
    for tp in list(b.tracepoint_fds):
        category, event = tp.decode().split(":", 1)
        fname = f"tracepoint__{category}__{event}"
        fn = b.funcs[fname.encode()]
        b.detach_tracepoint(tp)  # before the link: the program must not run twice per event
        link = bpf.tracepoint_link(fn.fd, category, event)
        try:
            bpf.obj_pin(fn.fd, f"{pin_dir}/prog_{fname}")
            bpf.obj_pin(link, f"{pin_dir}/link_{fname}")
        finally:
            os.close(link)
        manifest["funcs"][fname] = {"tracepoint": f"{category}:{event}"}
        for mid in prog_map_ids(fn.fd):
            mfd = bpf.map_fd_by_id(mid)
            if mfd is None:
                continue
            try:
                info = bpf.map_info(mfd)
                name = info.name.decode()
                if name not in manifest["maps"]:
                    bpf.obj_pin(mfd, f"{pin_dir}/map_{name}")
                    manifest["maps"][name] = {
                        "type": info.type,
                        "key_size": info.key_size,
                        "value_size": info.value_size,
                        "max_entries": info.max_entries,
                    }
            finally:
                os.close(mfd)
    if not manifest["funcs"]:
        raise ProbeError("the program has no tracepoint function to pin")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="swarmscope.probes.loader", description=__doc__.split("\n\n")[0])
    ap.add_argument("program")
    ap.add_argument("pin_dir")
    ap.add_argument("cflags", nargs="*")
    args = ap.parse_args(argv)
    try:
        b = bcc_env.load_program(args.program, list(args.cflags))
        try:
            manifest = pin(b, args.pin_dir)
        finally:
            b.cleanup()  # closes BCC's fds; the pins keep programs, links and maps
    except SwarmscopeError as e:  # one line: the probe puts it in its own error
        print(f"loader: {e}", file=sys.stderr)
        return 1
    manifest["program"] = args.program
    json.dump(manifest, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
