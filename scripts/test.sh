#!/usr/bin/env bash
# The test command (README and .ci/run): make the venv, install the package with its test extras,
# install and start the real components the integration tests use (scripts/setup/*.sh: SLURM,
# Ray, Kubernetes schema validation, docker-compose, a private Docker engine, the pages' pinned
# JavaScript from npm; each idempotent),
# run the unit and integration tests, then the performance benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
# tests/test_docker.py starts the private Docker engine (scripts/setup/docker.sh) and stops it at
# its end; should the run be cut short, this stops it too, unless it was running before.
if ! bash scripts/setup/docker.sh status >/dev/null 2>&1; then
  trap 'bash scripts/setup/docker.sh stop >/dev/null 2>&1 || true' EXIT
fi
for setup in scripts/setup/*.sh; do
  [ -e "$setup" ] || continue
  echo "== $setup"
  bash "$setup"
done
.venv/bin/python -m pytest -q tests --ignore=tests/perf "$@"
.venv/bin/python -m pytest -q tests/perf -s
