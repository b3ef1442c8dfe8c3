"""Pod attribution (probes/pods.py): kubelet cgroup paths and log directory names -> pod.

The index on fake kubelet directory trees; then a real probe agent (real BPF, real gRPC) counting
execs in a real cgroup laid out as the kubelet lays out a container's, named from such a tree:
its reading, its window span and its log name the pod. The real kubelet's layout is checked on
the real node (tests/test_realnode_chart.py).
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import pytest
from agent_helpers import TOKEN, AgentThread, serve_controller
from probe_helpers import exec_in_cgroup, temp_cgroup

from swarmscope.core.sys.otlpjson import attributes, spans_of, to_json
from swarmscope.probes.agent import ProbeAgent
from swarmscope.probes.bpfstats import ProgStats
from swarmscope.probes.pods import PodIndex, PodRef, parse_cgroup_path
from swarmscope.probes.top_ebpf import name_pods
from swarmscope.v1 import probe_pb2 as pb

UID = "0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f"
UID2 = "11111111-2222-3333-4444-555555555555"
CID = "4f" * 32
CID2 = "ab" * 32
PAUSE = "cd" * 32


def kubelet_tree(root: Path, pods: dict[tuple[str, str, str], dict[str, str]]) -> tuple[Path, Path]:
    """/var/log/pods/<ns>_<pod>_<uid>/<container>/ and /var/log/containers/<pod>_<ns>_<c>-<id>.log
    as the kubelet makes them: ``pods`` is {(ns, pod, uid): {container: id ("" = no link)}}."""
    pods_dir, ctrs_dir = root / "pods", root / "containers"
    ctrs_dir.mkdir(parents=True, exist_ok=True)
    for (ns, pod, uid), ctrs in pods.items():
        for ctr, cid in ctrs.items():
            d = pods_dir / f"{ns}_{pod}_{uid}" / ctr
            d.mkdir(parents=True, exist_ok=True)
            (d / "0.log").write_text("")
            if cid:
                (ctrs_dir / f"{pod}_{ns}_{ctr}-{cid}.log").symlink_to(d / "0.log")
    return pods_dir, ctrs_dir


@pytest.mark.parametrize(
    ("path", "want"),
    [
        (f"/ssrn1/kubepods/besteffort/pod{UID}/{CID}", (UID, CID)),  # cgroupfs, a cgroupRoot
        (f"/kubepods/pod{UID}/{CID}", (UID, CID)),  # Guaranteed QoS: no qos level
        (f"/kubepods/burstable/pod{UID}", (UID, "")),  # the pod's own cgroup
        (
            f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice"
            f"/cri-containerd-{CID}.scope",
            (UID, CID),
        ),  # systemd driver
        (f"/kubepods/besteffort/pod{UID.upper()}/{CID}", (UID, CID)),
        (f"/system.slice/pod{UID}/{CID}", None),  # not under kubepods
        ("/swarmscope/run-1/n1", None),
        ("/", None),
    ],
)
def test_parse_cgroup_path(path: str, want: tuple[str, str] | None) -> None:
    assert parse_cgroup_path(path) == want


def test_index_names_pods_and_containers(tmp_path: Path) -> None:
    pods_dir, ctrs_dir = kubelet_tree(tmp_path, {
        ("ssrn", "rn-workers-7d-6x", UID): {"worker": CID},
        ("web", "two-5f", UID2): {"nginx": CID2, "sidecar": ""},
    })  # fmt: skip
    idx = PodIndex(pods_dir, ctrs_dir)
    assert idx.available()
    idx.scan()
    ref = idx.lookup(f"/ssrn1/kubepods/besteffort/pod{UID}/{CID}")
    assert ref == PodRef("ssrn", "rn-workers-7d-6x", "worker", UID)
    assert str(ref) == "ssrn/rn-workers-7d-6x/worker"
    # Two containers: the linked one by its id; an unlinked id names the pod only.
    assert str(idx.lookup(f"/kubepods/burstable/pod{UID2}/{CID2}")) == "web/two-5f/nginx"
    assert str(idx.lookup(f"/kubepods/burstable/pod{UID2}/{'ee' * 32}")) == "web/two-5f"
    # A lone container is named without its link; the pause container and the pod cgroup are not.
    (ctrs_dir / f"rn-workers-7d-6x_ssrn_worker-{CID}.log").unlink()
    idx.scan()
    assert str(idx.lookup(f"/kubepods/besteffort/pod{UID}/{CID}")) == "ssrn/rn-workers-7d-6x/worker"
    assert str(idx.lookup(f"/kubepods/besteffort/pod{UID}")) == "ssrn/rn-workers-7d-6x"
    assert idx.lookup("/swarmscope/run-1/n1") is None


def test_index_rescans_a_miss_at_most_every_rescan_s(tmp_path: Path) -> None:
    pods_dir, ctrs_dir = kubelet_tree(tmp_path, {})
    idx = PodIndex(pods_dir, ctrs_dir, rescan_s=3600)
    path = f"/kubepods/besteffort/pod{UID}/{CID}"
    assert idx.lookup(path) is None  # the first miss scans
    kubelet_tree(tmp_path, {("ns", "late", UID): {"c": CID}})
    assert idx.lookup(path) is None  # scanned a moment ago: not again
    idx.rescan_s = 0
    assert str(idx.lookup(path)) == "ns/late/c"


def test_index_without_kubelet_dirs(tmp_path: Path) -> None:
    idx = PodIndex(tmp_path / "no-pods", tmp_path / "no-containers")
    assert not idx.available()
    assert idx.lookup(f"/kubepods/besteffort/pod{UID}/{CID}") is None


def test_pid_to_pod_and_top_ebpf_rows(tmp_path: Path) -> None:
    """of_pid reads /proc/<pid>/cgroup (v1 lines and the v2 one); top-ebpf names its owners' pods."""
    pods_dir, ctrs_dir = kubelet_tree(tmp_path, {("ssrn", "rn-probes-bhn2s", UID): {"probe": CID}})
    proc = tmp_path / "proc"
    kube = f"/ssrn1/kubepods/besteffort/pod{UID}/{CID}"
    for pid, lines in {10: [f"12:pids:{kube}", f"0::{kube}"], 11: ["0::/user.slice/session-1.scope"]}.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text("\n".join(lines) + "\n")
    idx = PodIndex(pods_dir, ctrs_dir, proc=str(proc))
    assert str(idx.of_pid(10)) == "ssrn/rn-probes-bhn2s/probe"
    assert idx.of_pid(11) is None and idx.of_pid(12) is None  # not a pod's; gone
    progs = [
        ProgStats(1, "tracepoint", "exec_count", "t", 0, 0, 0, owners=[(10, "swarmscope"), (11, "bpftool")]),
        ProgStats(2, "xdp", "other", "t", 0, 0, 0, owners=[(11, "bpftool")]),
    ]
    name_pods(progs, idx)
    assert [p.pods for p in progs] == [["ssrn/rn-probes-bhn2s/probe"], []]


