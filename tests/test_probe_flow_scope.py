"""Two real probes on one kernel, each given one flow-storm node: each attaches XDP only to its
own node's receiving interface and counts exactly that node's flows, though both are given both
targets (as every probe of a distributed run is). A window that names the other probe's interface
fails, naming the holder. Real gRPC (stand-in controllers on 127.0.0.1), real XDP, real generator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from agent_helpers import TOKEN, AgentThread, TestController, serve_controller
from probe_helpers import temp_cgroup

from swarmscope.core.sys.cgroups import cgroup_id
from swarmscope.probes.agent import ProbeAgent
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.workers.flow_netns import FlowNetns

pytestmark = [pytest.mark.root, pytest.mark.bpf]


def _xdp_prog(net: FlowNetns) -> int:
    """The id of the XDP program on ``net``'s receiving interface (0: none)."""
    out = subprocess.run(["ip", "-n", net.dst, "-j", "link", "show", net.dst_dev], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return int(((json.loads(out)[0].get("xdp") or {}).get("prog") or {}).get("id", 0))


@contextmanager
def _probe(name: str) -> Iterator[tuple[TestController, AgentThread]]:
    gen = serve_controller()
    ctl, addr = next(gen)
    run = AgentThread(ProbeAgent(addr, TOKEN, name, ["flow_count"], probe_id=name))
    try:
        ctl.wait_for("heartbeat", timeout=60)
        yield ctl, run
    finally:
        run.agent.stop()
        run.join(30)
        next(gen, None)


def _window(ctl: TestController, wid: str, node: pb.NodeInfo, targets: list[str]) -> pb.WindowAck:
    opts = {"flow_count.targets": ",".join(targets), "flow_count.max_flows": "4096"}
    ctl.send(open=pb.OpenWindow(run_id="r", window_id=wid, nodes=[node], options=opts))
    return ctl.wait_for("ack", timeout=120).ack  # the loader's compile: seconds under load


def test_each_probe_attaches_to_its_own_node_only() -> None:
    with ExitStack() as st:
        a, b = st.enter_context(FlowNetns("ss-fsa")), st.enter_context(FlowNetns("ss-fsb"))
        cga, cgb = st.enter_context(temp_cgroup("fsa")), st.enter_context(temp_cgroup("fsb"))
        na = pb.NodeInfo(name="node-a", cgroup_id=cgroup_id(cga), cgroup_path=str(cga))
        nb = pb.NodeInfo(name="node-b", cgroup_id=cgroup_id(cgb), cgroup_path=str(cgb))
        targets = [a.target(na.cgroup_id), b.target(nb.cgroup_id)]  # both, to both probes
        ctl_a, run_a = st.enter_context(_probe("probe-a"))
        ctl_b, _run_b = st.enter_context(_probe("probe-b"))
        ack_a, ack_b = _window(ctl_a, "w1", na, targets), _window(ctl_b, "w1", nb, targets)
        assert (ack_a.ok, ack_a.error, ack_b.ok, ack_b.error) == (True, "", True, "")
        prog_a, prog_b = _xdp_prog(a), _xdp_prog(b)
        assert prog_a > 0 and prog_b > 0 and prog_a != prog_b
        gen = [sys.executable, "-m", "swarmscope.workers.flow_gen", "--frame-bytes", "100"]
        sent_a = json.loads(a.exec([*gen, "--flows", "300", "--packets-per-flow", "2"], 120))
        more = ["--flows", "70", "--packets-per-flow", "3", "--first", "5000"]
        sent_b = json.loads(b.exec([*gen, *more], 120))
        assert (sent_a["generated"], sent_b["generated"]) == (600, 210)
        got = {}
        for ctl in (ctl_a, ctl_b):
            ctl.send(close=pb.CloseWindow(run_id="r", window_id="w1"))
            (r,), _done = ctl.window_result(timeout=30)
            got[r.node] = (r.error, r.probe_id, dict(r.counters), dict(r.gauges))
        for node, net, flows, ppf in (("node-a", a, 300, 2), ("node-b", b, 70, 3)):
            err, pid, counters, gauges = got[node]
            dev = f"flow.dev.{net.dst_dev}."
            tot = {"packets": flows * ppf, "bytes": 100 * flows * ppf, "flows": flows, "drops": 0, "other": 0}
            assert (err, pid) == ("", node.replace("node", "probe"))
            # Only its own interface: no other flow.dev.* counter, and exactly its own flows.
            want = {**{f"flow.{k}": v for k, v in tot.items()}, **{dev + k: v for k, v in tot.items()}}
            assert counters == want
            assert (gauges["flow.seen"], gauges[f"flow.hist.{ppf}"]) == (flows, flows)

        # Probe b told to take node a's interface: refused, naming the probe whose pins hold it.
        ack = _window(ctl_b, "w2", na, targets)
        assert not ack.ok
        held = f"{a.dst}/{a.dst_dev} already has an XDP program: program {prog_a} pinned by probe pid "
        pins = f"{os.getpid()} (/sys/fs/bpf/ss-probe-{os.getpid()}-flow_count-"
        assert held + pins in ack.error, ack.error
        assert (_xdp_prog(a), _xdp_prog(b)) == (prog_a, 0)  # a's still counting; b let go of its own

        ctl_a.send(shutdown=pb.Shutdown(reason="test over"))
        run_a.join(30)
        assert run_a.error is None and _xdp_prog(a) == 0  # a's probe held a's interface
