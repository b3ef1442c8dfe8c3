"""``swarmscope run`` with an outside recount of every neighbor window's datapath.

    python tests/neighbor_recount.py OUT.json run scenarios/neighbor_writes.yaml --set ...

The run as the CLI runs it, plus one listener on ``iteration_done`` (fired on the controller
after a window is reconciled and before the next one clears the datapath). It counts what the
kernel holds with tools of its own, not the code's ``verified``: ``bpftool map dump id`` of each
worker's XDP map (the id the worker reported; any process's map is readable by id as root), or
``ip -n NS -4 -j neigh show dev DEV`` for target: kernel. Per window and node it writes the
entries found and whether they are exactly the node's share (10.64.0.0 + start + 1 ...), with
XDP values dmac 02:00:<ip bytes>; none at all for mode watch_only (received, not
programmed). OUT.json: a list of {"window", "node", "expected", "found", "exact"}.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from typing import Any

BASE = ipaddress.IPv4Address("10.64.0.0")


def _bytes(field: Any) -> bytes:
    return bytes(int(x, 16) for x in field)


def _packed(dotted: str) -> bytes:
    return ipaddress.IPv4Address(dotted).packed


def xdp_entries(map_id: int) -> dict[str, bytes]:
    out = subprocess.run(
        ["bpftool", "map", "dump", "id", str(map_id), "--json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    return {str(ipaddress.IPv4Address(_bytes(e["key"]))): _bytes(e["value"]) for e in json.loads(out)}


def kernel_entries(netns: str, dev: str) -> dict[str, bytes]:
    out = subprocess.run(
        ["ip", "-n", netns, "-4", "-j", "neigh", "show", "dev", dev],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    return {e["dst"]: b"" for e in json.loads(out or "[]")}


def recount(result: Any, found: list[dict[str, Any]]) -> None:
    # watch_only receives the entries without programming them: the datapath must stay empty.
    programs = (result.extra.get("neighbors") or {}).get("mode") != "watch_only"
    for node, w in (result.extra.get("workers") or {}).items():
        start, n = int(w["start"]), int(w["generated"]) if programs else 0
        want = {str(BASE + start + 1 + i) for i in range(n)}
        if w.get("map_id") is not None:
            got = xdp_entries(int(w["map_id"]))
            # struct neigh_value: dmac 02:<gen 0>:<the key's 4 bytes>, the rest as written
            values_ok = all(v[:6] == b"\x02\x00" + _packed(k) for k, v in got.items())
        else:
            got = kernel_entries(str(w["netns"]), str(w["device"]))
            values_ok = True
        found.append(
            {
                "window": result.window_id,
                "node": node,
                "expected": n,
                "found": len(got),
                "exact": set(got) == want and values_ok,
            }
        )


def main() -> int:
    out_path, argv = sys.argv[1], sys.argv[2:]
    from gevent import monkey

    monkey.patch_all()  # first, as the CLI's run does

    from swarmscope.app import cli
    from swarmscope.app.process import SwarmscopeProcess

    found: list[dict[str, Any]] = []
    make_controller = SwarmscopeProcess._make_controller

    def with_recount(self: SwarmscopeProcess, run_id: str | None) -> None:
        make_controller(self, run_id)
        self.events.iteration_done.add_listener(lambda *, result, **_: recount(result, found))

    SwarmscopeProcess._make_controller = with_recount  # type: ignore[method-assign]
    try:
        return int(cli.main(argv) or 0)
    finally:
        with open(out_path, "w") as f:
            json.dump(found, f)


if __name__ == "__main__":
    sys.exit(main())
