#!/usr/bin/env bash
# The test command (README and .ci/run): make the venv, install the package with its test extras,
# install and start the real components the integration tests use (scripts/setup/*.sh: SLURM,
# Ray, Kubernetes schema validation, docker-compose; each idempotent), run the unit and
# integration tests, then the performance benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
for setup in scripts/setup/*.sh; do
  [ -e "$setup" ] || continue
  echo "== $setup"
  bash "$setup"
done
.venv/bin/python -m pytest -q tests --ignore=tests/perf "$@"
.venv/bin/python -m pytest -q tests/perf -s
