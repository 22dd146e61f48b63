#!/usr/bin/env bash
# Offline checkers for the Kubernetes and Docker Compose orchestrators (tests/test_kubernetes.py,
# tests/test_compose.py). No cluster can run here, so the tests validate the rendered files with
# these and run each container's command locally (tests/test_docker.py runs them in a real Docker
# engine, scripts/setup/docker.sh):
#   - kubernetes-validate 1.37.0 (PyPI) into .venv: JSON-schema validation for Kubernetes 1.25-1.37
#   - Debian's docker-compose (1.29): `docker-compose -f FILE config` parses and validates, no engine
# Idempotent: installs only what is missing. Safe to run concurrently with other setup scripts.
set -euo pipefail
cd "$(dirname "$0")/../.."

KV_VERSION=1.37.0
PY=.venv/bin/python
if [ ! -x "$PY" ]; then
  echo "k8s_compose.sh: .venv/bin/python not found; create the venv first (scripts/test.sh does)" >&2
  exit 1
fi
if [ "$(.venv/bin/kubernetes-validate --version 2>/dev/null || true)" != "$KV_VERSION" ]; then
  echo "k8s_compose.sh: installing kubernetes-validate==$KV_VERSION into .venv"
  "$PY" -m pip install -q --disable-pip-version-check "kubernetes-validate==$KV_VERSION"
fi

if ! command -v docker-compose >/dev/null 2>&1; then
  echo "k8s_compose.sh: installing Debian's docker-compose"
  if [ "$(id -u)" -ne 0 ]; then
    echo "k8s_compose.sh: need root for apt-get install docker-compose" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt=(apt-get -o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
  if ! "${apt[@]}" install -y -q --no-install-recommends docker-compose >/dev/null; then
    "${apt[@]}" update -q >/dev/null
    "${apt[@]}" install -y -q --no-install-recommends docker-compose >/dev/null
  fi
fi
echo "k8s_compose.sh: kubernetes-validate $(.venv/bin/kubernetes-validate --version), $(docker-compose version --short)"
