"""Where swarmscope's own files are: the package, the checkout root, bpf/, scenarios/, tools/.

    from swarmscope.core.paths import BPF, SCENARIOS
    BPF / "probe" / "exec_count.bpf.c"

swarmscope runs from a checkout (the image is one, at /opt/swarmscope, installed editable): the
scenario files and the build scripts sit beside the package.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
ROOT = PACKAGE.parent
BPF = PACKAGE / "bpf"
SCENARIOS = ROOT / "scenarios"
TOOLS = ROOT / "tools"
