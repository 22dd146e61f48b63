#!/bin/sh
# shardeval: one file, a Python zipapp. Run it as `./shardeval.pyz ...` and this header finds a
# Python >= 3.10 (SHARDEVAL_PYTHON first, then python3, then python3.13 ... python3.10) and runs
# this same file with it; or run it as `python3.11 shardeval.pyz ...`, which skips the header.
for py in "${SHARDEVAL_PYTHON:-}" python3 python3.13 python3.12 python3.11 python3.10; do
  [ -n "$py" ] || continue
  command -v "$py" >/dev/null 2>&1 || continue
  if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    exec "$py" "$0" "$@"
  fi
done
echo "shardeval: error: no Python >= 3.10 found (tried \$SHARDEVAL_PYTHON, python3, python3.13 ... python3.10 on PATH); install one or set SHARDEVAL_PYTHON to its path" >&2
exit 2
