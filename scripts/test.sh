#!/usr/bin/env bash
# The test command (README and .ci/run): make the venv, install the package with its test extras,
# run the unit and integration tests, then the performance benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
.venv/bin/python -m pytest -q tests --ignore=tests/perf "$@"
.venv/bin/python -m pytest -q tests/perf -s
