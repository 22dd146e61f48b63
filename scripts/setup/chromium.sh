#!/usr/bin/env bash
# Debian's chromium, which the page tests (tests/browser.py) drive headless through Playwright's
# Python API: Playwright's own browser download cannot run here, Debian's package can. Idempotent:
# nothing to do when `chromium` is already on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "chromium.sh: chromium is missing and installing it needs root (apt-get install -y chromium)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
chromium --version
