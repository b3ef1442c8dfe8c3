"""tools/k8s/build.sh: cache layout, idempotence and parallel safety, with a stand-in `go`.

    .venv/bin/python -m pytest tests/test_k8s_build.py

The real builds take minutes (`make tools` runs them when the cache is cold); here
GO points at a small script that records each call and writes a fake binary, so the lock and
cache logic is tested in a second.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "tools" / "k8s" / "build.sh"

FAKE_GO = """#!/bin/sh
# stand-in for `go`: log the call; for `build -o X`, wait a bit (so callers overlap) and
# write an executable at X
echo "$*" >> "$FAKE_GO_LOG"
if [ "$1" = build ]; then
  out=""; prev=""
  for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; done
  sleep 1
  mkdir -p "$(dirname "$out")"; printf '#!/bin/sh\\necho fake\\n' > "$out"; chmod +x "$out"
fi
exit 0
"""


def run_build(env: dict[str, str], *tools: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BUILD), *tools], env=env, capture_output=True, text=True, timeout=60)


def fake_env(tmp_path: Path) -> dict[str, str]:
    go = tmp_path / "go"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    env = dict(os.environ)
    env.pop("SWARMSCOPE_NO_BUILD", None)  # these tests do build (with the stand-in go)
    env.update(GO=str(go), FAKE_GO_LOG=str(tmp_path / "go.log"), SWARMSCOPE_CACHE=str(tmp_path / "root"))
    return env


def test_parallel_builds_build_once_and_agree(tmp_path: Path) -> None:
    env = fake_env(tmp_path)
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda _: run_build(env, "etcd"), range(4)))
    for r in results:
        assert r.returncode == 0, r.stderr
    dirs = {r.stdout.strip() for r in results}
    assert dirs == {str(tmp_path / "root" / "tools" / "etcd-v3.6.8")}
    builds = [line for line in (tmp_path / "go.log").read_text().splitlines() if line.startswith("build")]
    assert len(builds) == 1, builds  # the other three waited on the lock and found the cache
    etcd = tmp_path / "root" / "tools" / "etcd-v3.6.8" / "bin" / "etcd"
    assert subprocess.run([str(etcd)], capture_output=True, text=True).stdout == "fake\n"
    # no temp dirs left behind
    tools = tmp_path / "root" / "tools"
    assert sorted(p.name for p in tools.iterdir() if not p.name.startswith(".etcd.lock")) == ["etcd-v3.6.8"]


def test_failed_build_leaves_no_cache(tmp_path: Path) -> None:
    env = fake_env(tmp_path)
    (tmp_path / "go").write_text(
        '#!/bin/sh\necho "$*" >> "$FAKE_GO_LOG"\n[ "$1" = build ] && exit 1\nexit 0\n'
    )
    r = run_build(env, "etcd")
    assert r.returncode != 0
    assert "building etcd FAILED" in r.stderr
    assert not (tmp_path / "root" / "tools" / "etcd-v3.6.8").exists()
    tools = tmp_path / "root" / "tools"
    assert not [p for p in tools.iterdir() if p.name.startswith(".etcd.") and p.is_dir()]


def test_failed_first_step_is_not_masked_by_later_ones(tmp_path: Path) -> None:
    # kwok's builder runs `go install`, then `go mod download` and a copy of the stage files.
    # Bash ignores errexit in a function called as an `if` condition, so a failed install
    # followed by steps that succeed was once marked complete, with no kwok binary in it.
    env = fake_env(tmp_path)
    stage = tmp_path / "kwokmod" / "kustomize" / "stage"
    stage.mkdir(parents=True)
    (stage / "node.yaml").write_text("kind: Stage\n")
    (tmp_path / "go").write_text(
        '#!/bin/sh\necho "$*" >> "$FAKE_GO_LOG"\n[ "$1" = install ] && exit 1\n'
        f'[ "$1" = mod ] && echo \'  "Dir": "{tmp_path / "kwokmod"}",\'\nexit 0\n'
    )
    r = run_build(env, "kwok")
    assert r.returncode != 0, r.stdout
    assert "building kwok FAILED" in r.stderr
    assert not (tmp_path / "root" / "tools" / "kwok-v0.8.0").exists()
    calls = (tmp_path / "go.log").read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["install"]  # stopped at the failure


def test_path_only_and_unknown_tool(tmp_path: Path) -> None:
    env = fake_env(tmp_path)
    r = run_build(env, "--path", "kube", "helm")
    assert r.stdout.split() == [
        str(tmp_path / "root" / "tools" / "kube-v1.36.3"),
        str(tmp_path / "root" / "tools" / "helm-v3.22.0"),
    ]
    assert not (tmp_path / "go.log").exists()  # --path builds nothing
    r = run_build(env, "kubectl")
    assert r.returncode != 0 and "unknown tool 'kubectl'" in r.stderr


def test_node_tools_are_cached_by_version(tmp_path: Path) -> None:
    env = fake_env(tmp_path)
    r = run_build(env, "--path", "node")
    tools = tmp_path / "root" / "tools"
    names = [Path(p).name for p in r.stdout.split()]
    assert names[:5] == [
        "kubelet-v1.36.3", "kubeproxy-v1.36.3", "containerd-v2.1.4", "runc-v1.3.0-seccomp", "cni-v1.7.1",
    ]  # fmt: skip
    assert names[5].startswith("nodeimages-r2-3.10-v1.36.3-busybox-")
    assert names[6] == "jaegerimage-r2-v1.76.0-2.13.0"  # Jaeger v2.13.0 is module v1.76.0
    assert all(Path(p).parent == tools for p in r.stdout.split())
