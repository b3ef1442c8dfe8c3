"""The real probe (BCC, exec_count) against the real fleet: a reconnect mid-window keeps the
exact count, a close that asks for a drain gets one sentinel exec on each CPU (seen by bpftrace,
never counted), and the fleet over mTLS admits only a probe with a certificate its CA signed.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from fakeprobe import FakeProbe
from probe_helpers import exec_in_cgroup, temp_cgroup
from tls_helpers import make_pki

from swarmscope.controller.fleet import Fleet
from swarmscope.core.errors import FleetError
from swarmscope.core.sys.cgroups import cgroup_id
from swarmscope.core.sys.sentinel import new_prefix, online_cpus
from swarmscope.core.tls import TLSFiles, channel_credentials, channel_options
from swarmscope.probes.agent import ProbeAgent
from swarmscope.v1 import probe_pb2 as pb

TOKEN = "real-probe-token-0123"


class Running:
    def __init__(self, agent: ProbeAgent):
        self.agent, self.error = agent, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.agent.run_forever()
        except BaseException as e:  # kept for the test to assert on
            self.error = e

    def stop(self) -> None:
        self.agent.stop()
        self.thread.join(15)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_real_probe_reconnect_mid_window_keeps_exact_count() -> None:
    fleet = Fleet(TOKEN, liveness_s=3.0)
    fleet.start()
    run = Running(
        ProbeAgent(fleet.address, TOKEN, "real-node", ["exec_count"], probe_id="real-1", backoff_s=0.2)
    )
    try:
        fleet.wait_for_probes(hosts={"real-node"}, timeout_s=60)  # BCC compiles first
        with temp_cgroup("rc") as cg:
            node = [pb.NodeInfo(name="n1", cgroup_id=cgroup_id(cg), cgroup_path=str(cg))]
            assert fleet.open_window("run", "w-rc", {"real-node": node}, programs=["exec_count"]) == {}
            exec_in_cgroup(cg, 40)
            first = run.agent.session_id
            call = run.agent._call
            assert call is not None
            call.cancel()  # the connection drops mid-window
            deadline = time.monotonic() + 20
            while run.agent.session_id == first and time.monotonic() < deadline:
                time.sleep(0.05)
            assert run.agent.session_id != first, "the probe did not reconnect"
            exec_in_cgroup(cg, 60)
            readings, missing = fleet.close_window("run", "w-rc", timeout_s=20)
        assert missing == []
        (r,) = readings
        assert r.node == "n1" and r.error == "" and r.counters["exec"] == 100
        assert fleet.take_reconnects("w-rc") == {"real-1@real-node": 1}
    finally:
        run.stop()
        fleet.stop()
    assert run.error is None


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_a_close_with_a_drain_runs_sentinels_on_each_cpu_of_the_probes_node() -> None:
    prefix, cpus = new_prefix(), online_cpus()
    prog = (
        f'tracepoint:sched:sched_process_exec /strncmp(comm, "{prefix}", {len(prefix)}) == 0/ '
        '{ printf("%s %d\\n", comm, cpu); } '
        # bpftrace checks for its stop signal only when a poll of its output returns: without an
        # event after the signal it sat in epoll_wait past the 30 s below, 1 run in 3.
        'interval:ms:100 { printf(""); }'
    )
    bpftrace = shutil.which("bpftrace")
    assert bpftrace, "bpftrace is installed by tools/setup.sh"
    tracer = subprocess.Popen([bpftrace, "-B", "line", "-e", prog], stdout=subprocess.PIPE, text=True)
    fleet = Fleet(TOKEN, liveness_s=3.0)
    fleet.start()
    run = Running(ProbeAgent(fleet.address, TOKEN, "real-node", ["exec_count"], probe_id="real-d"))
    try:
        assert tracer.stdout is not None
        assert "Attaching" in tracer.stdout.readline()
        fleet.wait_for_probes(hosts={"real-node"}, timeout_s=60)  # BCC compiles first
        with temp_cgroup("dr") as cg:
            node = [pb.NodeInfo(name="real-node", cgroup_id=cgroup_id(cg), cgroup_path=str(cg))]
            assert fleet.open_window("run", "w-1", {"real-node": node}, programs=["exec_count"]) == {}
            exec_in_cgroup(cg, 30)
            (r1,), missing = fleet.close_window("run", "w-1", timeout_s=20, drain=(prefix, 100, 3))
            time.sleep(1.5)  # its rounds 1 and 2 come 0.5 s, then 1 s later
            # The next window ends the rounds of a drain: of 7, only the first runs here.
            assert fleet.open_window("run", "w-2", {"real-node": node}, programs=["exec_count"]) == {}
            (r2,), missing2 = fleet.close_window("run", "w-2", timeout_s=20, drain=(prefix, 200, 7))
            assert fleet.open_window("run", "w-3", {"real-node": node}, programs=["exec_count"]) == {}
            time.sleep(1.5)
        assert missing == missing2 == []
        # The sentinels ran in the probe's own cgroup: the node's count is the storm's only.
        assert (r1.error, r1.counters["exec"], r2.counters["exec"]) == ("", 30, 0)
        n = len(cpus)
        assert r1.drained == list(range(100, 100 + 3 * n)) and r2.drained == list(range(200, 200 + 7 * n))
        tracer.terminate()
        out, _ = tracer.communicate(timeout=30)
        seen = dict(line.split() for line in out.splitlines() if line.startswith(prefix))
        want = {f"{prefix}{100 + r * n + i}": str(cpu) for r in range(3) for i, cpu in enumerate(cpus)}
        want |= {f"{prefix}{200 + i}": str(cpu) for i, cpu in enumerate(cpus)}
        assert seen == want, out
    finally:
        if tracer.poll() is None:
            tracer.kill()
        tracer.wait()
        run.stop()
        fleet.stop()
    assert run.error is None


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_pki(Path(tmp_path_factory.mktemp("pki")))


def test_mtls_admits_only_probes_with_a_signed_certificate(pki: dict[str, str]) -> None:
    server = TLSFiles(cert=pki["server.crt"], key=pki["server.key"], ca=pki["ca.crt"])
    fleet = Fleet(TOKEN, tls=server)
    fleet.start()
    try:
        good = TLSFiles(cert=pki["client.crt"], key=pki["client.key"], ca=pki["ca.crt"])
        p = FakeProbe(fleet.address, TOKEN, "host-a", credentials=channel_credentials(good)).start()
        fleet.wait_for_probes(1, timeout_s=10)
        assert fleet.open_window("r", "w", {"host-a": [pb.NodeInfo(name="n1", cgroup_id=1)]}) == {}
        readings, missing = fleet.close_window("r", "w", timeout_s=10)
        assert missing == [] and [r.node for r in readings] == ["n1"]
        p.stop()
        for who, files in {
            "no client cert": TLSFiles(ca=pki["ca.crt"]),
            "cert of another CA": TLSFiles(
                cert=pki["stranger.crt"], key=pki["stranger.key"], ca=pki["ca.crt"]
            ),
        }.items():
            q = FakeProbe(fleet.address, TOKEN, "host-x", credentials=channel_credentials(files))
            with pytest.raises(Exception) as ei:
                q.register()
            assert "UNAVAILABLE" in str(ei.value) or "handshake" in str(ei.value).lower(), who
            q.stop()
        # A plaintext probe does not get through either.
        plain = FakeProbe(fleet.address, TOKEN, "host-y")
        with pytest.raises(Exception, match="UNAVAILABLE"):
            plain.register()
        plain.stop()
        assert [x.host for x in fleet.probes(alive_only=False)] == ["host-a"]
    finally:
        fleet.stop()


def test_agent_over_mtls_and_wrong_server_name_refused(pki: dict[str, str]) -> None:
    from test_probe_agent import FakeProgram, fake_factory  # the same stand-in programs

    server = TLSFiles(cert=pki["server.crt"], key=pki["server.key"], ca=pki["ca.crt"])
    fleet = Fleet(TOKEN, tls=server)
    fleet.start()
    try:
        client = TLSFiles(cert=pki["client.crt"], key=pki["client.key"], ca=pki["ca.crt"])
        run = Running(
            ProbeAgent(fleet.address, TOKEN, "tls-node", ["f"], tls=client,
                       program_factory=fake_factory({"f": FakeProgram("f")}))
        )  # fmt: skip
        try:
            fleet.wait_for_probes(hosts={"tls-node"}, timeout_s=20)
        finally:
            run.stop()
        # The server's certificate names 127.0.0.1 and localhost only: a probe told to expect
        # another name (an impostor's certificate for that name) refuses the connection.
        wrong = TLSFiles(cert=pki["client.crt"], key=pki["client.key"], ca=pki["ca.crt"], server_name="evil")
        agent = ProbeAgent(fleet.address, TOKEN, "n", ["f"], tls=wrong, retries=0,
                           program_factory=fake_factory({"f": FakeProgram("f")}))  # fmt: skip
        with pytest.raises(FleetError, match="unreachable"):
            agent.run_forever()
        assert channel_options(wrong) == [("grpc.ssl_target_name_override", "evil")]
    finally:
        fleet.stop()
