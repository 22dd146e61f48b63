#!/usr/bin/env bash
# Build dist/shardeval.pyz (the one-file app), plus the wheel and sdist, from this tree.
# Needs network access to PyPI only for the wheels of the other targets (uv caches them).
# Options go to build/zipapp.py: --relock re-resolves build/requirements.lock.
set -euo pipefail
cd "$(dirname "$0")/.."
# The system certificate store, as pip uses it: behind a proxy with its own CA that is where the CA is.
export UV_NATIVE_TLS=${UV_NATIVE_TLS:-1}
VENV=build/out/venv
if [ ! -x "$VENV/bin/uv" ] || [ ! -x "$VENV/bin/shiv" ]; then
  rm -rf "$VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check shiv==1.0.8 uv==0.13.9
fi
# The pages' JavaScript (pinned in plugins/shardeval_pages/vega.lock.json) goes into the wheel as
# package data, so it is fetched first; offline once its tarballs are cached.
"${PYTHON:-python3}" plugins/shardeval_pages/vendor.py fetch
exec "$VENV/bin/python" build/zipapp.py --uv "$VENV/bin/uv" --work build/out/work "$@"
