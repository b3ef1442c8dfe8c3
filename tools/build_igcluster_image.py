"""Inspektor Gadget's DaemonSet image, from the binaries tools/build_igcluster.sh built (no Docker).

    python3 tools/build_igcluster_image.py     # prints the OCI archive (cached by content)
    ctr -n k8s.io images import --base-name ghcr.io/inspektor-gadget/inspektor-gadget ARCHIVE   # -> :v0.35.0

v0.35's Dockerfiles/gadget.Dockerfile puts /entrypoint, /cleanup and /bin/gadgettracermanager on
distroless/static; the binaries are static (CGO_ENABLED=0), so here they are one layer on an
empty image, made with tools/build_image.py's parts (WorkDir, layer_tar, write_archive). The
archive is cached under $SWARMSCOPE_CACHE/images/igcluster-<key>.tar, key = the binaries and
this file.

Beside them: kubectl-gadget (upstream's own image), so a pod can mount this image as a volume
and run the client, and Debian's static busybox, for one mount before the entrypoint.

Caveats: no /etc/os-release, CA certificates or OCI/NRI hooks in the image (the entrypoint reads
the host's os-release; gadgets are built in, never pulled; the deployment uses the pod informer).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from build_image import CACHE, write_archive
from build_image_stage import layer_tar
from build_image_work import WorkDir, prune, sweep_stale

ROOT = Path(__file__).resolve().parent.parent
VERSION = os.environ.get("IG_VERSION", "v0.35.0")
# The client too (upstream ships it as its own image): the chart's controller mounts this image
# as an image volume to run kubectl-gadget (docs/cluster.md).
LAYOUT = [("entrypoint", "/"), ("cleanup", "/"), ("gadgettracermanager", "/bin/"),
          ("kubectl-gadget", "/bin/"), ("busybox", "/bin/")]  # fmt: skip
# Debian's static busybox (busybox-static): the pod's command mounts kthreadd's /proc entry over
# pid 1's before the entrypoint runs (pid 1's namespaces are unreadable here: tests/igcluster.py).
BUSYBOX = Path("/bin/busybox")


def binaries() -> Path:
    """tools/build_igcluster.sh's bin dir (it builds them once; exits 3 under the tests)."""
    out = subprocess.run([str(ROOT / "tools" / "build_igcluster.sh")], capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(out.returncode)
    return Path(out.stdout.split()[-1]) / "bin"


def main() -> int:
    bin_dir = binaries()
    files = {name: bin_dir / name for name, _ in LAYOUT} | {"busybox": BUSYBOX}
    h = hashlib.sha256(Path(__file__).read_bytes())
    for name, _ in LAYOUT:
        h.update(name.encode() + files[name].read_bytes())
    CACHE.mkdir(parents=True, exist_ok=True)
    sweep_stale(CACHE)
    out = CACHE / f"igcluster-{VERSION}-{h.hexdigest()[:16]}.tar"
    if out.exists():
        os.utime(out)
    elif os.environ.get("SWARMSCOPE_NO_BUILD"):  # under the tests: built by `make tools`, not here
        print(f"build_igcluster_image: the image is not built ({out}): run `make tools`", file=sys.stderr)
        return 3
    else:
        with WorkDir(CACHE) as w:
            top = w.path / "top"
            top.mkdir()
            for name, f in files.items():
                shutil.copy2(f, top / name)
            tar = layer_tar(top, LAYOUT, "/", w.path)
            oci = f"{w.path / 'oci'}:{VERSION}"
            w.run(["umoci", "init", "--layout", str(w.path / "oci")])
            w.run(["umoci", "new", "--image", oci])
            w.run(["umoci", "raw", "add-layer", "--image", oci, str(tar)])
            write_archive(w, oci, ["/entrypoint"], ["--config.workingdir", "/"], out)
        prune(CACHE, "igcluster-*.tar", 2)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
