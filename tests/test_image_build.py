"""tools/build_image.py builds what the Dockerfile says: same base, files, commands and config.

    .venv/bin/python -m pytest tests/test_image_build.py

The scripted build reads the Dockerfile itself, so here it is checked that every instruction
is mapped (none silently dropped), that an unmapped one is refused, that the build context
follows .dockerignore like Docker does, and that the content key changes with any file.
tests/test_realnode_image.py builds the image for real and runs it on a real node.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_image  # noqa: E402


def test_every_dockerfile_instruction_is_in_the_plan() -> None:
    ins = build_image.instructions((ROOT / "Dockerfile").read_text())
    p = build_image.plan(ROOT / "Dockerfile")
    froms = [a for i, a in ins if i == "FROM"]
    assert [build_image.BASES[f] for f in froms] == [(p.suite, p.variant)] == [("bookworm", "minbase")]
    assert [a.split()[1] for i, a in ins if i == "COPY"] == p.copies == ["/opt/swarmscope"]
    assert [a for i, a in ins if i == "RUN"] == [cmd for _cwd, cmd in p.runs]
    assert [cwd for cwd, _cmd in p.runs] == ["/opt/swarmscope"]
    assert [a for i, a in ins if i == "USER"] == [p.user] == ["10001"]
    assert p.entrypoint == ["swarmscope"] and p.cmd == ["--help"]
    assert p.env == {
        "PATH": "/opt/swarmscope/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    # the RUN step is the one install script, which prebuilds the exec helpers
    assert "tools/image-install.sh" in p.runs[0][1]
    dry = subprocess.run(
        [str(ROOT / "tools" / "image-install.sh"), "--dry-run"], capture_output=True, text=True, check=True
    ).stdout
    assert "ensure_built()" in dry


def test_unmapped_instruction_is_refused(tmp_path: Path) -> None:
    df = tmp_path / "Dockerfile"
    df.write_text("FROM debian:bookworm-slim\nHEALTHCHECK CMD true\n")
    with pytest.raises(SystemExit, match="HEALTHCHECK has no scripted equivalent"):
        build_image.plan(df)
    df.write_text("FROM alpine:3\n")
    with pytest.raises(SystemExit, match="no mmdebstrap mapping for FROM alpine:3"):
        build_image.plan(df)


def test_context_follows_dockerignore_and_keys_by_content(tmp_path: Path) -> None:
    (tmp_path / ".dockerignore").write_text(".venv\n.git\nresults\n**/__pycache__\n.mypy_cache\n")
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    for f in ("a.py", "pkg/b.py", "pkg/__pycache__/b.pyc", ".venv/x", ".git/HEAD", "results/r.json",
              "tests/.mypy_cache/y", "__pycache__/z.pyc"):  # fmt: skip
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text(f)
    files = [str(f) for f in build_image.context_files(tmp_path)]
    # Docker matches patterns without **/ from the context root only: tests/.mypy_cache stays.
    assert files == [".dockerignore", "Dockerfile", "a.py", "pkg/b.py", "tests/.mypy_cache/y"]
    k1 = build_image.cache_key(tmp_path, build_image.context_files(tmp_path))
    (tmp_path / "pkg" / "b.py").write_text("changed")
    k2 = build_image.cache_key(tmp_path, build_image.context_files(tmp_path))
    (tmp_path / "results" / "r.json").write_text("ignored change")
    k3 = build_image.cache_key(tmp_path, build_image.context_files(tmp_path))
    assert k1 != k2 == k3
