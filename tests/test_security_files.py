"""Issue 27, finding 5: what root runs from a cache and writes into ``--out`` is nobody else's.

Cached tools (k6, ig, the Go builds) run only when root owns them and every directory above
them and nobody else can write there; ``--out`` that is a symlink or another user's is refused;
each run directory is made fresh with mode 0750; the report and trace files are written under a
fresh name renamed into place, never through a link planted at the name the writer uses; a
results database that is a symlink is refused.
"""

from __future__ import annotations

import os
import pathlib
import stat
import subprocess
import sys

import pytest
from _results_data import fire_run, make_run

from swarmscope.controller.report import write_report
from swarmscope.controller.store import ResultStore, default_db_path, run_dir_for
from swarmscope.core.errors import ResultsError, SetupError
from swarmscope.core.events import RunEvents
from swarmscope.targets.ebpf_tools import IG_VERSION, ig_binary

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOBODY = 65534
needs_root = pytest.mark.root  # chown to another user


def _planted_ig(cache: pathlib.Path) -> pathlib.Path:
    ig = cache / "tools" / f"ig-{IG_VERSION}" / "ig"
    ig.parent.mkdir(parents=True)
    ig.write_text("#!/bin/sh\necho planted\n")
    ig.chmod(0o755)
    return ig


@needs_root
@pytest.mark.parametrize("how", ["other-owner", "group-writable", "cache-of-another-user"])
def test_a_cached_tool_someone_else_could_write_is_not_run(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(cache))
    ig = _planted_ig(cache)
    assert ig_binary(build=False) == ig  # ours, 0755 in root's directories: run
    if how == "other-owner":
        os.chown(ig, NOBODY, NOBODY)
        why = f"{ig} is owned by uid {NOBODY}, not root"
    elif how == "group-writable":
        ig.chmod(0o775)
        why = f"{ig} is writable by its group (mode 775)"
    else:  # $SWARMSCOPE_CACHE pointed at a directory another user owns
        os.chown(cache / "tools", NOBODY, NOBODY)
        why = f"{cache / 'tools'} is owned by uid {NOBODY}, not root"
    with pytest.raises(SetupError) as e:
        ig_binary(build=False)
    assert str(e.value) == (
        f"refusing to run Inspektor Gadget ig {IG_VERSION} from {ig}: {why}; "
        "rebuild it where only root can write"
    )


def _run_cli(out: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmscope", "run", str(ROOT / "scenarios" / "exec_storm.yaml"),
         "--out", str(out), "--set", "nodes=1", "--set", "iterations=1", "--set", "burst_s=0.2"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip


@needs_root
@pytest.mark.parametrize("how", ["symlink", "other-owner"])
def test_out_that_is_a_symlink_or_another_users_is_refused(tmp_path: pathlib.Path, how: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    if how == "symlink":
        out.symlink_to(elsewhere)
        why = f"{out} is a symlink"
    else:
        out.mkdir()
        os.chown(out, NOBODY, NOBODY)
        why = f"{out} is owned by uid {NOBODY}, not root"
    p = _run_cli(out)
    assert p.returncode != 0
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert f"out: refusing {out}: {why} (root would write where another user points)" in p.stderr
    assert list(elsewhere.iterdir()) == []
    assert [q.name for q in out.iterdir()] == []  # not even the results database


@needs_root
def test_run_directory_is_fresh_and_0750(tmp_path: pathlib.Path) -> None:
    from swarmscope.core.sys.trust import make_run_dir

    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(0o777)  # a pod's emptyDir: ours, writable by all; the run dir inside is not
    run_dir = pathlib.Path(make_run_dir(out, "r1"))
    st = run_dir.lstat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, stat.S_ISDIR(st.st_mode)) == (0o750, os.geteuid(), True)
    (out / "r2").symlink_to(tmp_path)  # planted where the next run dir goes
    for rid in ("r1", "r2"):
        with pytest.raises(ResultsError, match=f"cannot create the run directory {out / rid}: File exists"):
            make_run_dir(out, rid)


def test_report_and_trace_are_never_written_through_a_planted_link(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "results"
    run = make_run(run_dir=run_dir_for(out, "run-20261122-1"))
    os.makedirs(run.run_dir)
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    # Links at every name the writers used before (name + ".tmp") and at the final names.
    for name in ("report.json", "report.html.tmp", "report.json.tmp", "trace.json.tmp", "loss_vs_nodes.png"):
        os.symlink(victim, os.path.join(run.run_dir, name))
    events = RunEvents()
    with ResultStore(default_db_path(out)) as store:
        store.attach(events)
        fire_run(events, run)
        write_report(store, run.run_id, run.run_dir)
    from swarmscope.controller.otel import RunSpans

    RunSpans().write_json(os.path.join(run.run_dir, "trace.json"))
    assert victim.read_text() == "untouched"
    for name in ("report.json", "report.html", "loss_vs_nodes.png", "trace.json"):
        assert not os.path.islink(os.path.join(run.run_dir, name)), name
    assert oct(stat.S_IMODE(os.stat(os.path.join(run.run_dir, "report.html")).st_mode)) == oct(0o644)


def test_a_results_database_that_is_a_symlink_is_refused(tmp_path: pathlib.Path) -> None:
    victim = tmp_path / "victim.sqlite"
    victim.write_bytes(b"")
    out = tmp_path / "out"
    out.mkdir()
    (out / "swarmscope.sqlite").symlink_to(victim)
    with pytest.raises(ResultsError) as e:
        ResultStore(default_db_path(out))
    assert str(e.value) == f"refusing the results store {out / 'swarmscope.sqlite'}: it is a symlink"
    assert victim.read_bytes() == b""
