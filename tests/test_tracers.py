"""Tracers under test: line parsing on recorded output, config keys, and real tracers.

The real-tracer tests run bpftrace (Debian) and Inspektor Gadget's ig v0.35 (built once by
tools/build_ig.sh, cached under /var/cache/swarmscope) against exactly K execs made inside a
fresh cgroup v2 child, i.e. a simulated node, and check the per-node count the adapter reports.
"""

from __future__ import annotations

import os
import pathlib
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import prebuilt
import pytest

from swarmscope.controller.tracers import (
    TRACER_FIELDS,
    NodeKey,
    TracerResult,
    make_tracer,
    presets,
    tracer_cross_check,
)
from swarmscope.controller.tracers.base import DEFAULT_LOST_REGEX, command_argv, tracer_config
from swarmscope.controller.tracers.command import CommandTracer
from swarmscope.controller.tracers.parse import LineParser, json_path
from swarmscope.controller.tracers.selfcheck import exec_in_cgroup
from swarmscope.core.config import Schema
from swarmscope.core.errors import ConfigError, SetupError, TracerError
from swarmscope.core.sys.cgroups import cgroup2_mount, cgroup_id, temp_cgroup
from swarmscope.targets.ebpf_tools import ig_binary

NODES = [
    NodeKey("n1", cgroup_id=4711, comm="ss-n1"),
    NodeKey("n2", cgroup_id=4712, comm="ss-node-with-a-long-name"),
]

# Recorded from bpftrace 0.17 running BPFTRACE_PROGRAM on this machine (plus its start-up noise).
BPFTRACE_LINES = [
    "Attaching 1 probe...",
    "ERROR: Unknown error -1: couldn't set RLIMIT_MEMLOCK for bpftrace. If your program is not "
    'loading, you can try "ulimit -l 8192" to fix the problem',
    "ss-n1 4711",
    "ss-n1 4711",
    "true 4712",  # attributed by cgroup even though comm is not the node's
    "ss-sync-a3f12 1",  # sentinel
    "Lost 555 events",
    "kworker/u4:1 1",  # another process on the host
    "Web Content 4711",  # comm with a space
    "ss-node-with-a- 1",  # comm truncated by the kernel to 15 chars
]

# The shape of ig v0.35 `trace exec --host -o json` records (event and loss warning).
IG_LINES = [
    '{"runtime":{},"k8s":{},"timestamp":1,"mountnsid":4026531841,"pid":10,"ppid":9,'
    '"uid":0,"gid":0,"loginuid":4294967295,"sessionid":4294967295,"retval":0,"comm":"ss-n1",'
    '"args":["/tmp/x/ss-n1"]}',
    '{"type":"warn","message":"lost 17 samples"}',
    '{"comm":"ss-sync-a3f3","pid":3}',
    '{"comm":"bash","pid":4}',
    "not json at all",
]


def test_regex_parser_on_recorded_bpftrace_lines() -> None:
    p = LineParser(
        NODES, match=presets.BPFTRACE_MATCH, lost_regex=DEFAULT_LOST_REGEX, sentinel_prefix="ss-sync-a3f"
    )
    kinds = [p.feed(line) for line in BPFTRACE_LINES]
    assert [k.kind for k in kinds] == [
        "noise",
        "noise",
        "event",
        "event",
        "event",
        "sentinel",
        "lost",
        "other",
        "event",
        "other",  # the node's comm, but cgroup 1 is not the node's: another run's storm
    ]
    assert [k.node for k in kinds if k.kind == "event"] == ["n1", "n1", "n2", "n1"]
    # Without cgroup ids, comm attributes, truncated to the kernel's 15 characters.
    by_comm = LineParser([NodeKey("n2", comm="ss-node-with-a-long-name")], match=presets.BPFTRACE_MATCH)
    assert by_comm.feed("ss-node-with-a- 1").node == "n2"
    assert kinds[5].sentinel == 12  # greedy: sentinel 12, not 1
    assert kinds[6].lost == 555


