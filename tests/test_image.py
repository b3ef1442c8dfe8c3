"""The container image's install script, tested on the host (there is no Docker engine here).

    .venv/bin/python -m pytest tests/test_image.py

`tools/image-install.sh --check` verifies on this Debian host what the Dockerfile's build
would need: every apt package has a candidate, python3 is 3.11, the entry point runs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=ROOT, capture_output=True, text=True, timeout=120)


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