def test_top_ebpf_exporter_names_pods_on_its_info_metric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Prometheus exporter's info metric carries the holders' pods (the counters keep their
    labels). Program list faked here; the real exporter is scraped in test_bpfstats."""
    from swarmscope.probes import bpfstats
    from swarmscope.probes.top_ebpf import Filters, ProgCollector

    pods_dir, ctrs_dir = kubelet_tree(tmp_path, {("ssrn", "rn-probes-bhn2s", UID): {"probe": CID}})
    proc = tmp_path / "proc"
    (proc / "10").mkdir(parents=True)
    (proc / "10" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{UID}/{CID}\n")
    progs = {
        1: ProgStats(1, "tracepoint", "exec_count", "t", 0, 0, 0, owners=[(10, "swarmscope")]),
        2: ProgStats(2, "xdp", "other", "t", 0, 0, 0, owners=[(11, "bpftool")]),
    }
    monkeypatch.setattr(bpfstats, "list_programs", lambda **_: progs)
    collector = ProgCollector(Filters(), PodIndex(pods_dir, ctrs_dir, proc=str(proc)))
    families = {f.name: f for f in collector.collect()}
    info = {s.labels["id"]: s.labels for s in families["swarmscope_probe_prog_info"].samples}
    assert info["1"]["pods"] == "ssrn/rn-probes-bhn2s/probe"
    assert info["2"]["pods"] == ""
    assert "pods" not in families["swarmscope_probe_prog_run_count"].samples[0].labels


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.bpf
def test_agent_names_the_pod_it_counts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A real cgroup at <root>/kubepods/besteffort/pod<uid>/<id>, announced by path as the worker
    in a pod announces it: the probe counts its execs exactly and names the pod everywhere."""
    uid, cid = str(uuid.uuid4()), os.urandom(32).hex()
    pods_dir, ctrs_dir = kubelet_tree(tmp_path, {("ssrn", "rn-workers-7d-6x", uid): {"worker": cid}})
    with temp_cgroup("kubelet") as root:
        ctr = root / "kubepods" / "besteffort" / f"pod{uid}" / cid
        ctr.mkdir(parents=True)
        (root / "plain").mkdir()  # a cgroup that is no pod's
        path, ino = "/" + str(ctr.relative_to(root.parent)), os.stat(ctr).st_ino
        for ctl, addr in serve_controller():
            agent = ProbeAgent(
                addr, TOKEN, "rn", ["exec_count"], probe_id="p1", pods=PodIndex(pods_dir, ctrs_dir)
            )
            run = AgentThread(agent)
            try:
                ctl.wait_for("heartbeat", timeout=60)  # BCC compile + load first
                with caplog.at_level(logging.INFO, logger="swarmscope.probes.windows"):
                    ctl.send(open=pb.OpenWindow(run_id="r", window_id="w", nodes=[
                        pb.NodeInfo(name="rn", cgroup_path=path),
                        pb.NodeInfo(name="plain", cgroup_path=f"/{root.name}/plain"),
                    ]))  # fmt: skip
                    assert ctl.wait_for("ack").ack.ok
                    exec_in_cgroup(ctr, 7)
                    exec_in_cgroup(root / "plain", 3)
                    ctl.send(close=pb.CloseWindow(run_id="r", window_id="w"))
                    readings, done = ctl.window_result()
            finally:
                run.stop()
    by = {r.node: r for r in readings}
    assert (dict(by["rn"].counters), by["rn"].pod, by["rn"].error) == (
        {"exec": 7},
        "ssrn/rn-workers-7d-6x/worker",
        "",
    )
    assert (dict(by["plain"].counters), by["plain"].pod) == ({"exec": 3}, "")
    (span,) = spans_of(to_json([done.trace]))
    attrs = attributes(span["attributes"])
    assert attrs["swarmscope.pod.rn"] == "ssrn/rn-workers-7d-6x/worker"
    assert "swarmscope.pod.plain" not in attrs
    said = [r.getMessage() for r in caplog.records if "is pod" in r.getMessage()]
    assert said == [f"probe: node rn cgroup {path} (id {ino}) is pod ssrn/rn-workers-7d-6x/worker"]
