#!/bin/sh
# shardeval: one file, a Python zipapp. Run it as `./shardeval.pyz ...` and this header runs this
# same file with the first Python >= 3.10 of: $SHARDEVAL_PYTHON, the versions the file has wheels
# for, newest first (the build writes them below), then python3. Or run it as
# `python3.11 shardeval.pyz ...`, which skips the header.
for py in "${SHARDEVAL_PYTHON:-}" @PYTHONS@ python3; do
  [ -n "$py" ] || continue
  command -v "$py" >/dev/null 2>&1 || continue
  if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    exec "$py" "$0" "$@"
  fi
done
echo "shardeval: error: no Python >= 3.10 found (tried \$SHARDEVAL_PYTHON, @PYTHONS@, python3 on PATH); install one or set SHARDEVAL_PYTHON to its path" >&2
exit 2
