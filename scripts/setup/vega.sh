#!/usr/bin/env bash
# The pages' JavaScript (Vega, Vega-Lite, vega-embed), pinned in plugins/shardeval_pages/vega.lock.json:
# fetched from the npm registry, checked against the lock's integrity hashes, into
# plugins/shardeval_pages/vendor/, which the page tests of this (editable) checkout read. Tarballs
# are cached under ${SHARDEVAL_CI_CACHE:-/var/cache/shardeval-ci}/npm: a second run is offline.
# Idempotent. (build/build.sh runs the same fetch itself before building the wheel and the one file.)
set -euo pipefail
cd "$(dirname "$0")/../.."
"${PYTHON:-python3}" plugins/shardeval_pages/vendor.py fetch
