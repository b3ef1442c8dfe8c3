"""flow_count really attached (XDP) on the receiving end of a FlowNetns; the real generator sends.

Per flow, exactly: every 5-tuple the generator names got exactly the packets and bytes it was
sent, and no other flow exists. An undersized table counts the flows it could not insert as
drops (exactly: the table holds max_flows entries, the rest of the packets are drops). Namespaces
are always deleted; the program detaches on close.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from swarmscope.core.errors import ProbeError
from swarmscope.core.sys import cgroups
from swarmscope.probes.flowdigest import flow_digest
from swarmscope.probes.programs.base import get_program
from swarmscope.probes.programs.flow_count import FlowCount, flow_gauges, netns_path, parse_target
from swarmscope.workers.flow_gen import flow_key, sent_per_flow
from swarmscope.workers.flow_netns import FlowNetns


@dataclass
class _Node:
    name: str
    cgroup_id: int


def _gen(net: FlowNetns, *args: str) -> dict:
    return json.loads(net.exec([sys.executable, "-m", "swarmscope.workers.flow_gen", *args], 120))


@pytest.mark.root
@pytest.mark.bpf
def test_per_flow_counts_equal_what_was_sent() -> None:
    with FlowNetns("ss-fct") as net:
        prog = FlowCount()
        prog.load()
        try:
            prog.configure({"flow_count.targets": [net.target(7)], "flow_count.max_flows": 8192})
            before = prog.snapshot()[7]
            # 5000 flows, 3 rounds, stopped by nothing: 15000 packets of 100 bytes.
            res = _gen(net, "--flows", "5000", "--packets-per-flow", "3", "--frame-bytes", "100")
            after = prog.snapshot()[7]
            gauges = prog.window_gauges(0, 0, [_Node("n1", 7), _Node("other", 8)])
            got = prog.take_flows()
            # A second window after the drain: only its own flows.
            res2 = _gen(net, "--flows", "10", "--first", "70000", "--frame-bytes", "64")
            gauges2 = prog.window_gauges(0, 0, [_Node("n1", 7)])
            got2 = prog.take_flows()
        finally:
            prog.close()
        out = subprocess.run(
            ["ip", "-n", net.dst, "link", "show", net.dst_dev], capture_output=True, text=True
        )
        assert "xdp" not in out.stdout
    assert res["generated"] == 15000 and res["rounds"] == 3 and res["partial"] == 0
    want = {flow_key(i): (sent_per_flow(res, i), 100 * sent_per_flow(res, i)) for i in range(5000)}
    assert got == want
    d = {k: after[k] - before.get(k, 0) for k in after}
    tot = {"packets": 15000, "bytes": 1_500_000, "flows": 5000, "drops": 0, "other": 0}
    dev = f"flow.dev.{net.dst_dev}."
    assert d == {**{f"flow.{k}": v for k, v in tot.items()}, **{dev + k: v for k, v in tot.items()}}
    dg = float(flow_digest((k, p, b) for k, (p, b) in want.items()))  # what was sent, flow by flow
    n1 = {"flow.seen": 5000.0, "flow.hist.3": 5000.0, "flow.digest": dg}
    n1.update({dev + "seen": 5000.0, dev + "hist.3": 5000.0, dev + "digest": dg})
    assert gauges == {"n1": n1, "other": {"flow.seen": 0.0, "flow.digest": 0.0}}
    assert res2["generated"] == 10
    assert got2 == {flow_key(70000 + i): (1, 64) for i in range(10)}
    assert gauges2["n1"]["flow.seen"] == 10.0 and gauges2["n1"]["flow.hist.1"] == 10.0


@pytest.mark.root
@pytest.mark.bpf
def test_full_table_counts_drops() -> None:
    with FlowNetns("ss-fcd") as net:
        prog = FlowCount([net.target(9)], max_flows=16)  # start-up targets, undersized on purpose
        prog.load()
        try:
            res = _gen(net, "--flows", "100", "--packets-per-flow", "2")
            snap = prog.snapshot()[9]
            prog.window_gauges(0, 0, [])
            got = prog.take_flows()
        finally:
            prog.close()
    assert res["generated"] == 200
    assert len(got) == 16 and all(v == (2, 256) for v in got.values())
    assert snap["flow.flows"] == 16 and snap["flow.packets"] == 32 and snap["flow.drops"] == 200 - 32


def test_targets_and_options() -> None:
    assert parse_target("12:ns-a:veth0") == (12, "ns-a", "veth0")
    own = cgroups.pid_cgroup_rel("self")  # a container on a hybrid host announces its path
    assert parse_target(f"/{own}:ns-a:veth0") == (cgroups.pid_cgroup_id("self"), "ns-a", "veth0")
    assert parse_target("/ss-no-such-cgroup:ns-a:veth0") == (0, "ns-a", "veth0")  # another node's
    for bad in ("ns:dev", "x:ns:dev", "1:ns:"):
        with pytest.raises(ProbeError, match="not <cgroup id>"):
            parse_target(bad)
    for bad in ("1:..:dev", "1:a/b:dev", "1:.x:dev"):  # a name from the network is never a path
        with pytest.raises(ProbeError, match="not a network namespace name"):
            parse_target(bad)
    prog = get_program("flow_count")
    with pytest.raises(ProbeError, match="not per-window"):
        prog.configure({"flow_count.nope": 1})  # type: ignore[attr-defined]
    two = {("a", "b", 1, 2, 17): (3, 9), ("a", "b", 1, 3, 17): (1, 3)}
    assert flow_gauges(two) == {
        "flow.seen": 2.0,
        "flow.digest": float(flow_digest([(("a", "b", 1, 2, 17), 3, 9), (("a", "b", 1, 3, 17), 1, 3)])),
        "flow.hist.3": 1.0,
        "flow.hist.1": 1.0,
    }


@pytest.mark.root
@pytest.mark.bpf
def test_missing_namespace_is_skipped_and_bad_interface_fails() -> None:
    prog = FlowCount(["3:ss-fc-no-such-ns:x"])
    prog.load()  # not on this machine: another probe's target
    assert prog.snapshot() == {}
    prog.close()
    with FlowNetns("ss-fcx") as net:
        prog = FlowCount([f"3:{net.dst}:no-such-if"])
        with pytest.raises(ProbeError, match="attaching XDP"):
            prog.load()


# A worker in a pod: its namespaces are in its own mount namespace's /run/netns (a tmpfs here,
# an emptyDir there), invisible in the probe's /var/run/netns; it sends when told, then waits.
_POD = """
import json, sys
from swarmscope.workers.flow_netns import FlowNetns
with FlowNetns("ss-fcp") as net:
    print(net.dst, net.dst_dev, flush=True)
    sys.stdin.readline()
    gen = [sys.executable, "-m", "swarmscope.workers.flow_gen", "--flows", "300", "--packets-per-flow", "2"]
    print(net.exec(gen, 120).strip(), flush=True)
    sys.stdin.readline()
