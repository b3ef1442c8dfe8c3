"""Build the swarmscope image without a Docker engine: the Dockerfile's own steps, scripted.

    python3 tools/build_image.py            # prints the OCI archive (cached by content)
    python3 tools/build_image.py --plan     # prints the steps read from the Dockerfile only
    ctr -n k8s.io images import --base-name ghcr.io/swarmscope/swarmscope ARCHIVE   # -> :0.1.0

The Dockerfile is the single source: this reads it and maps each instruction to Debian tools,
so the two cannot drift (tests/test_image_build.py also checks the mapping covers every line):

    FROM debian:bookworm-slim   mmdebstrap --variant=minbase bookworm (slim's package set)
    WORKDIR d / COPY . d        the build context (minus .dockerignore) copied into d
    RUN cmd                     `sh -c cmd` in the rootfs (mmdebstrap's chroot hook, cwd d)
    ENV / USER / ENTRYPOINT / CMD   the OCI config, set with umoci

The archive lands in $SWARMSCOPE_CACHE/images/swarmscope-<key>.tar where key hashes the
Dockerfile and every file of the context: an edit builds a new one, a rerun returns at once.

The pinned wheels are fetched on the build host first (`pip download` with constraints.txt,
cached under $SWARMSCOPE_CACHE/wheels/<hash of pyproject.toml + constraints.txt>) and the RUN
step installs from them with PIP_NO_INDEX: pip inside the chroot never goes to the network (a
TLS-inspecting proxy broke that here) and a rebuild installs the same files. `docker build`
fetches the same pins from PyPI.

Caveats: root only (mmdebstrap's root mode); the host's python must be the image's (3.11,
x86-64, glibc >= the wheels' manylinux tag). The RUN step downloads Debian packages, so a cold
build takes minutes. Instructions other than the ones above are refused, not ignored.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SWARMSCOPE_CACHE", "/var/cache/swarmscope")) / "images"
WHEELS = CACHE.parent / "wheels"
# hatchling's extra requirement for an editable build (`pip install -e .` in setup.sh): it asks
# for editables~=0.3 at build time, which `pip download .` does not fetch.
EDITABLE_BACKEND = ["editables==0.5"]
BASES = {"debian:bookworm-slim": ("bookworm", "minbase")}  # FROM -> (suite, mmdebstrap variant)
# The Debian base image's environment, which `ENV X=...$PATH` expands against.
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


@dataclass
class Plan:
    suite: str = ""
    variant: str = ""
    workdir: str = "/"
    copies: list[str] = field(default_factory=list)  # destination dirs of `COPY . d`
    runs: list[tuple[str, str]] = field(default_factory=list)  # (cwd, command)
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """Dockerfile -> [(INSTRUCTION, args)], comments dropped, `\\` continuations joined."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in text.splitlines():
        s = line.strip()
        if not buf and (not s or s.startswith("#")):
            continue
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        buf += s
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def plan(dockerfile: Path) -> Plan:
    p = Plan(env=dict(BASE_ENV))
    for ins, args in instructions(dockerfile.read_text()):
        if ins == "FROM":
            if args not in BASES:
                raise SystemExit(f"build_image: no mmdebstrap mapping for FROM {args}")
            p.suite, p.variant = BASES[args]
        elif ins == "WORKDIR":
            p.workdir = args
        elif ins == "COPY":
            src, dst = args.split()
            if src != ".":
                raise SystemExit(f"build_image: only `COPY . DIR` is supported, not {args}")
            p.copies.append(dst)
        elif ins == "RUN":
            p.runs.append((p.workdir, args))
        elif ins == "ENV":
            for kv in shlex.split(args):
                k, _, v = kv.partition("=")
                for name, val in list(p.env.items()):
                    v = v.replace(f"${name}", val).replace(f"${{{name}}}", val)
                p.env[k] = v
        elif ins == "USER":
            p.user = args
        elif ins in ("ENTRYPOINT", "CMD"):
            setattr(p, ins.lower(), json.loads(args))
        else:
            raise SystemExit(f"build_image: Dockerfile instruction {ins} has no scripted equivalent")
    return p


def context_files(root: Path) -> list[Path]:
    """The build context: every file under root not matched by .dockerignore (sorted)."""
    ignore = [
        line.strip().lstrip("/")
        for line in (root / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(rel: str) -> bool:
        parts = rel.split("/")
        for pat in ignore:
            if pat.startswith("**/"):
                if any(fnmatch.fnmatch(x, pat[3:]) for x in parts):
                    return True
            elif any(fnmatch.fnmatch("/".join(parts[: i + 1]), pat) for i in range(len(parts))):
                return True
        return False

    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if not ignored(os.path.normpath(os.path.join(rel_dir, d)))]
        # A symlinked directory (swarmscope/workers -> ../workers) is copied as the link, like
        # Docker's COPY does; os.walk lists it as a directory and does not descend into it.
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        out += [Path(os.path.normpath(os.path.join(rel_dir, d))) for d in links]
        dirnames[:] = [d for d in dirnames if d not in links]
        for f in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, f))
            if not ignored(rel):
                out.append(Path(rel))
    return sorted(out)


