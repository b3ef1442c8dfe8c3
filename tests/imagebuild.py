"""The project's container image, as `make tools` built it (no Docker engine, no build here).

    archive = find_swarmscope_image()   # OCI archive, cached by the code's content

tools/build_image.py does the Dockerfile's steps with mmdebstrap + umoci and installs the pinned
wheels offline; it prints the archive's path. Its cache key hashes the code, so after an edit
`make tools` builds the new image (the code layer only: about a minute) and a test run without it
fails at once saying so. SWARMSCOPE_IMAGE_ARCHIVE names an archive to use instead (one built
earlier, while iterating on the tests: it is then not checked against the tree).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import prebuilt

ROOT = Path(__file__).resolve().parent.parent


def find_swarmscope_image() -> Path:
    given = os.environ.get("SWARMSCOPE_IMAGE_ARCHIVE")
    if given:
        print(f"image: {given} (SWARMSCOPE_IMAGE_ARCHIVE, not rebuilt)", flush=True)
        return Path(given)
    return Path(prebuilt.run([sys.executable, str(ROOT / "tools" / "build_image.py")]).split()[-1])
