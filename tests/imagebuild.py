"""The project's container image, built here for the tests that run it (no Docker engine).

    archive = build_swarmscope_image()   # OCI archive; cached by content, a cold build takes minutes

tools/build_image.py does the Dockerfile's steps with mmdebstrap + umoci and installs the pinned
wheels offline; it prints the archive's path. Run under `nice -n 19`: a cold build is CPU-heavy
and the machine is shared. SWARMSCOPE_IMAGE_ARCHIVE names an archive to use instead (one built
earlier, e.g. by a CI step, or while iterating on the tests: it is then not checked against the
tree).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_swarmscope_image() -> Path:
    given = os.environ.get("SWARMSCOPE_IMAGE_ARCHIVE")
    if given:
        print(f"image: {given} (SWARMSCOPE_IMAGE_ARCHIVE, not rebuilt)", flush=True)
        return Path(given)
    t0 = time.monotonic()
    r = subprocess.run(
        ["nice", "-n", "19", sys.executable, str(ROOT / "tools" / "build_image.py")],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise RuntimeError(f"tools/build_image.py failed (rc={r.returncode}); its log is above")
    print(f"image: ready in {time.monotonic() - t0:.1f} s", flush=True)
    return Path(r.stdout.split()[-1])
