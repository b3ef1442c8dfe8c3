"""Build the swarmscope image without a Docker engine: the Dockerfile's own steps, scripted.

    python3 tools/build_image.py            # prints the OCI archive (cached by content)
    python3 tools/build_image.py --plan     # prints the steps read from the Dockerfile only
    python3 tools/build_image.py --clean    # only removes what killed builds left (every build does)
    ctr -n k8s.io images import --base-name ghcr.io/swarmscope/swarmscope ARCHIVE   # -> :0.1.0

The Dockerfile is the single source: this reads it and maps each instruction to Debian tools,
so the two cannot drift (tests/test_image_build.py also checks the mapping covers every line):

    FROM ... AS native          a build stage, run on this host (tools/build_image_stage.py)
    FROM debian:bookworm-slim   mmdebstrap --variant=minbase bookworm (slim's package set)
    WORKDIR d                   the working dir of the RUN steps and of the image
    COPY f.. d/  (before `.`)   named files into the base (mmdebstrap's copy-in)
    COPY --from=native s d/     the stage's output, one layer between the base and the code
    RUN cmd      (before `.`)   `sh -c cmd` in the base rootfs (mmdebstrap's chroot hook, cwd d)
    COPY . d                    the build context (minus .dockerignore) copied into d
    RUN cmd      (after `.`)    `sh -c cmd` chrooted into an overlay on the base: its upper
                                dir becomes one new layer (umoci raw add-layer)
    ENV / USER / ENTRYPOINT / CMD   the OCI config, set with umoci

Two caches, so a code change costs seconds, not a Debian install:
- the base, $SWARMSCOPE_CACHE/images/base-<key>/ (OCI layout + its unpacked rootfs), where key
  hashes only what the base reads: the instructions before `COPY .`, the files they name
  (pyproject.toml, constraints.txt, README.md, tools/setup.sh, tools/image-install.sh) and the
  wheel pins. Cold: minutes (apt). The last KEEP_BASES are kept.
- the image, $SWARMSCOPE_CACHE/images/swarmscope-<key>.tar, where key hashes the Dockerfile,
  this builder and every file of the context: the base plus one code layer. The last
  KEEP_ARCHIVES are kept (most recently used first).
A killed build cleans up after itself (SIGTERM/SIGINT) or at the next start (SIGKILL): see
tools/build_image_work.py.

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

import dataclasses
import fcntl
import fnmatch
import hashlib
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from build_image_stage import HOST_STAGES, HOST_TOOLS, Stage, layer_tar, run_stage
from build_image_work import Interrupted, WorkDir, mounts_under, prune, sweep_stale

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SWARMSCOPE_CACHE", "/var/cache/swarmscope")) / "images"
WHEELS = CACHE.parent / "wheels"
# hatchling's extra requirement for an editable build (`pip install -e .` in setup.sh): it asks
# for editables~=0.3 at build time, which `pip download .` does not fetch.
EDITABLE_BACKEND = ["editables==0.5"]
BASES = {"debian:bookworm-slim": ("bookworm", "minbase")}  # FROM -> (suite, mmdebstrap variant)
# The Debian base image's environment, which `ENV X=...$PATH` expands against.
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
# Bumped when the base's build steps here change (this file is not hashed into the base key: a
# change to the code-layer steps must not rebuild the base).
BASE_FORMAT = "1"
# Kept in $SWARMSCOPE_CACHE/images, most recently used first: archives (~450 MB, one per code
# state; a few engineers iterate at once) and bases (OCI layout + unpacked rootfs, ~2 GB each).
KEEP_ARCHIVES = 4
KEEP_BASES = 2


@dataclass
class Plan:
    suite: str = ""
    variant: str = ""
    workdir: str = "/"
    # The base part, before `COPY . d`: named files copied ((sources, destination dir)) and RUNs.
    base_copies: list[tuple[list[str], str]] = field(default_factory=list)
    base_runs: list[tuple[str, str]] = field(default_factory=list)  # (cwd, command)
    stage: Stage | None = None  # `FROM ... AS name`, before the image's FROM
    stage_copies: list[tuple[str, str]] = field(default_factory=list)  # `COPY --from=stage s d`
    copies: list[str] = field(default_factory=list)  # destination dirs of `COPY . d`
    runs: list[tuple[str, str]] = field(default_factory=list)  # (cwd, command), after the copy
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
    in_stage = False
    for ins, args in instructions(dockerfile.read_text()):
        if ins == "FROM" and " AS " in args.upper():
            image, _as, name = args.split()
            if p.stage or p.suite or image not in HOST_STAGES:
                raise SystemExit(f"build_image: one build stage FROM {'|'.join(HOST_STAGES)} first: {args}")
            p.stage, in_stage = Stage(name, image), True
        elif in_stage and ins != "FROM":
            _stage_instruction(p.stage, ins, args)  # type: ignore[arg-type]
        elif ins == "COPY" and args.startswith("--from="):
            name, src, dst = args.removeprefix("--from=").split()
            if not p.stage or name != p.stage.name or p.copies or not dst.endswith("/"):
                raise SystemExit(f"build_image: only `COPY --from=STAGE SRC DIR/`, before `COPY .`: {args}")
            p.stage_copies.append((src, dst))
        elif ins == "FROM":
            in_stage = False
            if args not in BASES:
                raise SystemExit(f"build_image: no mmdebstrap mapping for FROM {args}")
            p.suite, p.variant = BASES[args]
        elif ins == "WORKDIR":
            p.workdir = args
        elif ins == "COPY":
            *srcs, dst = args.split()
            if srcs == ["."]:
                p.copies.append(dst)
            elif p.copies or "." in srcs or not dst.endswith("/"):
                # the base may read named files only; after `COPY .` everything is code
                raise SystemExit(f"build_image: only `COPY . DIR` or, before it, `COPY FILES DIR/`: {args}")
            else:
                p.base_copies.append((srcs, dst))
        elif ins == "RUN":
            (p.runs if p.copies else p.base_runs).append((p.workdir, args))
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


def _stage_instruction(s: Stage, ins: str, args: str) -> None:
    if ins == "WORKDIR":
        s.workdir = args
    elif ins == "COPY" and args.startswith("--from="):
        image, src, dst = args.removeprefix("--from=").split()
        if image not in HOST_TOOLS:
            raise SystemExit(f"build_image: stage {s.name}: no host tool for COPY --from={image}")
        s.tools.append((image, src, dst))
    elif ins == "COPY":
        *srcs, dst = args.split()
        s.copies.append((srcs, dst))
    elif ins == "RUN":
        s.runs.append(args)
    else:
        raise SystemExit(f"build_image: stage {s.name}: {ins} has no scripted equivalent")


def context_files(root: Path) -> list[Path]:
    """The build context: every file under root not matched by .dockerignore (sorted)."""
    ignore = [
        line.strip().lstrip("/")
        for line in (root / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def matches(pat: str, parts: list[str]) -> bool:
        if pat.startswith("**/"):
            return any(fnmatch.fnmatch(x, pat[3:]) for x in parts)
        return any(fnmatch.fnmatch("/".join(parts[: i + 1]), pat) for i in range(len(parts)))

    def ignored(rel: str) -> bool:
        # As Docker: the last pattern that matches decides, `!pattern` taking a path back in.
        out = False
        for pat in ignore:
            if matches(pat.removeprefix("!"), rel.split("/")):
                out = not pat.startswith("!")
        return out

    def pruned(rel_dir: str) -> bool:
        # An ignored directory is not walked unless an exception names something inside it.
        kept = [pat[1:] for pat in ignore if pat.startswith("!")]
        return ignored(rel_dir) and not any(k.startswith(f"{rel_dir}/") for k in kept)

    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if not pruned(os.path.normpath(os.path.join(rel_dir, d)))]
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


def _hash_files(h: hashlib._Hash, root: Path, files: list[Path]) -> None:
    for f in files:
        h.update(f"\0{f}\0".encode())
        h.update((root / f).read_bytes() if not (root / f).is_symlink() else os.readlink(root / f).encode())


def base_key(root: Path, p: Plan) -> str:
    """Hashes exactly what the base reads: its instructions, its named files, the wheel pins."""
    h = hashlib.sha256(f"{BASE_FORMAT}\0{p.suite}\0{p.variant}\0{p.workdir}\0".encode())
    h.update(json.dumps([p.base_copies, p.base_runs]).encode())
    named = sorted({Path(s) for srcs, _dst in p.base_copies for s in srcs})
    for f in named:
        if not (root / f).is_file() or (root / f).is_symlink():
            raise SystemExit(f"build_image: the base copies regular files only, not {f}")
    _hash_files(h, root, named)
    h.update(wheel_key(root).encode())
    return h.hexdigest()[:16]


def cache_key(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256((root / "Dockerfile").read_bytes())
    # this builder is not in the context (.dockerignore); the stage's mapping is part of it
    h.update(Path(__file__).read_bytes() + (Path(__file__).parent / "build_image_stage.py").read_bytes())
    _hash_files(h, root, files)
    return h.hexdigest()[:16]


def build_base(root: Path, p: Plan, key: str) -> Path:
    """The base image (OCI layout + its unpacked rootfs) in CACHE/base-<key>; built once."""
    final = CACHE / f"base-{key}"
    with (CACHE / f"base-{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second builder of the same base waits, then reuses
        if (final / ".complete").exists():
            os.utime(final)  # most recently used: kept by prune()
            return final
        print(f"build_image: building base {final} (cold: minutes)", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        with WorkDir(CACHE) as w:
            _build_base(root, p, w)
            (w.path / ".complete").touch()
            shutil.rmtree(final, ignore_errors=True)
            (w.path / "out").rename(final)
            (w.path / ".complete").rename(final / ".complete")
        print(f"build_image: base built in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return final


def _build_base(root: Path, p: Plan, w: WorkDir) -> None:
    wd = w.path
    hooks = [f'--customize-hook=mkdir -p "$1{p.workdir}"']
    for i, (srcs, dst) in enumerate(p.base_copies):
        ctx = wd / f"context{i}"
        ctx.mkdir()
        for s in srcs:
            shutil.copy2(root / s, ctx / Path(s).name)
        hooks += [f'--customize-hook=mkdir -p "$1{dst}"', f"--customize-hook=copy-in {ctx}/. {dst}"]
    # The pinned wheels, fetched on the host, installed offline by the RUN steps and removed.
    wh = wheelhouse(root)
    hooks.append(f'--customize-hook=cp -a {wh} "$1/tmp/wheels"')
    pip_env = "PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wheels "
    for cwd, cmd in p.base_runs:
        inner = f"cd {shlex.quote(cwd)} && env {pip_env}sh -c {shlex.quote(cmd)}"
        hooks.append(f'--customize-hook=chroot "$1" sh -c {shlex.quote(inner)}')
    hooks.append('--customize-hook=rm -rf "$1/tmp/wheels"')
    rootfs_tar = wd / "rootfs.tar"
    # mmdebstrap's own temp dir goes under wd, so its mounts (/proc, /sys and their submounts,
    # for the hooks) are found and removed by WorkDir's cleanup however the build ends.
    argv = ["mmdebstrap", f"--variant={p.variant}", "--mode=root", *hooks, p.suite, str(rootfs_tar)]
    w.run(argv, env={**os.environ, "TMPDIR": str(wd)})
    for m in mounts_under(wd):
        subprocess.run(["umount", "-l", m], check=False, capture_output=True)
    out = wd / "out"
    out.mkdir()
    oci = f"{out / 'oci'}:base"
    w.run(["umoci", "init", "--layout", str(out / "oci")])
    w.run(["umoci", "new", "--image", oci])
    w.run(["umoci", "unpack", "--image", oci, str(out / "bundle")])
    w.run(["tar", "-C", str(out / "bundle" / "rootfs"), "-xpf", str(rootfs_tar)])
    rootfs_tar.unlink()
    w.run(["umoci", "repack", "--image", oci, str(out / "bundle")])
    # The unpacked rootfs stays: it is the lower dir the code steps run on (build_code).


def build_code(root: Path, p: Plan, files: list[Path], base: Path, out: Path) -> None:
    """The code layer on the cached base: `COPY .` and the RUNs after it, one new layer."""
    with WorkDir(CACHE) as w:
        wd = w.path
        # The stage's output, its own layer below the code (the code's RUNs see it too).
        native = wd / "native"
        if p.stage:
            native.mkdir()
            top = run_stage(root, p.stage, native)
            native_tar = layer_tar(top, p.stage_copies, p.stage.workdir, native)
        lower = f"{native / 'tree'}:{base}/bundle/rootfs" if p.stage else f"{base}/bundle/rootfs"
        ctx = wd / "context"
        for f in files:
            (ctx / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / f, ctx / f, follow_symlinks=False)
        for d in ("upper", "work", "merged", "oci"):
            (wd / d).mkdir()
        # The RUNs write into an overlay on the base rootfs: its upper dir is exactly the layer.
        # Mounts live in a private mount namespace, so they end with it, whatever kills us.
        sh = [f"mount -t overlay overlay -o lowerdir={lower},upperdir={wd}/upper,"
              f"workdir={wd}/work {wd}/merged"]  # fmt: skip
        for dst in p.copies:
            sh.append(f"mkdir -p {wd}/merged{dst} && cp -a {ctx}/. {wd}/merged{dst}/")
        sh += [f"mount --bind /dev {wd}/merged/dev", f"mount -t proc proc {wd}/merged/proc"]
        # No bytecode written by the step's imports: the image had none before the layering.
        step_env = {**BASE_ENV, "HOME": "/root", "PYTHONDONTWRITEBYTECODE": "1"}
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in step_env.items())
        for cwd, cmd in p.runs:
            inner = f"cd {shlex.quote(cwd)} && sh -c {shlex.quote(cmd)}"
            sh.append(f"env -i {env} chroot {wd}/merged sh -c {shlex.quote(inner)}")
        w.run(["unshare", "--mount", "--propagation", "private", "sh", "-ec", "\n".join(sh)])
        # /dev and /proc were mounted over, so nothing of theirs is in upper: it holds only what
        # the steps wrote. A deletion of a base file would be an overlay whiteout (a 0/0 char
        # device), which an OCI layer spells differently: refused rather than mistranslated.
        whiteouts = [
            f"{d}/{n}"
            for d, dirs, names in os.walk(wd / "upper")
            for n in dirs + names
            if stat.S_ISCHR(os.lstat(f"{d}/{n}").st_mode) and os.lstat(f"{d}/{n}").st_rdev == 0
        ]
        if whiteouts:
            raise SystemExit(f"build_image: a step after `COPY .` deleted base files: {whiteouts[:5]}")
        layer = wd / "layer.tar"
        w.run(["tar", "-C", str(wd / "upper"), "--numeric-owner", "-cf", str(layer), "."])
        # The base layout's blobs are content-addressed and never rewritten: hard links suffice.
        w.run(["cp", "-al", str(base / "oci" / "blobs"), str(wd / "oci" / "blobs")])
        for name in ("index.json", "oci-layout"):
            shutil.copy2(base / "oci" / name, wd / "oci" / name)
        version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
        oci = f"{wd / 'oci'}:{version}"  # tagged with the chart's default appVersion tag
        image = f"{wd / 'oci'}:base"
        if p.stage:
            w.run(["umoci", "raw", "add-layer", "--image", image, "--tag", "native", str(native_tar)])
            image = f"{wd / 'oci'}:native"
        w.run(["umoci", "raw", "add-layer", "--image", image, "--tag", version, str(layer)])
        if p.stage:
            w.run(["umoci", "rm", "--image", image])
        w.run(["umoci", "rm", "--image", f"{wd / 'oci'}:base"])
        cfg = ["--config.workingdir", p.workdir, "--config.user", p.user]
        cfg += [f"--config.env={k}={v}" for k, v in p.env.items()]
        cfg += [a for c in p.cmd for a in ("--config.cmd", c)]
        write_archive(w, oci, p.entrypoint, cfg, out)


def write_archive(w: WorkDir, oci: str, entrypoint: list[str], config: list[str], out: Path) -> None:
    """Set the image's OCI config (`umoci config` flags), drop unused blobs, tar the layout to
    ``out`` (atomically). ``oci`` is ``LAYOUT:TAG``; tools/build_igcluster_image.py uses it too."""
    layout = oci.rsplit(":", 1)[0]
    cfg = ["umoci", "config", "--image", oci, "--os", "linux", "--architecture", "amd64", *config]
    cfg += [a for e in entrypoint for a in ("--config.entrypoint", e)]
    w.run(cfg)
    w.run(["umoci", "gc", "--layout", layout])
    tmp = out.with_suffix(".tmp")
    w.run(["tar", "-C", layout, "-cf", str(tmp), "."])
    tmp.rename(out)


def wheel_key(root: Path) -> str:
    h = hashlib.sha256((root / "pyproject.toml").read_bytes() + (root / "constraints.txt").read_bytes())
    return h.hexdigest()[:16]


def wheelhouse(root: Path) -> Path:
    """The pinned runtime wheels plus the build backend, downloaded once per pin set."""
    d = WHEELS / wheel_key(root)
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


def main(argv: list[str]) -> int:
    p = plan(ROOT / "Dockerfile")
    if "--plan" in argv:
        print(json.dumps(dataclasses.asdict(p), indent=1))
        return 0
    CACHE.mkdir(parents=True, exist_ok=True)
    for d in sweep_stale(CACHE):
        print(f"build_image: cleaned {d} (its builder was killed)", file=sys.stderr, flush=True)
    if "--clean" in argv:
        return 0
    files = context_files(ROOT)
    out = CACHE / f"swarmscope-{cache_key(ROOT, files)}.tar"
    try:
        if out.exists():
            os.utime(out)  # most recently used: kept by prune()
        elif os.environ.get("SWARMSCOPE_NO_BUILD"):  # under the tests: built by `make tools`, not here
            print(f"build_image: the image is not built ({out}): run `make tools`", file=sys.stderr)
            return 3
        else:
            base = build_base(ROOT, p, base_key(ROOT, p))
            t0 = time.monotonic()
            build_code(ROOT, p, files, base, out)
            print(f"build_image: code layer in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    except Interrupted as e:
        print(f"build_image: {e}: stopped, work dir cleaned", file=sys.stderr, flush=True)
        return 128 + signal.Signals[str(e)].value
    # Bounded cache: one archive per code change and one base per dependency change pile up.
    prune(CACHE, "swarmscope-*.tar", KEEP_ARCHIVES)
    prune(CACHE, "base-*[!k]", KEEP_BASES)  # the dirs, not their .lock files
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
