"""The chart's relay on a real node: the image's `swarmscope relay` carries the probe, windows exact.

    .venv/bin/python -m pytest tests/test_realnode_chart_relays.py -v -s   # -s: timings, report

One `helm install` with relays.enabled (one relay pod), the image built here and imported into
the node's containerd (as tests/test_realnode_chart.py). Checked: every pod Running and ready;
the relay pod's process, seen from the host, is the image's `swarmscope relay` (read-only root)
running as uid 10001 and holding the probe's session (an established connection from the probe pod's IP
on its port); then the controller runs one headless exec storm (a `helm upgrade`, as in
test_realnode_chart.py) and every window is exact, generated == kernel, for the real node. The
controller's connections, sampled every second until the report: the relay pod's, never the
probe pod's: the probe reached the controller only through the relay. The upgrade replaces
the controller; the relay outlasts it (relays.upstreamRetries) and never restarts.
Seen in CI once: the probe started before the relay pod was ready (its Service refused), so it
registered at the controller; failback (probes/failback.py, within 15-45 s) now brings it to
the relay, which is what the first wait allows for.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from realchart import IMAGE, IMAGE_REPO, RUNNING_TIMEOUT, ChartNode, exec_storm_upgrade, values_file
from realcluster import pods_wide
from realnode import RealNode, wait_for

# cluster: the kube/node/image builds of `make tools`; the timeout covers a node's start and image imports
pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(3600)]

NS = "ssrl"
RELEASE = "rl"
CLI = b"/opt/swarmscope/.venv/bin/swarmscope"  # the image's entry point: argv[1] under its python
PORT = 7002  # values.yaml relays.port


def test_relay_through_the_chart_on_the_real_node(real_node: ChartNode, tmp_path: Path) -> None:
    assert real_node.image(IMAGE_REPO) == IMAGE
    values = values_file(tmp_path / "values.json", _values(real_node.node))
    t = time.monotonic()
    with real_node.release(RELEASE, NS, "-f", values) as r:
        try:
            pods = wait_for("every pod Running and ready", lambda: r.all_ready(4), RUNNING_TIMEOUT)
        finally:
            print(pods_wide(r.all_pods()), flush=True)
        print(f"helm install -> all Running in {time.monotonic() - t:.1f} s", flush=True)
        comps = sorted(p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods)
        assert comps == ["controller", "probes", "relays", "workers"]
        (relay_pod,) = r.pods("relays")
        # The relay, seen from the host: the image's binary, uid 10001, holding the probe.
        pid = wait_for("the relay's process", _relay_pid, 30.0)
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        print(f"relay process {pid}: {argv}", flush=True)
        assert argv[1:3] == [CLI.decode(), "relay"]
        upstream = argv[argv.index("--upstream") + 1]
        assert upstream == f"{RELEASE}-swarmscope-controller.{NS}.svc:7001"
        uids = next(
            ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("Uid:")
        )
        assert uids.split()[1:] == ["10001"] * 4
        (probe_pod,) = r.pods("probes")
        probe_ip, relay_ip = probe_pod["status"]["podIP"], relay_pod["status"]["podIP"]
        wait_for(
            "the probe's session at the relay", lambda: probe_ip in _peers(pid, PORT) or None, RUNNING_TIMEOUT
        )

        t = time.monotonic()
        ctrl = exec_storm_upgrade(r)
        at_controller: set[str] = set()  # peers seen on the new controller's fleet port

        def report() -> Path | None:
            ctl = _pid_of(b"--headless")
            if ctl:
                at_controller.update(_peers(ctl, 7001))
            return r.first_report([ctrl])

        rep = json.loads(wait_for("the exec storm's report", report, RUNNING_TIMEOUT, every=1.0).read_text())
        print(
            f"report in {time.monotonic() - t:.1f} s: status {rep['status']}, flags {rep['flags']}",
            flush=True,
        )
        iterations = rep["points"][0]["iterations"]
        # One headless Locust run (-t 15s) is one window: one point, one iteration.
        assert (len(rep["points"]), [it["iteration"] for it in iterations]) == (1, [1])
        for it in iterations:
            (n,) = it["per_node"]
            print(f"  window {it.get('iteration', '?')}: {n}", flush=True)
            assert n["node"] == r.node.name
            assert n["generated"] == n["kernel"] > 0, n
        (relay_now,) = r.pods("relays")
        restarts = relay_now["status"]["containerStatuses"][0]["restartCount"]
        print(f"controller's peers: {sorted(at_controller)}; relay restarts: {restarts}", flush=True)
        if restarts:  # why: each run of the relay container, from the kubelet's log files
            print(r.logs(lines=60, containers=("relay",)), flush=True)
        assert restarts == 0
        assert at_controller == {relay_now["status"]["podIP"]} == {relay_ip}
        now = _relay_pid()
        assert now is not None and probe_ip in _peers(now, PORT)


def _values(node: RealNode) -> dict[str, Any]:
    return {
        "tracing": {"enabled": False},  # not what this test checks: no Jaeger image to import
        "jaeger": {"enabled": False},
        "relays": {"enabled": True, "replicas": 1},
        # This kubelet keeps pod logs in its own dir: the probe names pods from it.
        "probes": {"podLogs": {"podsDir": str(node.pod_logs)}},
    }


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _relay_pid() -> int | None:
    """The one process on this machine that is the image's `swarmscope relay` (the tests' relays
    on the host run from the worktree's .venv, never from /opt/swarmscope)."""
    found = [pid for pid, argv in _processes() if argv[1:3] == [CLI, b"relay"]]
    # The relay may fork a helper that keeps its argv: the relay is the one whose parent is not one.
    found = [p for p in found if _ppid(p) not in found]
    assert len(found) <= 1, found
    return found[0] if found else None


def _pid_of(arg: bytes) -> int | None:
    """The controller the upgrade started: a `swarmscope controller` whose argv has `arg`."""
    found = [pid for pid, argv in _processes() if b"controller" in argv and arg in argv]
    return found[0] if len(found) == 1 else None


def _processes() -> list[tuple[int, list[bytes]]]:
    out = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit():
                out.append((int(p.name), (p / "cmdline").read_bytes().split(b"\0")))
        except OSError:
            continue
    return out


def _peers(pid: int, port: int) -> set[str]:
    """The IPv4 peers of established TCP connections to local `port`, in pid's network
    namespace (a dual-stack listener lists an IPv4 peer in tcp6, v4-mapped)."""
    out = set()
    try:
        rows = [
            r.split()
            for f in ("tcp", "tcp6")
            for r in Path(f"/proc/{pid}/net/{f}").read_text().splitlines()[1:]
        ]
    except OSError:  # gone between the lookup and the read
        return out
    for r in rows:
        if r[1].endswith(f":{port:04X}") and r[3] == "01":
            ip = bytes.fromhex(r[2].split(":")[0][-8:])[::-1]  # little-endian, the last 32 bits
            out.add(".".join(str(b) for b in ip))
    return out
