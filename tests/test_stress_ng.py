"""``load: stress-ng``: Debian's stress-ng --exec as the exec storm's load, reconciled exactly.

Real stress-ng, real cgroups, real BPF: the kernel's count in the node equals stress-ng's own
bogo ops plus its one exec into the node, in both bounds (time, count), and through
``swarmscope run`` end to end.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import test_exec_storm as exec_storm_tests
from helpers import load_report, only_run_dir, run_cli

from swarmscope.core.errors import ConfigError, LoadGenError
from swarmscope.kinds import get_kind
from swarmscope.workers.nodes import create_sim_nodes
from swarmscope.workers.stress_ng import STARTUP_EXECS, StressNg, check_bounds, parse_yaml_metrics

pytestmark = [
    pytest.mark.root,
]


@pytest.fixture
def sng() -> Iterator[StressNg]:
    s = StressNg.create()
    yield s
    s.close()


# The exec storm tests' fixtures (the exec counter, a node group) and reader, shared.
exec_bpf = exec_storm_tests.exec_bpf
group = exec_storm_tests.group
counts = exec_storm_tests.kernel_counts


def test_parse_yaml_metrics() -> None:
    text = "metrics:\n    - stressor: exec\n      bogo-ops: 215\n      wall-clock-time: 1.031\n"
    assert parse_yaml_metrics(text) == (215, 1.031)
    with pytest.raises(LoadGenError):
        parse_yaml_metrics("---\nsystem-info:\n")


def test_bounds() -> None:
    with pytest.raises(LoadGenError) as e:
        check_bounds(0.5, 0, 0, 0)
    msg = str(e.value)
    assert "whole seconds" in msg and "instances=0" in msg and "max_execs=0" in msg
    with pytest.raises(LoadGenError, match="ops=-1"):
        check_bounds(1, 2, 10, -1)
    check_bounds(0.5, 2, 10, 100)  # a count bound needs no whole-second duration


def test_schema_cross_checks() -> None:
    kind = get_kind("exec_storm")
    with pytest.raises(ConfigError) as e:
        kind.schema.load(data={"load": "stress-ng", "burst_s": 0.5, "rate_per_node": 10})
    keys = {p.key for p in e.value.problems}
    assert {"burst_s", "rate_per_node"} <= keys
    with pytest.raises(ConfigError):
        kind.schema.load(data={"stress_ng_ops": 5})
    cfg = kind.schema.load(data={"load": "stress-ng", "burst_s": 0.5, "stress_ng_ops": 50})
    assert cfg.load == "stress-ng" and cfg.stress_ng_ops == 50


def test_binary_per_comm_is_one_root_owned_copy(sng: StressNg) -> None:
    a, b = sng.binary_for("sngtest-n1"), sng.binary_for("sngtest-n2")
    assert (a.name, b.name) == ("sngtest-n1", "sngtest-n2")
    sa, sb = a.stat(), b.stat()
    assert sa.st_ino == sb.st_ino and sa.st_nlink == 3 and sa.st_uid == 0 and sa.st_mode & 0o022 == 0
    assert sa.st_size == pathlib.Path(shutil.which("stress-ng") or "").stat().st_size
    with pytest.raises(LoadGenError):
        sng.binary_for("../x")


@pytest.mark.slow
@pytest.mark.bpf
def test_kernel_equals_bogo_ops_plus_its_own_exec(exec_bpf: Any, group: str, sng: StressNg) -> None:
    n1, n2 = create_sim_nodes(group, ["n1", "n2"], pids_max=256)
    # Count bound: exactly K bogo ops (batch of 1), and K + 1 execs in the kernel.
    before = counts(exec_bpf)
    r = sng.start_burst(n1, instances=2, ops=120, comm="sngtest-n1").wait()
    after = counts(exec_bpf)
    assert r.bogo_ops == 120 and r.startup_execs == STARTUP_EXECS == 1
    assert after.get(n1.cgroup_id, 0) - before.get(n1.cgroup_id, 0) == 121
    # Time bound, both nodes at once, as a window does: 1 s at the maximum rate.
    before = counts(exec_bpf)
    hs = [sng.start_burst(n, duration_s=1, instances=2, comm=f"sngtest-{n.name}") for n in (n1, n2)]
    rs = [h.wait() for h in hs]
    after = counts(exec_bpf)
    for n, res in zip((n1, n2), rs, strict=True):
        assert res.bogo_ops > 10, res
        assert after.get(n.cgroup_id, 0) - before.get(n.cgroup_id, 0) == res.bogo_ops + 1 == res.execs
        assert 0.9 < res.elapsed_s < 5, res


@pytest.mark.slow
@pytest.mark.bpf
def test_default_methods_count_failed_execs_as_bogo_ops(exec_bpf: Any, group: str, sng: StressNg) -> None:
    """Why the methods are pinned: stress-ng's defaults count deliberate exec failures too."""
    (n1,) = create_sim_nodes(group, ["n1"], pids_max=256)
    work = pathlib.Path(sng.root) / "default"
    work.mkdir()
    os.chown(work, sng.uid, sng.gid)
    cmd = ["stress-ng", "--exec", "1", "--exec-ops", "400", "--exec-max", "1", "--timeout", "60"]
    cmd += ["--metrics-brief", "--yaml", str(work / "m.yaml"), "--temp-path", str(work)]

    def enter() -> None:
        with open(n1.cgroup_path / "cgroup.procs", "w") as fh:  # type: ignore[operator]
            fh.write("0")
        os.setgroups([])
        os.setgid(sng.gid)
        os.setuid(sng.uid)

    before = counts(exec_bpf)
    subprocess.run(cmd, preexec_fn=enter, cwd=work, capture_output=True, timeout=120, check=True)
    after = counts(exec_bpf)
    ops, _ = parse_yaml_metrics((work / "m.yaml").read_text())
    kernel = after.get(n1.cgroup_id, 0) - before.get(n1.cgroup_id, 0)
    assert ops == 400
    # A quarter of the children exec a garbage file, an eighth an oversized argv/env (about
    # 37 % fail on purpose): about 250 of 400 succeed. Seen here: 180..322 under load; what the
    # test shows is that well under the 400 bogo ops are execs.
    assert 180 < kernel - 1 < 360, kernel


@pytest.mark.slow
@pytest.mark.bpf
def test_swarmscope_run_with_stress_ng(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    p = run_cli(
        "run", "scenarios/exec_storm.yaml", "--set", "load=stress-ng", "--set", "nodes=2",
        "--set", "iterations=2", "--set", "burst_s=1", "--set", "pause_s=0", "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    run_dir = only_run_dir(out)
    rep = load_report(run_dir)
    sec = rep["sections"]["exec_storm"]
    assert sec["generator"] == "stress-ng" and sec["load"] == "max"
    assert sec["stress_ng"]["command"].startswith("stress-ng --exec 2 --exec-fork-method vfork")
    bogo = 0
    for it in rep["points"][0]["iterations"]:
        detail = it["extra"]["stress_ng"]
        assert len(it["per_node"]) == 2
        for n in it["per_node"]:
            d = detail[n["node"]]
            assert d["bogo_ops"] > 10 and d["startup_execs"] == 1
            assert n["generated"] == d["bogo_ops"] + 1 == n["kernel"], n
            bogo += d["bogo_ops"]
        assert it["flags"] == [], it["flags"]
    assert sec["stress_ng"]["bogo_ops"] == bogo
    assert "stress-ng --exec 2" in (run_dir / "report.html").read_text()
