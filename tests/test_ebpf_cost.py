"""``ebpf_cost``: third-party eBPF tools' cost, busy loop against idle, checked against bpftool.

Real bpftrace scripts and ig, real BPF statistics: the per-program figures the scenario reports
are the kernel's, the same that ``bpftool prog show`` prints for the same ids, and the loop's
exec count reconciles exactly with the probe's.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
from types import SimpleNamespace
from typing import Any

import prebuilt
import pytest
from helpers import load_report, only_run_dir, run_cli

from swarmscope.controller.model import ProbeReading
from swarmscope.kinds.ebpf_cost.table import COLUMNS, per_window, runtime, text_table
from swarmscope.probes.bpfstats import BpfStats
from swarmscope.probes.programs.base import delta_by_node
from swarmscope.targets.ebpf_tools import ig_binary
from swarmscope.workers.ebpf_cost import CostDriver

pytestmark = [
    pytest.mark.root,
    pytest.mark.bpf,
]

HOST = SimpleNamespace(name="host", cgroup_id=0)


def bpftool(*args: str) -> Any:
    return json.loads(
        subprocess.run(["bpftool", *args, "-j"], capture_output=True, text=True, check=True).stdout
    )


def ours(stats: BpfStats, prog_id: int) -> dict[str, int]:
    snap = stats.snapshot()[0]
    return {
        k.rsplit(".", 1)[1]: v
        for k, v in snap.items()
        if k.startswith(f"prog.{prog_id}.") and "misses" not in k
    }


def test_runtime_format() -> None:
    assert [runtime(x) for x in (0, 171, 51_550, 215_518_600, 1_269_376_700)] == [
        "0s", "171ns", "51.55µs", "215.519ms", "1.269377s",
    ]  # fmt: skip


@pytest.mark.slow
def test_figures_match_bpftool_for_the_same_ids() -> None:
    prebuilt.found(lambda: ig_binary(build=False))  # built by `make tools`
    stats = BpfStats()
    stats.load()  # statistics on, as the probe turns them on
    driver = CostDriver(SimpleNamespace(tools=["seccomp", "open", "ig-open"]), prefix="tc-")
    try:
        tools = driver.info()["programs"]
        assert sorted(t["tool"] for t in tools) == ["ig-open"] * 4 + ["open"] * 4 + ["seccomp"]
        assert {t["name"] for t in tools if t["tool"] == "ig-open"} == {
            "ig_open_e", "ig_open_x", "ig_openat_e", "ig_openat_x",
        }  # fmt: skip
        before = stats.snapshot()
        res = driver.run_window("w", [driver.node.name], {"phase": "busy", "duration_s": 1.0})
        after = stats.snapshot()
        host = [ProbeReading("p", "host", delta_by_node(before, after, [HOST])["host"])]
        window = per_window(res[driver.node.name]["tools"], host, [], 1.0)
        assert res[driver.node.name]["loops"] > 0
        rows = {r["id"]: r for r in window["programs"]}
        assert len(rows) == 9
        for t in tools:
            pid = t["id"]
            # the window's figures are the kernel's counters, differenced
            k0, k1 = before[0], after[0]
            base = next(k.rsplit(".", 1)[0] for k in k1 if k.startswith(f"prog.{pid}."))
            assert rows[pid]["run_cnt"] == k1[f"{base}.run_cnt"] - k0.get(f"{base}.run_cnt", 0)
            assert rows[pid]["run_time_ns"] == k1[f"{base}.run_time_ns"] - k0.get(f"{base}.run_time_ns", 0)
            # ... and the same counters bpftool reads: bpftool's lies between two of our reads
            # (statistics are on, so every syscall on the host moves the seccomp program's count)
            lo = ours(stats, pid)
            bt = bpftool("prog", "show", "id", str(pid))
            hi = ours(stats, pid)
            assert lo["run_cnt"] <= bt.get("run_cnt", 0) <= hi["run_cnt"], (pid, lo, bt, hi)
            assert lo["run_time_ns"] <= bt.get("run_time_ns", 0) <= hi["run_time_ns"], (pid, lo, bt, hi)
            # identity and map memory: exactly bpftool's
            assert bt["id"] == pid and bt["type"] == t["type"] and t["name"].startswith(bt["name"])
            assert sorted(bt.get("map_ids", [])) == sorted(t["map_ids"])
            memlock = sum(bpftool("map", "show", "id", str(m))["bytes_memlock"] for m in t["map_ids"])
            assert t["map_memlock"] == memlock, (pid, t, memlock)
        seccomp = next(r for r in window["programs"] if r["tool"] == "seccomp")
        assert seccomp["run_cnt"] > 0 and seccomp["cpu_pct"] > 0
        assert text_table({"phase": "busy", **window}).splitlines()[2].split() == list(COLUMNS)
    finally:
        driver.close()
        stats.close()
    assert not pathlib.Path(str(driver.node.cgroup_path)).exists()


@pytest.mark.slow
def test_swarmscope_run_ebpf_cost(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    p = run_cli(
        "run", "scenarios/ebpf_cost.yaml", "--set", "duration_s=1", "--set", "tools=seccomp,open",
        "--set", "pause_s=0", "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    assert "CUMULRUNCOUNT" in p.stdout + p.stderr and "tail calls" in p.stdout + p.stderr
    run_dir = only_run_dir(out)
    rep = load_report(run_dir)
    busy, idle = (pt["iterations"][0] for pt in rep["points"])
    (loop,) = busy["per_node"]
    assert loop["generated"] == loop["kernel"] > 1 and busy["flags"] == []
    assert idle["per_node"][0]["generated"] == idle["per_node"][0]["kernel"] == 0
    sec = rep["sections"]["ebpf_cost"]
    b, i = sec["phases"]
    assert [b["phase"], i["phase"]] == ["busy", "idle"]
    assert b["loop"]["execs"] == loop["kernel"] and b["loop"]["syscalls"] > b["loop"]["execs"]
    assert i["loop"]["syscalls"] == 0 and i["loop"]["execs"] == 0
    assert len(b["programs"]) == 5 and all(r["run_cnt"] is not None for r in b["programs"])
    # the loop opens /dev/null (and its libraries) in the node: the trace-open exits ran
    opens = {r["name"]: r["run_cnt"] for r in b["programs"]}
    assert opens["sys_exit_openat"] > 0
    page = (run_dir / "report.html").read_text()
    assert "CUMULRUNTIME" in page and "tail calls" in page


def test_one_worker_only() -> None:
    from swarmscope.core.errors import ConfigError
    from swarmscope.kinds import get_kind

    kind = get_kind("ebpf_cost")
    with pytest.raises(ConfigError, match="one set of tools: one worker"):
        kind.schema.load(data={"mode": "distributed", "workers": 2})
    assert kind.schema.load(data={"mode": "distributed", "workers": 1}).workers == 1
    assert kind.schema.load(data={}).tools == ["seccomp", "ig-open"]
    cfg = kind.schema.load(data={})
    assert kind.shared(cfg, {"w1": {}}) == {}
    with pytest.raises(ConfigError, match="2 connected: ebpf_cost measures one machine"):
        kind.shared(cfg, {"w1": {}, "w2": {}})
