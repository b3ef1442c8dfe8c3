"""The short-lived loader of the probe: compile and load one program with BCC, pin it, exit.

    python -m swarmscope.probes.loader neigh_events /sys/fs/bpf/ss-probe-1-neigh_events-ab -- -DSS_FAMILY=2
    python -m swarmscope.probes.loader --xdp pkt_count_xdp --ifaces ssb --netns ns-b --xdp-flags 2 \
        pkt_count /sys/fs/bpf/ss-probe-1-pkt_count-cd
    # prints the manifest (JSON) and exits 0; the program stays loaded, attached and readable

Run by :func:`swarmscope.probes.pinned.load` in a child process, so BCC and LLVM (over 100 MiB)
live only for the seconds a compile takes, never in the long-lived probe. Into the pin
directory it puts, for every tracepoint program BCC attached: ``prog_<func>`` (the program),
``link_<func>`` (a BPF link on the tracepoint: pinned, it keeps the program attached after this
process exits), every map of the object as ``map_<name>`` (the kernel's name, at most 15
characters; bpffs refuses "." in names). It prints the manifest (functions, tracepoints, map
layouts) as one JSON line; bpffs holds pins only, so the reader takes every layout from the
kernel (``map_info``) again.

With ``--xdp FUNC``, FUNC is loaded as an XDP program and attached to each of ``--ifaces``
(in ``--netns``, with ``--xdp-flags``, e.g. 2 = generic/skb mode) through a BPF link pinned
as ``link_xdp_<ifindex>``; removing the pin detaches it (pkt_count at start-up, flow_count per
window: one loader run per interface). Caveats: BCC's own
perf-event attachment is removed before the link is made, so an event is never counted twice;
an event in the microseconds between the two is not counted (no window is open during a load).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from typing import Any

from swarmscope.core.errors import ProbeError, SwarmscopeError
from swarmscope.core.sys import bpf
from swarmscope.probes import bcc_env


def _module_map_fds(b: Any) -> list[int]:
    """The fds of every map BCC object ``b`` made (libbcc's own table list). From BCC's fds, not
    by map id: BPF_MAP_GET_FD_BY_ID needs CAP_SYS_ADMIN, which the chart's probe lacks."""
    from bcc.libbcc import lib

    # libbcc exports these two without the Python binding declaring them: declare them here,
    # or ctypes passes the module pointer as a C int.
    lib.bpf_num_tables.argtypes, lib.bpf_num_tables.restype = [ctypes.c_void_p], ctypes.c_size_t
    lib.bpf_table_name.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.bpf_table_name.restype = ctypes.c_char_p
    fds = []
    for i in range(int(lib.bpf_num_tables(b.module))):
        name = lib.bpf_table_name(b.module, i)
        fd = int(lib.bpf_table_fd(b.module, name)) if name else -1
        if fd >= 0:
            fds.append(fd)
    return fds


def _pin_maps(b: Any, pin_dir: str, maps: dict[str, Any]) -> None:
    """Pin every map of BCC object ``b`` as ``map_<name>`` (the kernel's name), with its layout."""
    for fd in _module_map_fds(b):
        info = bpf.map_info(fd)
        name = info.name.decode()
        if name not in maps:
            bpf.obj_pin(fd, f"{pin_dir}/map_{name}")
            maps[name] = {
                "type": info.type,
                "key_size": info.key_size,
                "value_size": info.value_size,
                "max_entries": info.max_entries,
            }


def pin_xdp(
    b: Any, func: str, ifaces: list[str], netns: str | None, flags: int, pin_dir: str
) -> dict[str, Any]:
    """Load ``func`` of BCC object ``b`` as XDP, attach it to ``ifaces`` through pinned links."""
    import socket

    import bcc

    from swarmscope.probes.programs.pkt_count import in_netns

    os.makedirs(pin_dir, exist_ok=True)
    manifest: dict[str, Any] = {"funcs": {func: {"xdp": ifaces, "netns": netns}}, "maps": {}}
    try:
        fn = b.load_func(func.encode(), bcc.BPF.XDP)
    except Exception as e:  # BCC raises bare Exception
        raise ProbeError(f"loading {func} as XDP failed: {e}") from e
    bpf.obj_pin(fn.fd, f"{pin_dir}/prog_{func}")
    with in_netns(netns):
        for dev in ifaces:
            try:
                ifindex = socket.if_nametoindex(dev)
            except OSError as e:
                raise ProbeError(f"attaching XDP failed: no interface {dev!r}") from e
            link = bpf.xdp_link(fn.fd, ifindex, flags)
            try:
                bpf.obj_pin(link, f"{pin_dir}/link_xdp_{ifindex}")  # bpffs refuses "." (eth0.1)
            finally:
                os.close(link)
    _pin_maps(b, pin_dir, manifest["maps"])
    return manifest


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
    _pin_maps(b, pin_dir, manifest["maps"])
    if not manifest["funcs"]:
        raise ProbeError("the program has no tracepoint function to pin")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="swarmscope.probes.loader", description=__doc__.split("\n\n")[0])
    ap.add_argument("--xdp", metavar="FUNC", help="load FUNC as XDP and attach it to --ifaces")
    ap.add_argument("--ifaces", default="", help="with --xdp: comma-separated interfaces")
    ap.add_argument("--netns", default=None, help="with --xdp: the interfaces' ip netns name")
    ap.add_argument("--xdp-flags", type=int, default=0, help="with --xdp: XDP flags (2 = generic)")
    ap.add_argument("program")
    ap.add_argument("pin_dir")
    ap.add_argument("cflags", nargs="*")
    args = ap.parse_args(argv)
    try:
        b = bcc_env.load_program(args.program, list(args.cflags))
        try:
            if args.xdp:
                ifaces = [i for i in args.ifaces.split(",") if i]
                manifest = pin_xdp(b, args.xdp, ifaces, args.netns, args.xdp_flags, args.pin_dir)
            else:
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
