"""Shared by the zipapp tests and the start-up benchmark: the built file, interpreters, configs.

dist/shardeval.pyz is built by scripts/setup/zipapp.sh before the tests; if it is missing or
older than any source it packs, it is rebuilt here (about a minute), so a test never runs
yesterday's archive.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYZ = REPO / "dist" / "shardeval.pyz"
LOCK = REPO / "build" / "requirements.lock"
ARM64_ROOT = Path(os.environ.get("SHARDEVAL_CI_CACHE", "/var/cache/shardeval-ci")) / "arm64-bookworm"
SOURCES = ("core", "plugins", "shims", "build/zipapp.py", "build/pythons.py", "build/requirements.lock", "pyproject.toml")

sys.path.insert(0, str(REPO / "build"))
import pythons  # noqa: E402  (build/pythons.py: the build and the tests agree on the interpreters)

SUPPORTED = pythons.SUPPORTED


def _newest_source() -> float:
    newest = 0.0
    for name in SOURCES:
        path = REPO / name
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        newest = max([newest, *(p.stat().st_mtime for p in files)])
    return newest


@lru_cache(maxsize=1)
def built_zipapp() -> Path:
    """dist/shardeval.pyz, current with the tree."""
    if not PYZ.exists() or PYZ.stat().st_mtime < _newest_source():
        proc = subprocess.run(["bash", str(REPO / "build" / "build.sh")], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return PYZ


def interpreters() -> dict[str, str]:
    return pythons.available()


def write_config(folder: Path, out: Path, *, n: int = 40, shards: int = 2, extra: str = "") -> Path:
    """A small sharded evaluation against the built-in simulator (each shard starts its own)."""
    path = folder / "eval.yaml"
    path.write_text(
        f"""
services:
  model: {{type: sim, bench: arith, accuracy: 0.7, ttft_ms: 2, itl_ms: 0, output_tokens: 8}}
benchmarks:
  - {{name: arith, params: {{n: {n}}}, repeats: 2, max_concurrent: 16, solver: {{type: simple, service: model}}}}
{extra}cluster: {{type: local, shards: {shards}}}
output: {{dir: {out}}}
"""
    )
    return path


def run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 180, **kw) -> subprocess.CompletedProcess[str]:
    """Run a command with a clean-ish environment: the test venv's variables do not leak in."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDEVAL_", "SHIV_", "VIRTUAL_ENV", "PYTHON"))}
    return subprocess.run(argv, env={**base, **(env or {})}, capture_output=True, text=True, timeout=timeout, **kw)
