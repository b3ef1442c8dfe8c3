"""Where swarmscope's own files are: the package, the checkout root, bpf/, scenarios/, tools/.

    from swarmscope.core.paths import BPF, SCENARIOS
    BPF / "probe" / "exec_count.bpf.c"

From a checkout (or the image, which is one at /opt/swarmscope) the scenario files and the
build scripts sit beside the package; a wheel carries the scenarios inside the package
(pyproject's force-include), so that copy wins when it is there.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
ROOT = PACKAGE.parent
BPF = PACKAGE / "bpf"
SCENARIOS = PACKAGE / "scenarios" if (PACKAGE / "scenarios").is_dir() else ROOT / "scenarios"
TOOLS = ROOT / "tools"
