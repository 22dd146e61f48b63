#!/usr/bin/env bash
# The test command (README and .ci/run): make the venv, install the package with its test extras,
# install and start the real components the integration tests use (scripts/setup/*.sh: SLURM,
# Ray, Kubernetes schema validation, docker-compose, a private Docker engine, the pages' pinned
# JavaScript from npm; each idempotent),
# run the unit and integration tests, then the performance benchmarks.
#
# `bash scripts/test.sh --quick`: the inner loop. The core's and the plugins' tests that need none of
# those components (every file but tests/conftest.py's SLOW ones), on parallel workers, in a few
# minutes; no set-up beyond the venv and the pages' pinned JavaScript, no performance tier. CI runs
# the whole command.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
if [ "${1:-}" = "--quick" ]; then
  shift
  bash scripts/setup/vega.sh >/dev/null
  exec .venv/bin/python -m pytest -q -n "${SHARDEVAL_TEST_WORKERS:-3}" -m "not slow" tests --ignore=tests/perf "$@"
fi
# tests/test_docker.py starts the private Docker engine (scripts/setup/docker.sh) and stops it at
# its end; should the run be cut short, this stops it too, unless it was running before.
stop_docker=false
if ! bash scripts/setup/docker.sh status >/dev/null 2>&1; then
  stop_docker=true
fi
# Each extra in a fresh venv of its own (tests/test_extras_fresh_venv.py): mostly pip waiting on
# the registry, so it runs beside the set-up and the first tests (in a session of its own, so that
# a run cut short stops all of it); its outcome is checked before the performance tier, which
# needs the machine to itself.
# Its wheel carries the pages' pinned JavaScript, fetched first (the set-up below fetches it again: up to date).
bash scripts/setup/vega.sh
extras_log=$(mktemp)
setsid .venv/bin/python -m pytest -q tests/test_extras_fresh_venv.py >"$extras_log" 2>&1 &
extras=$!
cleanup() {
  kill -- -"$extras" 2>/dev/null || true
  if $stop_docker; then bash scripts/setup/docker.sh stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
for setup in scripts/setup/*.sh; do
  [ -e "$setup" ] || continue
  echo "== $setup"
  bash "$setup"
done
# Parallel workers (pytest-xdist): most tests wait on servers and subprocesses, not on the cores.
# Files that share one thing of the machine run on one worker (tests/conftest.py SHARED); the tests
# that time themselves run alone afterwards (SERIAL). SHARDEVAL_TEST_WORKERS=1: all one after another.
# A pass that selects nothing (`-k` naming tests of the other pass only) is not a failure (pytest's 5).
selects_nothing_or_passes() { "$@" || { rc=$?; [ "$rc" -eq 5 ] || exit "$rc"; }; }
workers=${SHARDEVAL_TEST_WORKERS:-3}
if [ "$workers" -gt 1 ]; then
  selects_nothing_or_passes .venv/bin/python -m pytest -q -n "$workers" -m "not serial" tests --ignore=tests/perf \
    --ignore=tests/test_extras_fresh_venv.py "$@"
  selects_nothing_or_passes .venv/bin/python -m pytest -q -m serial tests --ignore=tests/perf \
    --ignore=tests/test_extras_fresh_venv.py "$@"
else
  .venv/bin/python -m pytest -q tests --ignore=tests/perf --ignore=tests/test_extras_fresh_venv.py "$@"
fi
echo "== tests/test_extras_fresh_venv.py (run beside the others)"
if ! wait $extras; then cat "$extras_log"; exit 1; fi
tail -n 1 "$extras_log"
# Each benchmark's own time too (--durations=0): the perf tier is a third of CI's wall time.
.venv/bin/python -m pytest -q tests/perf -s --durations=0
