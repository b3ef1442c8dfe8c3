"""Build the swarmscope image without a Docker engine: the Dockerfile's own steps, scripted.

    python3 tools/build_image.py            # prints the OCI archive (cached by content)
    python3 tools/build_image.py --plan     # prints the steps read from the Dockerfile only
    ctr -n k8s.io images import --index-name ghcr.io/swarmscope/swarmscope:0.1.0 ARCHIVE

The Dockerfile is the single source: this reads it and maps each instruction to Debian tools,
so the two cannot drift (tests/test_image_build.py also checks the mapping covers every line):

    FROM debian:bookworm-slim   mmdebstrap --variant=minbase bookworm (slim's package set)
    WORKDIR d / COPY . d        the build context (minus .dockerignore) copied into d
    RUN cmd                     `sh -c cmd` in the rootfs (mmdebstrap's chroot hook, cwd d)
    ENV / USER / ENTRYPOINT / CMD   the OCI config, set with umoci

The archive lands in $SWARMSCOPE_CACHE/images/swarmscope-<key>.tar where key hashes the
Dockerfile and every file of the context: an edit builds a new one, a rerun returns at once.

Caveats: root only (mmdebstrap's root mode); the RUN step downloads Debian packages and the
pinned wheels, so a cold build takes minutes. Instructions other than the ones above are
refused, not ignored.
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
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SWARMSCOPE_CACHE", "/var/cache/swarmscope")) / "images"
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
        for f in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, f))
            if not ignored(rel):
                out.append(Path(rel))
    return sorted(out)


def cache_key(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256((root / "Dockerfile").read_bytes())
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
        # A build host behind a TLS-inspecting proxy trusts an extra CA (its SSL_CERT_FILE /
        # PIP_CERT): the RUN steps get that bundle for their downloads, and it is removed again,
        # so the image keeps Debian's own trust store.
        ca = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or ""
        ca_env = ""
        if ca and Path(ca).is_file():
            hooks.append(f"--customize-hook=upload {ca} /tmp/build-ca.crt")
            ca_env = "PIP_CERT=/tmp/build-ca.crt SSL_CERT_FILE=/tmp/build-ca.crt "
        for cwd, cmd in p.runs:
            inner = f"cd {shlex.quote(cwd)} && env -u PIP_FIND_LINKS {ca_env}sh -c {shlex.quote(cmd)}"
            hooks.append(f'--customize-hook=chroot "$1" sh -c {shlex.quote(inner)}')
        if ca_env:
            hooks.append('--customize-hook=rm -f "$1/tmp/build-ca.crt"')
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
        oci = f"{wd / 'oci'}:swarmscope"
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
