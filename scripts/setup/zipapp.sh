#!/usr/bin/env bash
# Prepare what tests/test_zipapp.py and tests/perf/test_startup.py use:
#   dist/shardeval.pyz   built from this tree (build/build.sh; the target wheels come from PyPI
#                        once, then from uv's cache: about 80 s)
#   an arm64 Debian root with python3, under ${SHARDEVAL_CI_CACHE:-/var/cache/shardeval-ci},
#                        made by debootstrap once (about 3 minutes), and qemu-user-static
#                        registered with binfmt_misc, so the aarch64 build runs for real here.
# Idempotent: a second run rebuilds only the zipapp. Needs root for apt, binfmt and chroot; where
# that is missing it says so and the aarch64 test skips with the same reason.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash build/build.sh 2>&1 | grep -v "^WARNING: Location" || { echo "zipapp build failed" >&2; exit 1; }

CACHE=${SHARDEVAL_CI_CACHE:-/var/cache/shardeval-ci}
ROOTFS=$CACHE/arm64-bookworm
if [ "$(id -u)" != 0 ]; then
  echo "zipapp setup: not root, so no arm64 root or binfmt: the aarch64 test will skip" >&2
  exit 0
fi
need=()
for pkg in debootstrap qemu-user-static binfmt-support; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
fi
if [ -e /proc/sys/fs/binfmt_misc/register ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
fi
if [ ! -x "$ROOTFS/usr/bin/python3" ]; then
  mkdir -p "$CACHE"
  rm -rf "$ROOTFS.tmp"
  echo "zipapp setup: debootstrap arm64 bookworm with python3 (once, about 3 minutes)"
  debootstrap --arch=arm64 --variant=minbase --include=python3 bookworm "$ROOTFS.tmp" \
    http://deb.debian.org/debian >"$CACHE/arm64-debootstrap.log" 2>&1 \
    || { echo "zipapp setup: debootstrap failed, see $CACHE/arm64-debootstrap.log" >&2; exit 1; }
  mv "$ROOTFS.tmp" "$ROOTFS"
fi
echo "zipapp setup: $(ls -l dist/shardeval.pyz | awk '{print $5}') bytes; arm64 root at $ROOTFS"
