#!/usr/bin/env bash
# minimal_debian.sh — the README's first command on a fresh minimal Debian 12, in a chroot.
#
#   sudo tools/minimal_debian.sh               # chroot in /var/tmp/ss-minbase (made afresh)
#   sudo tools/minimal_debian.sh DIR --keep    # elsewhere; leave the chroot there afterwards
#
# mmdebstrap makes a minbase bookworm (no make, no python3, no python3-venv, no openssl), this
# tree's files (git ls-files, as they are on disk) are copied to /root/swarmscope, and /proc,
# /sys (with bpffs and cgroup2, as any booted Debian has them), /dev and the host's
# /run/swarmscope are mounted. Then the
# README's first command runs inside as root, `sudo` dropped (a minbase has none; root is what it
# gives), and the script lists every package it had to install.
#
# Caveats: root. Needs the Debian mirror and PyPI. This network's egress proxy re-signs TLS, so
# the host's CA bundle and /etc/pip.conf are copied in (plumbing of this machine, not something
# swarmscope needs). The chroot shares the host's kernel: the probes' BPF programs are real.
set -euo pipefail
cd "$(dirname "$0")/.."
# In a private mount namespace: the chroot's /sys, cgroup2 and bpffs mounts stay out of the host's
# mount table (a test on the host that looks up the cgroup2 mount found the chroot's) and go when
# this script ends.
if [ -z "${SS_MINBASE_NS:-}" ]; then
  exec env SS_MINBASE_NS=1 unshare --mount --propagation private "$0" "$@"
fi

DIR=/var/tmp/ss-minbase
KEEP=0
for a in "$@"; do
  case "$a" in
    --keep) KEEP=1 ;;
    *) DIR=$a ;;
  esac
done

unmount_all() {
  # Deepest first: setup.sh mounts tracefs/debugfs under the chroot's /sys.
  local m
  for m in $(findmnt -rn -o TARGET | grep -F "$DIR/" | sort -r || true); do umount "$m" || umount -l "$m"; done
}
cleanup() {
  unmount_all
  if [ "$KEEP" = 0 ]; then rm -rf --one-file-system "$DIR"; fi
}

unmount_all
rm -rf --one-file-system "$DIR"
t0=$(date +%s)
mmdebstrap --variant=minbase --mode=root bookworm "$DIR" http://deb.debian.org/debian
trap cleanup EXIT
echo "minimal_debian: minbase chroot in $(($(date +%s) - t0)) s at $DIR"
for b in make python3 openssl; do
  if chroot "$DIR" sh -c "command -v $b" >/dev/null; then echo "minimal_debian: $b is already there"; fi
done

mkdir -p "$DIR/root/swarmscope"
git ls-files -z | tar --null -T - -c | tar -x -C "$DIR/root/swarmscope"
cp /etc/resolv.conf "$DIR/etc/resolv.conf"
mkdir -p "$DIR/etc/ssl/certs" "$DIR/usr/local/share/ca-certificates"
cp /etc/ssl/certs/ca-certificates.crt "$DIR/etc/ssl/certs/"
cp -r /usr/local/share/ca-certificates/. "$DIR/usr/local/share/ca-certificates/"
if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$DIR/etc/pip.conf"; fi

mount -t proc proc "$DIR/proc"
mount -t sysfs sysfs "$DIR/sys"
mount -t cgroup2 cgroup2 "$DIR/sys/fs/cgroup"
mount -t bpf bpf "$DIR/sys/fs/bpf"
mount --bind /dev "$DIR/dev"
# The cgroup tree is the host's, so the registry of who owns which group in it must be too: with a
# /run of its own, a swarmscope run on the host sweeps the chroot run's node cgroups as ownerless
# (workers/nodes.py cleanup_stale), mid-window.
mkdir -p /run/swarmscope "$DIR/run/swarmscope"
mount --bind /run/swarmscope "$DIR/run/swarmscope"
mount -t devpts devpts "$DIR/dev/pts" -o newinstance,ptmxmode=0666 2>/dev/null || true

# The README's first command: the first line of its first ```sh block, comment and sudo dropped.
cmd=$(awk '/^```sh/ {getline; print; exit}' README.md | sed 's/ *#.*//; s/sudo //g')
echo "minimal_debian: README's first command: $cmd"
chroot "$DIR" dpkg-query -W -f='${Package}\n' | sort >"$DIR/root/packages-before"
t0=$(date +%s)
rc=0
chroot "$DIR" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 bash -c "cd /root/swarmscope && $cmd" || rc=$?
echo "minimal_debian: the command exited $rc after $(($(date +%s) - t0)) s"
chroot "$DIR" dpkg-query -W -f='${Package}\n' | sort >"$DIR/root/packages-after"
added=$(comm -13 "$DIR/root/packages-before" "$DIR/root/packages-after")
echo "minimal_debian: $(echo "$added" | wc -l) packages installed by it:" $added
ls -d "$DIR"/root/swarmscope/results/*/ 2>/dev/null | sed 's/^/minimal_debian: run directory /'
exit "$rc"
