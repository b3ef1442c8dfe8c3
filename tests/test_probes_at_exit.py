"""probes_at_exit: what a stopping controller tells its probes. ``shutdown`` (the default: one
machine, probes started for the run) sends Shutdown and the probe's run_forever returns;
``keep`` (what `swarmscope controller`, the chart's command, sets) only ends the sessions, so a
long-lived probe stays up and keeps dialling for the next controller. A real controller process
object (swarmscope.app.process) with its fleet on loopback, the real probe agent with a stand-in
program; and the chart command's own arguments.
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

import pytest
from agent_helpers import FakeProgram, fake_factory

from swarmscope.app.commands.roles import controller_argv, sweep_sets
from swarmscope.app.process import SwarmscopeProcess
from swarmscope.kinds import get_kind
from swarmscope.probes.agent import ProbeAgent

TOKEN = "probes-at-exit-token-0123"
pytestmark = pytest.mark.timeout(120)


def _controller(tmp_path: Path, at_exit: str) -> SwarmscopeProcess:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    cfg = get_kind("exec_storm").schema.load(
        env={},
        sets=[
            f"out={tmp_path / 'results'}",
            "probe=external",
            f"token_file={token}",
            "grpc_bind=127.0.0.1:0",
            f"probes_at_exit={at_exit}",
        ],
    )
    return SwarmscopeProcess.make(cfg, get_kind("exec_storm"), role="master")


@pytest.mark.slow
@pytest.mark.parametrize("at_exit", ["shutdown", "keep"])
def test_a_stopping_controller_stops_its_probes_only_when_told(tmp_path: Path, at_exit: str) -> None:
    proc = _controller(tmp_path, at_exit)
    agent = ProbeAgent(
        f"127.0.0.1:{proc.fleet.port}",
        TOKEN,
        "pae-node",
        ["f"],
        retries=200,
        backoff_s=0.1,
        max_backoff_s=0.2,
        program_factory=fake_factory({"f": FakeProgram("f")}),
    )
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            agent.run_forever()
        except BaseException as e:  # kept for the assert
            errors.append(e)

    run = threading.Thread(target=serve, daemon=True)
    run.start()
    try:
        proc.fleet.wait_for_probes(hosts={"pae-node"}, timeout_s=30)
        first = agent.session_id
        assert first
        proc.close("ok", write_report=False)
        run.join(5)
        if at_exit == "shutdown":
            assert not run.is_alive() and errors == []  # told to stop: returned, no error
        else:
            # Still up, dialling: its session ended, it was never told to stop.
            assert run.is_alive() and errors == []
            assert agent.session_id == first  # no controller to register with since
    finally:
        agent.stop()
        run.join(10)
        if not proc._closed:
            proc.close("ok", write_report=False)


def test_the_chart_command_keeps_probes_on_both_paths() -> None:
    args = argparse.Namespace(
        bind_host="127.0.0.1", web_login=False, locust_port=5557, web_host="127.0.0.1", web_port=8089,
        scenario="s.yaml", grpc_port=7001, metrics_port=9646, locust_args=[], workers=1,
    )  # fmt: skip
    argv = controller_argv(args, "exec_storm")
    assert argv[argv.index("--ss-probes-at-exit") + 1] == "keep"
    assert "probes_at_exit=keep" in sweep_sets(args)
    # The option exists with these two values, shutdown by default (one machine's runs).
    field = get_kind("exec_storm").schema.fields["probes_at_exit"]
    assert (field.default, field.choices) == ("shutdown", ("shutdown", "keep"))
