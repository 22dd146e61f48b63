"""ruff's lint and format (configured in pyproject.toml) hold over every Python file of the
repository: the checks a reviewer would otherwise make by eye, run by the test command."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def run_ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", *args, "."], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_ruff_lint_is_clean() -> None:
    done = run_ruff("check", "--no-cache", "--output-format", "concise")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_is_clean() -> None:
    done = run_ruff("format", "--check", "--no-cache")
    assert done.returncode == 0, done.stdout + done.stderr
