"""The Dockerfile's build stage (`FROM ... AS native`), scripted: run on the build host, its
output copied into the image as one layer between the base and the code.

    s = Stage("native", "python:3.11-bookworm")   # filled by build_image.plan()
    out = run_stage(ROOT, s, work_dir)              # the stage's /src, on the host
    layer_tar(out, [("/src/out/", "/usr/local/bin/")], s.workdir, work_dir / "native")

Mapping (tools/build_image.py's docstring lists the rest):

    FROM python:3.11-bookworm AS n   the build host: its python (3.11, as the image's; the venv
                                     with grpc_tools, passed as $PYTHON)
    COPY --from=golang:... /usr/local/go ...   the host's Go, found by tools/go.sh
    WORKDIR d / COPY srcs d/         a private dir standing for d, the named files copied in
                                     (a directory's contents, as Docker copies them)
    RUN cmd                          `sh -c cmd` there, with $SWARMSCOPE_CACHE kept: the Go
                                     build scripts cache by a hash of their sources, so an
                                     unchanged tree costs a cache check
    COPY --from=n SRC DST/  (main)   SRC's files under DST as one layer: root-owned, mtime 0,
                                     so the same binaries give the same layer digest

Caveat: the stage's RUN runs on the host, not in a container: it may read only what the stage
copied (a missing COPY fails under `docker build` but not here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# FROM of a stage -> what stands in for it on the build host.
HOST_STAGES = {"python:3.11-bookworm": "the build host's python 3.11"}
# `COPY --from=IMAGE` inside a stage: toolchains the host provides itself (tools/go.sh).
HOST_TOOLS = {"golang:1.26-bookworm": "the host's Go (tools/go.sh)"}


@dataclass
class Stage:
    name: str
    image: str
    workdir: str = "/"
    tools: list[tuple[str, str, str]] = field(default_factory=list)  # (image, src, dst): on the host
    copies: list[tuple[list[str], str]] = field(default_factory=list)  # (sources, destination dir)
    runs: list[str] = field(default_factory=list)


def _inside(top: Path, workdir: str, path: str) -> Path:
    """The host path standing for the stage's absolute `path`, whose root is `top`."""
    rel = os.path.normpath(os.path.join(workdir, path)).lstrip("/")
    return top / rel


def run_stage(root: Path, s: Stage, work: Path) -> Path:
    """Copy the stage's files under work/stage and run its RUNs there; return that root."""
    top = work / "stage"
    wd = _inside(top, "/", s.workdir)
    wd.mkdir(parents=True)
    for srcs, dst in s.copies:
        d = _inside(top, s.workdir, dst)
        d.mkdir(parents=True, exist_ok=True)
        for src in srcs:
            if (root / src).is_dir():
                shutil.copytree(root / src, d, dirs_exist_ok=True, symlinks=True)
            else:
                shutil.copy2(root / src, d / Path(src).name)
    env = {**os.environ, "PYTHON": sys.executable}
    for cmd in s.runs:
        subprocess.run(["sh", "-c", cmd], cwd=wd, env=env, check=True, stdout=sys.stderr)
    return top


def layer_tar(top: Path, copies: list[tuple[str, str]], workdir: str, work: Path) -> Path:
    """`COPY --from=stage SRC DST/` for each copy: one deterministic layer tar; return it."""
    tree = work / "tree"
    for src, dst in copies:
        d = _inside(tree, "/", dst)
        d.mkdir(parents=True, exist_ok=True)
        s = _inside(top, workdir, src)
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        else:
            shutil.copy2(s, d / s.name)
    for dirpath, _dirs, _files in os.walk(tree):
        os.chmod(dirpath, 0o755)  # mkdtemp's 0700 must not leak into /usr/local
    tar = work / "layer.tar"
    argv = ["tar", "-C", str(tree), "--sort=name", "--mtime=@0", "--owner=0", "--group=0"]
    subprocess.run([*argv, "--numeric-owner", "-cf", str(tar), "."], check=True)
    return tar