def test_json_parser_on_ig_lines() -> None:
    p = LineParser(NODES, json_field="comm", lost_regex=DEFAULT_LOST_REGEX, sentinel_prefix="ss-sync-a3f")
    kinds = [p.feed(line) for line in IG_LINES]
    assert [k.kind for k in kinds] == ["event", "lost", "sentinel", "other", "noise"]
    assert kinds[0].node == "n1" and kinds[1].lost == 17 and kinds[2].sentinel == 3


def test_json_path_and_attribution_by_cgroup_in_json() -> None:
    assert json_path({"a": {"b": [5, {"c": 7}]}}, "a.b.1.c") == 7
    assert json_path({"a": 1}, "a.x") is None
    p = LineParser(NODES, json_field="k8s.cgroup")
    assert p.feed('{"k8s": {"cgroup": 4712}}').node == "n2"
    assert p.feed('{"k8s": {"cgroup": "4711"}}').node == "n1"
    assert p.feed('{"k8s": {}}').kind == "noise"


def test_nodes_a_tracer_cannot_attribute_are_refused_at_start() -> None:
    p = LineParser(NODES, json_field="comm")
    assert p.unattributable([NodeKey("a", cgroup_id=5), NodeKey("b", comm="x")]) == ["a"]
    p = LineParser(NODES, match=presets.BPFTRACE_MATCH)
    assert p.unattributable([NodeKey("a", cgroup_id=5), NodeKey("b", comm="x"), NodeKey("c", 0, "")]) == ["c"]
    t = CommandTracer(["sleep", "60"], json_field="comm")
    with pytest.raises(TracerError, match="cannot attribute"):
        t.start("w", [NodeKey("a", cgroup_id=5)])


def test_node_group_and_custom_lost_regex() -> None:
    p = LineParser(NODES, match=r"node=(?P<node>\S+)", lost_regex=r"dropped=(\d+)")
    assert p.feed("exec node=n2 pid=3").node == "n2"
    assert p.feed("exec node=n9 pid=3").kind == "other"
    assert p.feed("stats dropped=41").lost == 41


# kubectl-gadget trace exec -o json, recorded on the real cluster (tests/test_igcluster.py), trimmed.
IG_CLUSTER_LINE = (
    '{"runtime":{"runtimeName":"containerd","containerName":"worker"},"k8s":{"node":"NODE",'
    '"namespace":"rc-ig","podName":"rcig-swarmscope-workers-x2v9q","podLabels":{'
    '"app.kubernetes.io/component":"COMPONENT","app.kubernetes.io/name":"swarmscope"},'
    '"containerName":"worker"},"timestamp":1795834945294518204,"type":"normal","pid":23724,'
    '"comm":"COMM","pcomm":"execstorm","args":["COMM"]}'
)


def test_ig_cluster_lines_count_for_the_node_of_a_worker_pod() -> None:
    nodes = [NodeKey("rn-0", comm="sab12-rn-0"), NodeKey("rn-1", comm="sab12-rn-1")]
    p = LineParser(nodes, match=presets.IG_CLUSTER_MATCH, sentinel_prefix="ss-sync-a3f")

    def feed(node: str, component: str, comm: str) -> tuple[str, str | None]:
        line = IG_CLUSTER_LINE.replace("NODE", node).replace("COMPONENT", component)
        res = p.feed(line.replace("COMM", comm))
        return res.kind, res.node

    assert feed("rn-1", "workers", "sab12-rn-1") == ("event", "rn-1")
    # Every exec of the worker's container is its node's: the burst's launcher too (the kernel
    # counts it in the worker's cgroup, and so does generated).
    assert feed("rn-0", "workers", "execstorm") == ("event", "rn-0")
    assert feed("rn-0", "probes", "sh") == ("noise", None)  # another pod of the release
    assert feed("rn-7", "workers", "sab12-rn-0") == ("other", None)  # a node outside the window
    assert feed("rn-0", "controller", "ss-sync-a3f4") == ("sentinel", None)
    lost = LineParser(nodes, match=presets.IG_CLUSTER_MATCH, lost_regex=presets.IG_CLUSTER_LOST_REGEX)
    assert lost.feed('{"k8s":{"node":"rn-1"},"type":"warn","message":"lost 81 samples"}').lost == 81
    gap = 'level=warning msg="rn-0           | expected seq 21167, got 21785, 618 messages dropped"'
    assert lost.feed(gap).lost == 618


