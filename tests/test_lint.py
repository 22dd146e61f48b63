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


def test_no_core_function_is_above_complexity_20() -> None:
    """radon's cyclomatic complexity (which counts boolean operators, unlike mccabe's) of every
    function and method of the core is at most 20 (rank C or better): issue 41 took the 19 above
    it apart by phase, rule or part. A new one is split where it is written."""
    from pathlib import Path

    from radon.complexity import cc_visit
    from radon.visitors import Class

    core = Path(REPO) / "core" / "shardeval"
    over = []
    for path in sorted(core.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        for block in cc_visit(path.read_text(encoding="utf-8")):
            for function in block.methods if isinstance(block, Class) else [block]:  # a class's own figure is its methods' sum
                if function.complexity > 20:
                    over.append(f"{path.relative_to(REPO)}:{function.lineno} {function.fullname} ({function.complexity})")
    assert over == []
