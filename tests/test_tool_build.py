"""Third-party tools (k6, ig) built on first use with progress lines (core/sys/gobuild.tool_binary).

The k6 case runs a whole ingress flood (tests/test_ingress.py: the build precedes the window);
here ig, through the ``ebpf_cost`` kind's ``prepare``, with a fake build script (the real one
takes minutes) in an empty cache, and a failing build reported as a SetupError naming the script.
"""

from __future__ import annotations

import pathlib

import pytest

from swarmscope.core.errors import SetupError
from swarmscope.kinds.ebpf_cost import KIND

FAKE_IG_BUILD = """#!/bin/sh
# Stands in for tools/build_ig.sh: writes an executable where the cache keeps ig, prints its path.
d="$SWARMSCOPE_CACHE/tools/ig-$IG_VERSION"; mkdir -p "$d"
printf '#!/bin/sh\\necho ig\\n' > "$d/ig"; chmod +x "$d/ig"; echo "$d/ig"
"""


def _script(tmp: pathlib.Path, text: str) -> pathlib.Path:
    s = tmp / "build.sh"
    s.write_text(text)
    s.chmod(0o755)
    return s


def test_ig_open_builds_ig_on_first_use_with_progress_lines(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    monkeypatch.setenv("SWARMSCOPE_BUILD_IG", str(_script(tmp_path, FAKE_IG_BUILD)))
    cfg = KIND.schema.load(env={}, sets=["tools=seccomp,ig-open"])
    KIND.prepare(cfg)
    ig = tmp_path / "tools" / "ig-v0.35.0" / "ig"
    assert ig.is_file()
    lines = capfd.readouterr().err.splitlines()
    assert lines[0] == (
        "swarmscope: building Inspektor Gadget ig v0.35.0 before any measurement window "
        f"(first use here, ≈ 2-4 min; cached as {ig})"
    )
    assert lines[1] == f"swarmscope: built Inspektor Gadget ig v0.35.0 in 0 s ({ig})"
    KIND.prepare(cfg)  # cached now: nothing built, nothing said
    assert capfd.readouterr().err == ""


def test_ebpf_cost_without_ig_open_builds_nothing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    monkeypatch.setenv("SWARMSCOPE_BUILD_IG", str(tmp_path / "absent.sh"))
    KIND.prepare(KIND.schema.load(env={}, sets=["tools=seccomp,open"]))
    assert not (tmp_path / "tools").exists()


def test_a_failing_build_is_a_setup_error_naming_the_script(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    script = _script(tmp_path, "#!/bin/sh\necho 'go: module lookup disabled' >&2\nexit 1\n")
    monkeypatch.setenv("SWARMSCOPE_BUILD_IG", str(script))
    with pytest.raises(SetupError) as e:
        KIND.prepare(KIND.schema.load(env={}, sets=["tools=ig-open"]))
    assert str(e.value) == (
        f"building Inspektor Gadget ig v0.35.0 failed ({script}, exit 1):\ngo: module lookup disabled"
    )