def test_ig_cluster_argv_traces_the_controllers_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "rc-ig")
    assert presets.ig_cluster_argv("/kg") == ["/kg", "trace", "exec", "-o", "json", "-n", "rc-ig"]
    monkeypatch.delenv("POD_NAMESPACE")
    assert presets.ig_cluster_argv("/kg") == ["/kg", "trace", "exec", "-o", "json", "-A"]


def _schema() -> Schema:
    return Schema(TRACER_FIELDS, cross_checks=[tracer_cross_check])


def test_config_keys_command_as_string_or_list(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(
        "tracer: command\n"
        "tracer_command: [bpftrace, -e, 'tracepoint:a:b { printf(\"%s\\n\", comm); }']\n"
        "tracer_match: '^(?P<comm>\\S+)$'\n"
    )
    cfg = _schema().load(file=f, env={})
    assert command_argv(cfg.tracer_command)[2].startswith("tracepoint:a:b {")
    # From --set the command is one string, split like a shell (commas inside survive).
    cfg = _schema().load(
        file=f, env={}, sets=["tracer_command=bpftrace -e 'x { printf(\"%s %d\", comm, pid); }'"]
    )
    assert command_argv(cfg.tracer_command) == ["bpftrace", "-e", 'x { printf("%s %d", comm, pid); }']
    assert make_tracer(tracer_config(tracer="none")) is None


def test_config_errors_are_all_listed(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(
        "tracer: command\ntracer_match: '(unclosed'\ntracer_lost_regex: 'lost'\ntracer_stall_s: -1\n"
    )
    with pytest.raises(ConfigError) as e:
        _schema().load(file=f, env={})
    keys = {p.key for p in e.value.problems}
    assert {"tracer_match", "tracer_lost_regex", "tracer_stall_s"} <= keys
    f.write_text("tracer: command\n")
    with pytest.raises(ConfigError) as e:
        _schema().load(file=f, env={})
    assert {p.key for p in e.value.problems} == {"tracer_command", "tracer_match"}
    f.write_text("tracer: dtrace\n")
    with pytest.raises(ConfigError):
        _schema().load(file=f, env={})


def test_tracer_that_exits_at_once_fails_start_with_its_output() -> None:
    t = CommandTracer(
        ["sh", "-c", "echo 'cannot attach: permission denied' >&2; exit 7"], match="(?P<comm>x)"
    )
    with pytest.raises(TracerError, match="permission denied"):
        t.start("w", NODES)


def test_missing_tracer_binary_is_a_tracer_error() -> None:
    t = CommandTracer(["/nonexistent/tracer-xyz"], match="(?P<comm>x)")
    with pytest.raises(TracerError, match="cannot start"):
        t.start("w", NODES)


@pytest.mark.slow
def test_tracer_that_never_traces_times_out() -> None:
    t = CommandTracer(["sleep", "60"], match="(?P<comm>x)", ready_timeout_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(TracerError, match="no sentinel"):
        t.start("w", NODES)
    assert time.monotonic() - t0 < 15  # and the sleep was killed with its group


# --------------------------------------------------------------------------- real tracers


@pytest.fixture
def node_cgroup() -> Iterator[tuple[pathlib.Path, int]]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups and load BPF")
    try:
        cgroup2_mount()
    except SetupError:
        pytest.skip("kernel lacks a cgroup v2 mount")
    with temp_cgroup("ss-tracer-test") as cg:
        yield cg, cgroup_id(cg)


def node_binary(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    """/bin/true under the node's own name, so comm carries it (for comm-only tracers)."""
    p = tmp_path / name
    p.symlink_to(pathlib.Path("/bin/true").resolve())
    return p


def assert_exact(res: TracerResult, node: str, k: int) -> None:
    """Every one of the node's k execs is reported or admitted lost, and nothing else is counted.

    Only valid when the tracer's "lost" is about the node's cgroup and the sentinels (a program
    filtered in the kernel, as _filtered_bpftrace): then reported + lost - sentinels_lost == k.
    """
    assert res.error == "", res
    assert res.lost is not None, res
    assert res.per_node[node] + res.lost - res.sentinels_lost == k, res


def exact_or_retry(window: Callable[[int], TracerResult], node: str, k: int, tries: int = 3) -> TracerResult:
    """For host-wide tracers (ig has no in-kernel cgroup filter): exactly k with no loss.

    Their "lost" counts every exec on the host, so it cannot be set against the node's k. A
    window that admits loss (other work on a shared machine) is run again, at most ``tries``
    times; the count itself is never excused.
    """
    for attempt in range(tries):
        res = window(attempt)
        assert res.error == "", res
        assert res.lost is not None, res
        if res.lost == 0:
            assert res.per_node[node] == k, res
            return res
        print(f"attempt {attempt}: host-wide loss {res.lost}, running the window again")
    raise AssertionError(f"host-wide loss in all {tries} windows: {res}")


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_bpftrace_counts_exactly_k_execs_per_node(node_cgroup, tmp_path) -> None:
    cg, cgid = node_cgroup
    # The preset as a run uses it: its program is filtered in the kernel at start() to the
    # window's node cgroups and sentinels, so its "lost" is about these execs only.
    tracer = make_tracer(tracer_config(tracer="bpftrace", tracer_ready_timeout_s=60))
    assert tracer is not None
    # Two windows in a row with the same adapter: each starts its own tracer process.
    for window, k in (("w1", 400), ("w2", 150)):
        tracer.start(
            window, [NodeKey("n1", cgroup_id=cgid, comm="ss-n1"), NodeKey("idle", cgroup_id=1 << 62)]
        )
        exec_in_cgroup(cg, k, node_binary(tmp_path, f"ss-{window}"))
        res = tracer.stop()
        assert res.per_node["idle"] == 0
        assert_exact(res, "n1", k)
        # filtered in the kernel: no exec of the rest of the host reached it
        assert res.other == 0, res
        # Sentinel lines were printed (at least one per CPU) but never counted.
        assert res.lines >= res.per_node["n1"] + len(os.sched_getaffinity(0))
        print(f"bpftrace {window}: k={k} reported={res.per_node['n1']} lost={res.lost}")


def test_make_tracer_takes_the_sentinel_binary() -> None:
    t = make_tracer(tracer_config(tracer="bpftrace"), sentinel="/usr/bin/env")
    assert isinstance(t, CommandTracer) and t.sentinel == pathlib.Path("/usr/bin/env")
    assert make_tracer(tracer_config(tracer="none"), sentinel="/usr/bin/env") is None


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_bpftrace_stalled_reader_loses_and_says_so(node_cgroup, tmp_path) -> None:
    """A stalled reader: bpftrace drops events, and reported + its "Lost N" = the truth.

    The program filters in the kernel to this node's cgroup and the sentinels, so its loss
    count is about our K execs only (the rest of the host also execs). Buffers are made small
    (1 perf page per CPU, a 4 KiB pipe) so a modest K overflows them; the stall outlasts the
    storm and is lifted by stop().
    """
    cg, cgid = node_cgroup
    k = 2000
    prog = (
        f'tracepoint:sched:sched_process_exec /cgroup == {cgid} || strncmp(comm, "ss-sync-", 8) == 0/ '
        '{ printf("%s %llu\\n", comm, cgroup); }'
    )
    tracer = make_tracer(
        tracer_config(
            tracer="command",
            tracer_command=["env", "BPFTRACE_PERF_RB_PAGES=1", "bpftrace", "-B", "line", "-e", prog],
            tracer_match=presets.BPFTRACE_MATCH,
            tracer_stall_s=300.0,
            tracer_pipe_bytes=4096,
        )
    )
    assert tracer is not None
    tracer.start("w-stall", [NodeKey("n1", cgroup_id=cgid)])
    exec_in_cgroup(cg, k, node_binary(tmp_path, "ss-n1"))
    t0 = time.monotonic()
    res = tracer.stop()
    assert time.monotonic() - t0 < 30
    assert res.lost is not None and res.lost > 0, res
    assert res.per_node["n1"] < k
    # Every exec is either reported or admitted lost, once every CPU has been nudged.
    assert res.per_node["n1"] + res.lost - res.sentinels_lost == k, res
    # (res.other may be non-zero when another tracer's sentinels pass the comm filter: only
    # this tracer's own sentinels are excluded from it.)
    print(f"stall: k={k} reported={res.per_node['n1']} lost={res.lost} sentinels_lost={res.sentinels_lost}")


@pytest.fixture(scope="session")
def ig_path() -> pathlib.Path:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    return prebuilt.found(lambda: ig_binary(build=False))


@pytest.mark.root
@pytest.mark.bpf
@pytest.mark.slow
def test_ig_counts_exactly_k_execs_per_node(ig_path, node_cgroup, tmp_path) -> None:
    cg, cgid = node_cgroup
    k = 300
    comm = f"ss-i{secrets.token_hex(2)}"
    tracer = make_tracer(tracer_config(tracer="ig", tracer_ready_timeout_s=90))
    assert tracer is not None

    def window(attempt: int) -> TracerResult:
        tracer.start(f"w-ig{attempt}", [NodeKey("n1", cgroup_id=cgid, comm=comm)])
        (tmp_path / str(attempt)).mkdir()
        exec_in_cgroup(cg, k, node_binary(tmp_path / str(attempt), comm))
        return tracer.stop()

    res = exact_or_retry(window, "n1", k)
    print(f"ig: k={k} reported={res.per_node['n1']} lost(host-wide)={res.lost} other={res.other}")


GEVENT_SCRIPT = """
from gevent import monkey
monkey.patch_all()
import gevent, json, os, sys, time
from swarmscope.controller.tracers.selfcheck import exec_in_cgroup
from swarmscope.controller.tracers import NodeKey, make_tracer
from swarmscope.controller.tracers.base import tracer_config
import pathlib
cg, k = pathlib.Path(sys.argv[1]), int(sys.argv[2])
ticks = []
def ticker():
    while True:
        ticks.append(time.monotonic())
        gevent.sleep(0.01)
g = gevent.spawn(ticker)
t = make_tracer(tracer_config(tracer="bpftrace", tracer_command=json.loads(sys.argv[3])))
t.start("w", [NodeKey("n1", cgroup_id=os.stat(cg).st_ino)])
exec_in_cgroup(cg, k, pathlib.Path("/bin/true"))
s0 = time.monotonic()
res = t.stop()
s1 = time.monotonic()
g.kill()
print(json.dumps({"n1": res.per_node["n1"], "lost": res.lost, "sentinels_lost": res.sentinels_lost,
                  "ticks_in_stop": sum(1 for x in ticks if s0 <= x <= s1), "stop_s": s1 - s0}))
"""


@pytest.mark.root
@pytest.mark.bpf
def test_bpftrace_inside_a_gevent_patched_process(node_cgroup, tmp_path) -> None:
    """Every Locust process is gevent-patched: the reader must still be a real thread, and the
    hub must keep running (other greenlets tick) while stop() drains."""
    import json

    cg, cgid = node_cgroup
    k = 200
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            GEVENT_SCRIPT,
            str(cg),
            str(k),
            json.dumps(_filtered_bpftrace(cgid, rb_pages=None)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["n1"] + r["lost"] - r["sentinels_lost"] == k, r
    # stop() takes >= 0.1 s (it waits for the pipe to be empty twice, 50 ms apart); at a 10 ms
    # tick the ticker must have run during it, i.e. stop() did not block the hub.
    assert r["ticks_in_stop"] >= 3, r


def _filtered_bpftrace(cgid: int, rb_pages: int | None = 1) -> list[str]:
    """bpftrace counting only this cgroup and the sentinels (so "lost" is about them only).

    rb_pages=1 makes its perf buffers tiny (loss on purpose); None keeps bpftrace's default.
    """
    prog = (
        f'tracepoint:sched:sched_process_exec /cgroup == {cgid} || strncmp(comm, "ss-sync-", 8) == 0/ '
        '{ printf("%s %llu\\n", comm, cgroup); }'
    )
    env = [] if rb_pages is None else ["env", f"BPFTRACE_PERF_RB_PAGES={rb_pages}"]
    return [*env, "bpftrace", "-B", "line", "-e", prog]


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_read_rate_limits_the_reader_and_accounting_holds(node_cgroup) -> None:
    cg, cgid = node_cgroup
    k, rate = 1500, 100.0
    t = CommandTracer(_filtered_bpftrace(cgid), match=presets.BPFTRACE_MATCH, read_rate=rate, pipe_bytes=4096)
    t.start("w-rate", [NodeKey("n1", cgroup_id=cgid)])
    t0 = time.monotonic()
    exec_in_cgroup(cg, k, pathlib.Path("/bin/true"))
    time.sleep(0.5)
    elapsed = time.monotonic() - t0
    read_during = t._lines  # lines the throttled reader took while the storm ran
    res = t.stop()
    # The reader held to the rate (slack: lines already read before t0, one buffered batch).
    assert read_during <= rate * elapsed + 50, (read_during, elapsed)
    assert res.per_node["n1"] + res.lost - res.sentinels_lost == k, res
    print(
        f"rate: k={k} read_during={read_during} in {elapsed:.1f}s",
        f"reported={res.per_node['n1']} lost={res.lost}",
    )


@pytest.mark.root
@pytest.mark.bpf
def test_tracer_dying_mid_window_is_an_error_not_a_count(node_cgroup) -> None:
    cg, cgid = node_cgroup
    t = CommandTracer(_filtered_bpftrace(cgid), match=presets.BPFTRACE_MATCH)
    t.start("w-die", [NodeKey("n1", cgroup_id=cgid)])
    exec_in_cgroup(cg, 20, pathlib.Path("/bin/true"))
    assert t._proc is not None
    os.killpg(t._proc.pid, 9)
    t._proc.wait(timeout=10)
    res = t.stop()
    assert "exited early" in res.error
    assert res.per_node["n1"] <= 20


@pytest.mark.root
@pytest.mark.bpf
def test_tracer_check_command() -> None:
    exe = pathlib.Path(sys.executable).parent / "swarmscope"
    k = 300

    def window(attempt: int) -> TracerResult:
        out = subprocess.run(
            [str(exe), "tracer-check", "--tracer", "bpftrace", "--execs", str(k)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        fig = {
            m[0]: int(m[1])
            for m in re.findall(r"^(execs \(truth\)|reported|lost \(own\))\s+(\d+)", out.stdout, re.M)
        }
        sentinels = re.search(r"sentinels among them: (\d+)", out.stdout)
        acc = re.search(r"^reported\+lost (\d+)  vs truth (\d+): (\w+)", out.stdout, re.M)
        assert fig.keys() == {"execs (truth)", "reported", "lost (own)"} and sentinels and acc, out.stdout
        assert fig["execs (truth)"] == k, out.stdout
        # The printed sum is the sum of the printed figures.
        assert int(acc[1]) == fig["reported"] + fig["lost (own)"] - int(sentinels[1]), out.stdout
        if fig["lost (own)"] == 0:
            assert acc[3] == "exact", out.stdout
        return TracerResult(
            {"node": fig["reported"]}, fig["lost (own)"], 0, 0, [], sentinels_lost=int(sentinels[1])
        )

    exact_or_retry(window, "node", k)