def cache_key(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256((root / "Dockerfile").read_bytes())
    h.update(Path(__file__).read_bytes())  # this builder is not in the context (.dockerignore)
    for f in files:
        h.update(f"\0{f}\0".encode())
        h.update((root / f).read_bytes() if not (root / f).is_symlink() else os.readlink(root / f).encode())
    return h.hexdigest()[:16]


def build(root: Path, p: Plan, files: list[Path], out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="swarmscope-image.", dir=CACHE) as w:
        wd = Path(w)
        ctx = wd / "context"
        for f in files:
            (ctx / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / f, ctx / f, follow_symlinks=False)
        hooks = []
        for dst in p.copies:
            hooks += [f'--customize-hook=mkdir -p "$1{dst}"', f"--customize-hook=copy-in {ctx}/. {dst}"]
        # The pinned wheels, fetched on the host, installed offline by the RUN steps and removed.
        wh = wheelhouse(root)
        hooks.append(f'--customize-hook=cp -a {wh} "$1/tmp/wheels"')
        pip_env = "PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wheels "
        for cwd, cmd in p.runs:
            inner = f"cd {shlex.quote(cwd)} && env {pip_env}sh -c {shlex.quote(cmd)}"
            hooks.append(f'--customize-hook=chroot "$1" sh -c {shlex.quote(inner)}')
        hooks.append('--customize-hook=rm -rf "$1/tmp/wheels"')
        rootfs_tar = wd / "rootfs.tar"
        try:
            # mmdebstrap's own temp dir goes under wd, so a failed run's leftover mounts (it
            # mounts /proc, /sys and their submounts for the hooks) can be found and removed.
            subprocess.run(
                ["mmdebstrap", f"--variant={p.variant}", "--mode=root", *hooks, p.suite, str(rootfs_tar)],
                check=True,
                env={**os.environ, "TMPDIR": str(wd)},
            )
        finally:
            _unmount_under(wd)
        # Tagged with the project's version, the chart's default appVersion tag.
        version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
        oci = f"{wd / 'oci'}:{version}"
        subprocess.run(["umoci", "init", "--layout", str(wd / "oci")], check=True)
        subprocess.run(["umoci", "new", "--image", oci], check=True)
        subprocess.run(["umoci", "unpack", "--image", oci, str(wd / "bundle")], check=True)
        subprocess.run(["tar", "-C", str(wd / "bundle" / "rootfs"), "-xpf", str(rootfs_tar)], check=True)
        subprocess.run(["umoci", "repack", "--image", oci, str(wd / "bundle")], check=True)
        cfg = ["umoci", "config", "--image", oci, "--os", "linux", "--architecture", "amd64"]
        cfg += ["--config.workingdir", p.workdir, "--config.user", p.user]
        cfg += [f"--config.env={k}={v}" for k, v in p.env.items()]
        cfg += [a for e in p.entrypoint for a in ("--config.entrypoint", e)]
        cfg += [a for c in p.cmd for a in ("--config.cmd", c)]
        subprocess.run(cfg, check=True)
        subprocess.run(["umoci", "gc", "--layout", str(wd / "oci")], check=True)
        tmp = out.with_suffix(".tmp")
        subprocess.run(["tar", "-C", str(wd / "oci"), "-cf", str(tmp), "."], check=True)
        tmp.rename(out)


def wheelhouse(root: Path) -> Path:
    """The pinned runtime wheels plus the build backend, downloaded once per pin set."""
    h = hashlib.sha256((root / "pyproject.toml").read_bytes() + (root / "constraints.txt").read_bytes())
    d = WHEELS / h.hexdigest()[:16]
    if (d / ".complete").exists():
        return d
    backend = tomllib.loads((root / "pyproject.toml").read_text())["build-system"]["requires"]
    backend += EDITABLE_BACKEND
    tmp = d.with_name(d.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}  # the host's own wheel dir
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(tmp)]
    cmd += ["-c", str(root / "constraints.txt"), str(root), *backend]
    subprocess.run(cmd, check=True, env=env)
    (tmp / ".complete").touch()
    tmp.rename(d)
    return d


def _unmount_under(d: Path) -> None:
    mounts = [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(f"{d}/")
    ]
    for m in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", m], check=False, capture_output=True)


def main(argv: list[str]) -> int:
    p = plan(ROOT / "Dockerfile")
    if "--plan" in argv:
        print(json.dumps(p.__dict__, indent=1))
        return 0
    files = context_files(ROOT)
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"swarmscope-{cache_key(ROOT, files)}.tar"
    if not out.exists():
        print(f"build_image: building {out} (cold: minutes)", file=sys.stderr, flush=True)
        build(ROOT, p, files, out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
