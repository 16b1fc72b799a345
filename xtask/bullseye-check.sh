#!/usr/bin/env bash
# Runs the release archives from target/dist/ in Debian 11 (bullseye, glibc 2.31) roots:
# the x86-64 binary natively in a chroot, the aarch64 one under qemu-user (binfmt_misc).
# Needs root and Debian's debootstrap, qemu-user-static and binfmt-support (installed when
# missing). The roots are made once under ${ROOTS:-/var/tmp/osmeter-bullseye} and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
roots=${ROOTS:-/var/tmp/osmeter-bullseye}
mirror=${MIRROR:-http://deb.debian.org/debian}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
[ "$(id -u)" = 0 ] || { echo "bullseye-check: needs root (debootstrap, chroot)" >&2; exit 1; }
for t in x86_64 aarch64; do
    [ -f "target/dist/osmeter-$version-$t-unknown-linux-gnu.tar.gz" ] \
        || { echo "bullseye-check: no target/dist archive for $t: run cargo xtask dist" >&2; exit 1; }
done
command -v debootstrap >/dev/null && command -v qemu-aarch64-static >/dev/null \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap qemu-user-static binfmt-support >/dev/null
mkdir -p "$roots"
[ -x "$roots/amd64/bin/sh" ] || debootstrap --variant=minbase bullseye "$roots/amd64" "$mirror" >/dev/null
mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
if [ ! -x "$roots/arm64/bin/sh" ] || [ -d "$roots/arm64/debootstrap" ]; then
    debootstrap --variant=minbase --arch arm64 --foreign bullseye "$roots/arm64" "$mirror" >/dev/null
    cp /usr/bin/qemu-aarch64-static "$roots/arm64/usr/bin/"
    chroot "$roots/arm64" /debootstrap/debootstrap --second-stage >/dev/null
fi
status=0
for pair in amd64:x86_64 arm64:aarch64; do
    root=$roots/${pair%%:*} t=${pair#*:}-unknown-linux-gnu
    mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
    mountpoint -q "$root/sys" || mount --rbind /sys "$root/sys"
    rm -rf "$root/opt/osmeter-"* "$root/root/res"
    mkdir -p "$root/opt"
    tar xzf "target/dist/osmeter-$version-$t.tar.gz" -C "$root/opt"
    bin=/opt/osmeter-$version-$t/osmeter
    echo "== $t in bullseye ($(chroot "$root" ldd --version | head -1))"
    chroot "$root" sh -c "cd /root && $bin machine >/dev/null" && echo "osmeter machine: ok" \
        || { echo "osmeter machine: FAILED"; status=1; }
    if chroot "$root" sh -c "cd /root && $bin run --profile smoke --only 'cpu.*,mem.*' --no-history --quiet --out /root/res >/dev/null"; then
        chroot "$root" sh -c 'cat /root/res/*/results.json' | python3 -c '
import json, sys, collections
d = json.load(sys.stdin)
print("osmeter run --profile smoke --only cpu.*,mem.*: exit 0;", dict(collections.Counter(e["status"] for e in d["experiments"])), d["tool"])'
    else
        echo "osmeter run: FAILED"; status=1
    fi
done
exit $status