"""


@pytest.mark.root
@pytest.mark.bpf
def test_a_namespace_in_another_mount_namespace_is_reached_through_its_cgroup() -> None:
    """As in a worker pod (the chart's workers.flows): the target names a namespace this
    probe's /var/run/netns does not have; the probe finds it under /proc/<pid>/root of the
    target cgroup's process and counts every flow there, exactly."""
    with cgroups.temp_cgroup("ss-fcpod") as cg:
        sh = f'echo $$ > {cg}/cgroup.procs && mount -t tmpfs ss-netns /run/netns && exec "$0" -c "$1"'
        pod = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", sh, sys.executable, _POD],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert pod.stdin is not None and pod.stdout is not None
        try:
            dst, dev = pod.stdout.readline().split()
            cgid = cgroups.cgroup_id(cg)
            assert not os.path.exists(f"/var/run/netns/{dst}")
            assert netns_path(cgid, dst) == f"/proc/{pod.pid}/root/run/netns/{dst}"
            assert netns_path(cgid + 1, dst) is None  # another node's cgroup: skipped
            assert netns_path(cgid, "ss-fcp-gone") is None  # looked into, not there: deleted
            prog = FlowCount([f"{cgid}:{dst}:{dev}"], max_flows=1024)
            prog.load()
            try:
                before = prog.snapshot()[cgid]
                pod.stdin.write("send\n")
                pod.stdin.flush()
                res = json.loads(pod.stdout.readline())
                after = prog.snapshot()[cgid]
                gauges = prog.window_gauges(0, 0, [_Node("pod", cgid)])
            finally:
                prog.close()
        finally:
            pod.stdin.close()
            pod.wait(60)
    assert pod.returncode == 0
    assert res["generated"] == 600
    assert {k: after[k] - before[k] for k in ("flow.packets", "flow.flows", "flow.drops")} == {
        "flow.packets": 600, "flow.flows": 300, "flow.drops": 0
    }  # fmt: skip
    assert (gauges["pod"]["flow.seen"], gauges["pod"]["flow.hist.2"]) == (300.0, 300.0)
