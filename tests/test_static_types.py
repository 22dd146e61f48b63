"""The type checker runs in the test command (issue 41): mypy, configured in pyproject.toml's
[tool.mypy], finds no error in the core nor in any built-in plugin.

mypy reads this checkout's sources (`mypy_path`: core/ and plugins/), never an installed copy, and
keeps its cache in .mypy_cache/ of the checkout, so a second run reads only what changed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

# mypy over 15 plugins with a cold cache takes minutes on two busy cores (the full run timed out at 120 s)
pytestmark = pytest.mark.timeout(900)

PLUGINS = Path(REPO) / "plugins"


def mypy(*packages: str) -> subprocess.CompletedProcess[str]:
    """`python -m mypy -p PACKAGE ...` in the checkout, with its pyproject.toml's settings."""
    args = [arg for package in packages for arg in ("-p", package)]
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )


def check(done: subprocess.CompletedProcess[str]) -> None:
    """Zero errors, or mypy's whole report in the failure."""
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert "Success: no issues found" in done.stdout, report


def test_the_core_type_checks() -> None:
    check(mypy("shardeval"))


def test_every_plugin_type_checks() -> None:
    plugins = sorted(p.name for p in PLUGINS.iterdir() if (p / "__init__.py").exists())
    assert "shardeval_pages" in plugins  # the folder listing found the built-ins
    check(mypy(*plugins))
