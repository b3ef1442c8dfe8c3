"""The container image: its install script checked on the host, and the image itself built here.

    .venv/bin/python -m pytest tests/test_image.py

`tools/image-install.sh --check` verifies on this Debian host what the Dockerfile's build
would need: every apt package has a candidate, python3 is 3.11, the entry point runs. The slow
test builds the real image (tools/build_image.py, no Docker engine; cached by content), checks
it is two layers (base, code) and that a code-only change adds a new code layer on the same
base, unpacks it and runs it the way the chart's pods do: uid
10001 on a read-only root filesystem, where the exec helpers must already be built and
`swarmscope relay` runs (no Go, no build).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest
from imagebuild import find_swarmscope_image

ROOT = Path(__file__).resolve().parent.parent
# extractall's `filter` came in Python 3.11.4; a fresh Debian 12 has 3.11.2 (its tarfile then
# extracts as "tar" would, without the filter's checks).
TAR_FILTER = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
sys.path.insert(0, str(ROOT / "tools"))
import build_image  # noqa: E402


def layers(layout: Path) -> list[str]:
    """The image's layer digests, bottom first."""
    index = json.loads((layout / "index.json").read_text())
    blob = layout / "blobs" / "sha256"
    manifest = json.loads((blob / index["manifests"][0]["digest"].split(":")[1]).read_text())
    return [layer["digest"] for layer in manifest["layers"]]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_image_install_check_passes_on_host() -> None:
    r = run("tools/image-install.sh", "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    # every package of tools/setup.sh is checked (the image installs the same set)
    pkgs = run("tools/setup.sh", "--print-packages").stdout.split()
    assert "python3-bpfcc" in pkgs and "linux-headers-amd64" in pkgs
    checked = {line.split()[2] for line in r.stdout.splitlines() if line.startswith("ok apt ")}
    assert set(pkgs) <= checked
    assert "ok python 3.11" in r.stdout
    assert "ok entrypoint swarmscope" in r.stdout


@pytest.mark.slow
def test_image_install_check_fails_on_missing_package(tmp_path: Path) -> None:
    # a fake setup.sh that lists a package apt does not know: --check must fail and name it
    fake = tmp_path / "repo"
    (fake / "tools").mkdir(parents=True)
    (fake / "tools" / "image-install.sh").write_text((ROOT / "tools" / "image-install.sh").read_text())
    (fake / "tools" / "image-install.sh").chmod(0o755)
    (fake / "tools" / "setup.sh").write_text("#!/bin/sh\necho swarmscope-no-such-package\n")
    (fake / "tools" / "setup.sh").chmod(0o755)
    (fake / "pyproject.toml").write_text('requires-python = ">=3.11,<3.12"\n')
    r = subprocess.run([str(fake / "tools" / "image-install.sh"), "--check"], capture_output=True, text=True)
    assert r.returncode != 0
    assert "swarmscope-no-such-package has no install candidate" in r.stderr


def test_image_install_dry_run_uses_setup_sh() -> None:
    r = run("tools/image-install.sh", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "tools/setup.sh --no-apt --no-dev" in r.stdout
    assert "useradd --uid 10001" in r.stdout  # the uid the chart's controller/worker pods run as
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "FROM debian:bookworm" in dockerfile
    assert "tools/image-install.sh" in dockerfile


@pytest.mark.cluster  # the image `make tools` builds
@pytest.mark.slow
def test_image_builds_and_runs_read_only_as_uid_10001(tmp_path: Path) -> None:
    archive = find_swarmscope_image()
    layout, bundle = tmp_path / "oci", tmp_path / "bundle"
    layout.mkdir()
    with tarfile.open(archive) as t:
        t.extractall(layout, **TAR_FILTER)
    index = json.loads((layout / "index.json").read_text())
    refs = [m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]]
    assert refs == ["0.1.0"]  # the chart's appVersion: imported as ghcr.io/swarmscope/swarmscope:0.1.0
    base_layer, code_layer = layers(layout)  # the cached base, the code
    # A code-only change: a new code layer on the same base, no Debian install.
    tree = tmp_path / "tree"
    for f in [
        *build_image.context_files(ROOT),
        Path("tools/build_image.py"),
        Path("tools/build_image_work.py"),
        Path("tools/build_image_stage.py"),
    ]:
        (tree / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, tree / f, follow_symlinks=False)
    with (tree / "swarmscope" / "__init__.py").open("a") as fh:
        # Unique per run: the same change twice would find its own image cached from the last run.
        fh.write(f"# a code change {uuid.uuid4().hex}\n")
    # This test builds on purpose (a code layer on the cached base): lift the tests' no-build rule.
    env = {**os.environ, "SWARMSCOPE_NO_BUILD": ""}
    r = subprocess.run(["nice", "-n", "19", sys.executable, str(tree / "tools" / "build_image.py")],
                       capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "building base" not in r.stderr and "code layer in" in r.stderr, r.stderr
    with tarfile.open(r.stdout.split()[-1]) as t:
        t.extractall(tmp_path / "oci2", **TAR_FILTER)
    base2, code2 = layers(tmp_path / "oci2")
    assert base2 == base_layer and code2 != code_layer
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:0.1.0", str(bundle)], check=True)
    proc = json.loads((bundle / "config.json").read_text())["process"]
    assert (proc["user"]["uid"], proc["args"]) == (10001, ["swarmscope", "--help"])
    assert proc["cwd"] == "/opt/swarmscope"
    rootfs = bundle / "rootfs"
    assert not (rootfs / "tmp" / "wheels").exists()  # the build's wheelhouse is not kept
    native = rootfs / "var/cache/swarmscope/native"
    prebuilt = sorted(str(p.relative_to(rootfs)) for p in native.glob("*/*"))
    # The exec helpers and the neighbor agent's library, each under its own source hash.
    assert [p.rsplit("/", 1)[1] for p in prebuilt] == ["libssagent.so", "execstorm", "tiny"], prebuilt
    assert [p.split("/")[4].split("-")[0] for p in prebuilt] == ["agent", "native", "native"], prebuilt

    # As the worker pod runs: uid 10001, the root filesystem read-only, no home directory.
    env = " ".join(f"{k}={v}" for k, v in (e.split("=", 1) for e in proc["env"]))
    script = (
        "from swarmscope.workers.native import ensure_built; t = ensure_built(); print(t.tiny, t.execstorm); "
        "from swarmscope.kinds.neighbor_writes.fastpath import agent_lib; print(agent_lib())"
    )
    r = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-ec", f"""
        mount --bind {rootfs} {rootfs}; mount -o remount,bind,ro {rootfs}
        mount --bind /dev {rootfs}/dev; mount -t proc proc {rootfs}/proc
        env -i {env} HOME=/nonexistent /usr/sbin/chroot --userspec=10001:10001 {rootfs} sh -c '
          cd /opt/swarmscope && swarmscope --help >/dev/null
          touch /opt/swarmscope/x 2>/dev/null && echo WRITABLE
          python -c "{script}"
          # As the chart runs a relay; a closed upstream: it retries until stopped.
          SWARMSCOPE_TOKEN=t timeout -s INT 4 swarmscope relay \
            --upstream 127.0.0.1:1 --bind 127.0.0.1:0 || echo relay rc $?'
        """],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert " ".join(out[:2]).split() == ["/" + p for p in reversed(prebuilt)]  # prebuilt, not compiled
    assert out[2].startswith("swarmscope relay relay-") and " listening on port " in out[2], out
    assert out[3:] == ["relay rc 124"], out  # ran until timeout stopped it, no build attempted
    assert "relay: upstream 127.0.0.1:1: UNAVAILABLE; trying 127.0.0.1:1" in r.stderr, r.stderr
