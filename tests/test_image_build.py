"""tools/build_image.py builds what the Dockerfile says: same base, files, commands and config.

    .venv/bin/python -m pytest tests/test_image_build.py

The scripted build reads the Dockerfile itself, so here it is checked that every instruction
is mapped (none silently dropped) in the Dockerfile's order (base first, code last), that an
unmapped one is refused, that the build context follows .dockerignore like Docker does, that
the image key changes with any file and the base key with the base's inputs only.
tests/test_realnode_image.py builds the image for real and runs it on a real node.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_image  # noqa: E402
import build_image_stage  # noqa: E402


def test_every_dockerfile_instruction_is_in_the_plan() -> None:
    ins = build_image.instructions((ROOT / "Dockerfile").read_text())
    p = build_image.plan(ROOT / "Dockerfile")
    # No build stage: the image carries no Go binaries (the relay and the probe are Python).
    assert [i for i, a in ins].count("FROM") == 1 and p.stage is None and p.stage_copies == []
    froms = [a for i, a in ins if i == "FROM"]
    assert [build_image.BASES[f] for f in froms] == [(p.suite, p.variant)] == [("bookworm", "minbase")]
    copies = [a.split() for i, a in ins if i == "COPY"]
    assert [c[-1] for c in copies if c[:-1] == ["."]] == p.copies == ["/opt/swarmscope"]
    # In order: the base's named files, the base's RUN, then `COPY .` and the code's RUN.
    order = [i if i != "COPY" else ("COPY ." if a.startswith(". ") else "COPY files") for i, a in ins]
    assert order == ["FROM", "WORKDIR", "COPY files", "COPY files", "RUN", "COPY .", "RUN",
                     "ENV", "USER", "ENTRYPOINT", "CMD"]  # fmt: skip
    assert (
        [(c[:-1], c[-1]) for c in copies if c[:-1] != ["."]]
        == p.base_copies
        == [
            (["pyproject.toml", "constraints.txt", "README.md"], "/opt/swarmscope/"),
            (["tools/setup.sh", "tools/image-install.sh"], "/opt/swarmscope/tools/"),
        ]
    )
    runs = [a for i, a in ins if i == "RUN"]
    assert runs == [cmd for _cwd, cmd in p.base_runs + p.runs]
    assert [cwd for cwd, _cmd in p.base_runs + p.runs] == ["/opt/swarmscope"] * 2
    assert [a for i, a in ins if i == "USER"] == [p.user] == ["10001"]
    assert p.entrypoint == ["swarmscope"] and p.cmd == ["--help"]
    assert p.env == {
        "PATH": "/opt/swarmscope/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    # The base is the one install script, and it never reads the code (which is not there yet);
    # the code's RUN prebuilds the exec helpers.
    assert [cmd for _cwd, cmd in p.base_runs] == ["tools/image-install.sh"]
    dry = subprocess.run(
        [str(ROOT / "tools" / "image-install.sh"), "--dry-run"], capture_output=True, text=True, check=True
    ).stdout
    assert "swarmscope" not in dry.replace("useradd --uid 10001 --user-group --no-create-home --shell "
                                           "/usr/sbin/nologin swarmscope", "")  # fmt: skip
    assert "from swarmscope.workers.native import ensure_built" in p.runs[0][1]


def test_code_copy_before_a_base_copy_is_refused(tmp_path: Path) -> None:
    # Named files after `COPY .` would be code the base cannot see (they belong in the base part).
    df = tmp_path / "Dockerfile"
    for bad in ("COPY . /d\nCOPY a.txt /d/\n", "COPY a.txt /d\n", "COPY . a.txt /d/\n"):
        df.write_text(f"FROM debian:bookworm-slim\n{bad}")
        with pytest.raises(SystemExit, match=r"only `COPY \. DIR` or, before it, `COPY FILES DIR/`"):
            build_image.plan(df)
    # A directory in the base would make it depend on code: only regular files are accepted.
    (tmp_path / "tools").mkdir()
    df.write_text("FROM debian:bookworm-slim\nCOPY tools /d/\n")
    with pytest.raises(SystemExit, match="base copies regular files only, not tools"):
        build_image.base_key(tmp_path, build_image.plan(df))


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
    (tmp_path / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /d\nCOPY pyproject.toml constraints.txt /d/\n"
        "COPY tools/i.sh /d/tools/\nRUN tools/i.sh\nCOPY . /d\nRUN true\n"
    )
    for f in ("a.py", "pkg/b.py", "pkg/__pycache__/b.pyc", ".venv/x", ".git/HEAD", "results/r.json",
              "tests/.mypy_cache/y", "__pycache__/z.pyc", "pyproject.toml", "constraints.txt",
              "tools/i.sh"):  # fmt: skip
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text(f)
    files = [str(f) for f in build_image.context_files(tmp_path)]
    # Docker matches patterns without **/ from the context root only: tests/.mypy_cache stays.
    assert files == [".dockerignore", "Dockerfile", "a.py", "constraints.txt", "pkg/b.py", "pyproject.toml",
                     "tests/.mypy_cache/y", "tools/i.sh"]  # fmt: skip

    def keys() -> tuple[str, str]:
        p = build_image.plan(tmp_path / "Dockerfile")
        return build_image.base_key(tmp_path, p), build_image.cache_key(
            tmp_path, build_image.context_files(tmp_path)
        )

    b1, k1 = keys()
    (tmp_path / "pkg" / "b.py").write_text("changed")  # code: a new image on the same base
    b2, k2 = keys()
    (tmp_path / "results" / "r.json").write_text("ignored change")
    b3, k3 = keys()
    assert b1 == b2 == b3 and k1 != k2 == k3
    # each input of the base rebuilds it (and the image)
    seen = {b1}
    for f in ("constraints.txt", "pyproject.toml", "tools/i.sh"):
        (tmp_path / f).write_text(f"{f} changed")
        b, k = keys()
        assert b not in seen and k != k3, f
        seen.add(b)
    (tmp_path / "Dockerfile").write_text(
        (tmp_path / "Dockerfile").read_text().replace("RUN true", "RUN false")
    )
    assert keys()[0] == b  # a code step changed: same base


def test_dockerignore_exception_takes_a_file_back(tmp_path: Path) -> None:
    # As Docker: the last matching line decides; `!` re-includes a file under an ignored pattern.
    (tmp_path / ".dockerignore").write_text("tools/build_*\n!tools/build_keep.sh\nlib\n!lib/keep.txt\n")
    for f in ("tools/build_keep.sh", "tools/build_image.py", "tools/go.sh", "lib/keep.txt", "lib/drop.txt"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text(f)
    files = [str(f) for f in build_image.context_files(tmp_path)]
    assert files == [".dockerignore", "lib/keep.txt", "tools/build_keep.sh", "tools/go.sh"]


def test_stage_mapping_refuses_what_the_host_cannot_stand_for(tmp_path: Path) -> None:
    df = tmp_path / "Dockerfile"
    cases = {
        "FROM alpine:3 AS native\n": "one build stage FROM python:3.11-bookworm first",
        "FROM python:3.11-bookworm AS a\nCOPY --from=rust:1 /x /y\n": "no host tool for COPY --from=rust:1",
        "FROM python:3.11-bookworm AS a\nENV X=1\n": "stage a: ENV has no scripted equivalent",
        "FROM python:3.11-bookworm AS a\nFROM debian:bookworm-slim\nCOPY --from=b /o/ /d/\n": (
            r"only `COPY --from=STAGE SRC DIR/`, before `COPY \.`"
        ),
        "FROM python:3.11-bookworm AS a\nFROM debian:bookworm-slim\nCOPY . /d\nCOPY --from=a /o/ /d/\n": (
            r"only `COPY --from=STAGE SRC DIR/`, before `COPY \.`"
        ),
    }
    for text, message in cases.items():
        df.write_text(text)
        with pytest.raises(SystemExit, match=message):
            build_image.plan(df)


def test_stage_runs_on_the_host_and_its_layer_is_deterministic(tmp_path: Path) -> None:
    """A stage whose RUN writes a file: copied in, run in the stage's WORKDIR, then laid out under
    the destination, root-owned with mtime 0, so two runs give the same layer bytes."""
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "sub" / "in.txt").write_text("hello")
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.11-bookworm AS st\nWORKDIR /w\nCOPY src /w/src/\n"
        "RUN mkdir out && cat src/sub/in.txt > out/tool && chmod 755 out/tool\n"
        "FROM debian:bookworm-slim\nCOPY --from=st /w/out/ /usr/local/bin/\n"
    )
    p = build_image.plan(tmp_path / "Dockerfile")
    assert p.stage is not None
    digests = []
    for n in ("a", "b"):
        (tmp_path / n).mkdir()
        top = build_image_stage.run_stage(tmp_path, p.stage, tmp_path / n)
        tar = build_image_stage.layer_tar(top, p.stage_copies, p.stage.workdir, tmp_path / n)
        digests.append(hashlib.sha256(tar.read_bytes()).hexdigest())
        with tarfile.open(tar) as t:
            members = {m.name: (m.uid, m.gid, m.mtime, m.mode) for m in t.getmembers()}
    assert digests[0] == digests[1]
    assert members == {
        ".": (0, 0, 0, 0o755),
        "./usr": (0, 0, 0, 0o755),
        "./usr/local": (0, 0, 0, 0o755),
        "./usr/local/bin": (0, 0, 0, 0o755),
        "./usr/local/bin/tool": (0, 0, 0, 0o755),
    }
