"""Issue 18, finding 5: the tracer under test gets an explicit environment, no SWARMSCOPE_TOKEN.

Before the fix the ``command`` tracer (and the stream agent) inherited the controller's whole
environment, the probes' token included. A real tracer process prints what it was given.
"""

from __future__ import annotations

import pytest

from swarmscope.controller.tracers.base import NodeKey, tracer_env
from swarmscope.controller.tracers.command import CommandTracer
from swarmscope.core.errors import TracerError

NODES = [NodeKey("n1", cgroup_id=4711)]  # attributed by cgroup


def test_command_tracer_does_not_inherit_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARMSCOPE_TOKEN", "s3cret-token-value")
    monkeypatch.setenv("SWARMSCOPE_OTHER", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    script = (
        'echo "token=[${SWARMSCOPE_TOKEN:-absent}] mine=[$MINE] '
        'ours=[$(env | grep -c -e ^SWARMSCOPE_ -e ^AWS_)] path=[${PATH:+set}]"; exit 7'
    )
    t = CommandTracer(["sh", "-c", script], match="(?P<cgroup>\\d+)", env={"MINE": "given"})
    with pytest.raises(TracerError) as ei:
        t.start("w", NODES)
    assert "token=[absent] mine=[given] ours=[0] path=[set]" in str(ei.value)
    assert "s3cret" not in str(ei.value)


def test_tracer_env_keeps_only_the_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARMSCOPE_TOKEN", "s3cret")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = tracer_env({"X": "1"})
    assert "SWARMSCOPE_TOKEN" not in env and env["LANG"] == "C.UTF-8" and env["X"] == "1"
    assert not [k for k in env if k.startswith("SWARMSCOPE_")]
