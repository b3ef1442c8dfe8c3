"""neigh_events and neigh_netlink through the registry, in a netns made here (always deleted):
N neighbor entries written by a shell in a test cgroup -> N creates counted by the tracepoints
for that cgroup and device, and N RTM_NEWNEIGH notifications counted on that interface; M
deletes -> M RTM_DELNEIGH."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Iterator

import pytest
from net_helpers import ip
from probe_helpers import temp_cgroup

from swarmscope.core.errors import ProbeError
from swarmscope.core.sys.cgroups import cgroup_id
from swarmscope.probes.programs.base import delta_by_cgroup, get_program
from swarmscope.probes.programs.neigh_events import NeighEvents
from swarmscope.probes.programs.neigh_netlink import NeighNetlink

# $1 cgroup dir, $2 netns, $3 device, $4 count, $5 "add" or "del": moves itself into the
# cgroup, then writes (or deletes) 10.77.0.10 .. 10.77.0.(9+count) with `ip neigh`.
WRITER = (
    'echo $$ > "$1/cgroup.procs" || exit 99; i=0; '
    'while [ "$i" -lt "$4" ]; do '
    '  if [ "$5" = add ]; then '
    '    ip -n "$2" neigh add 10.77.0.$((10+i)) lladdr 02:00:00:00:00:01 dev "$3" || exit 98; '
    '  else ip -n "$2" neigh del 10.77.0.$((10+i)) dev "$3" || exit 97; fi; '
    "  i=$((i+1)); done"
)


@contextlib.contextmanager
def netns_with_veth() -> Iterator[tuple[str, str]]:
    tag = secrets.token_hex(3)
    ns, dev = f"ss-test-nb-{tag}", f"ssn{tag}"
    try:
        ip("netns", "add", ns)
        ip("-n", ns, "link", "add", dev, "type", "veth", "peer", "name", f"ssp{tag}")
        for d in (dev, f"ssp{tag}"):
            ip("netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{d}.disable_ipv6=1")
            ip("-n", ns, "link", "set", d, "up")
        ip("-n", ns, "addr", "add", "10.77.0.1/24", "dev", dev)
        yield ns, dev
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def write(cg: object, ns: str, dev: str, n: int, op: str) -> None:
    subprocess.run(["/bin/sh", "-c", WRITER, "sh", str(cg), ns, dev, str(n), op], check=True, timeout=60)


def test_env_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARMSCOPE_NEIGH_FAMILY", "all")
    monkeypatch.setenv("SWARMSCOPE_NEIGH_NETNS", "ss-x")
    ev, nl = get_program("neigh_events"), get_program("neigh_netlink")
    assert isinstance(ev, NeighEvents) and not ev.counter.ipv4_only
    assert isinstance(nl, NeighNetlink) and nl.netns == "ss-x" and not nl.ipv4_only
    monkeypatch.setenv("SWARMSCOPE_NEIGH_FAMILY", "ipx")
    with pytest.raises(
        ProbeError,
        match=r"\$SWARMSCOPE_NEIGH_FAMILY \(neigh_events.family\): 'ipx' is not one of 'inet', 'all'",
    ):
        get_program("neigh_events")


@pytest.mark.root
def test_netlink_in_missing_netns_is_a_probe_error() -> None:
    name = f"ss-test-missing-{secrets.token_hex(3)}"
    prog = NeighNetlink(netns=name)
    try:
        with pytest.raises(ProbeError, match="RTMGRP_NEIGH"):
            prog.load()
    finally:
        created = subprocess.run(["ip", "netns", "del", name], capture_output=True).returncode == 0
    assert not created, "loading must not create the netns"


@pytest.mark.root
@pytest.mark.bpf
def test_registry_neigh_tracepoints_and_netlink_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    n, m = 23, 7
    with netns_with_veth() as (ns, dev), temp_cgroup("neigh") as cg:
        cg_id = cgroup_id(cg)
        monkeypatch.setenv("SWARMSCOPE_NEIGH_NETNS", ns)
        monkeypatch.delenv("SWARMSCOPE_NEIGH_FAMILY", raising=False)
        ev, nl = get_program("neigh_events"), get_program("neigh_netlink")
        ev.load()
        try:
            nl.load()
            try:
                b_ev, b_nl = ev.snapshot(), nl.snapshot()
                write(cg, ns, dev, n, "add")
                a_ev, a_nl = ev.snapshot(), nl.snapshot()
                write(cg, ns, dev, m, "del")
                c_nl = nl.snapshot()
            finally:
                nl.close()
        finally:
            ev.close()
    tp = delta_by_cgroup(b_ev, a_ev).get(cg_id, {})
    add = delta_by_cgroup(b_nl, a_nl).get(0, {})
    dele = delta_by_cgroup(a_nl, c_nl).get(0, {})
    print(f"tracepoints: {tp}\nnetlink after adds: {add}\nnetlink after deletes: {dele}")
    assert tp["neigh.create"] == n
    assert tp[f"neigh.create.dev.{dev}"] == n
    assert add["netlink.newneigh"] == n
    assert add[f"netlink.newneigh.dev.{dev}"] == n
    assert add.get("netlink.delneigh", 0) == 0
    assert dele[f"netlink.delneigh.dev.{dev}"] == m
    assert c_nl[0]["netlink.errors"] == 0
