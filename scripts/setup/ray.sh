#!/usr/bin/env bash
# Install Ray (the `ray` extra) into the project's venv for the `cluster.type: ray` orchestrator
# and tests/test_ray.py. Idempotent: does nothing when the pinned version is already there.
# Ray is never started here; the tests start it on 127.0.0.1 themselves.
set -euo pipefail
cd "$(dirname "$0")/../.."
RAY_VERSION=${RAY_VERSION:-2.60.0}
PY=${VENV_PYTHON:-.venv/bin/python}
if [ ! -x "$PY" ]; then
  echo "scripts/setup/ray.sh: $PY not found; create the venv first (scripts/test.sh does)" >&2
  exit 2
fi
have=$("$PY" - <<'PY' 2>/dev/null || true
from importlib.metadata import version
print(version("ray"))
PY
)
if [ "$have" = "$RAY_VERSION" ]; then
  echo "ray $have already installed"
  exit 0
fi
echo "installing ray==$RAY_VERSION into $PY (about 35 s)"
"$PY" -m pip install -q --disable-pip-version-check "ray==$RAY_VERSION"
