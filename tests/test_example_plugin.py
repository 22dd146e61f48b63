"""The documented Python route: examples/shardeval-example-plugin, pip-installed, found by entry point.

pip builds the example (its own pyproject.toml, setuptools backend from the running environment,
no network) and installs it with `--target` into a fresh plugin directory, the way `shardeval
plugins install` adds a plugin to an installed zipapp. shardeval then finds it only through the
`shardeval` entry-point group of the installed dist-info, and a real run of its benchmark goes
against the simulator. The example imports nothing of shardeval but its SDK, `shardeval.api`'s role modules.
"""

from __future__ import annotations

import ast
import glob
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, running_sim, shardeval_cmd

EXAMPLE = os.path.join(REPO, "examples", "shardeval-example-plugin")


def test_the_example_imports_nothing_of_shardeval_but_its_api():
    sources = glob.glob(os.path.join(EXAMPLE, "shardeval_example", "*.py"))
    imported = set()
    for path in sources:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module or "")
    ours = {name for name in imported if name.split(".")[0].startswith("shardeval")}
    assert len(sources) == 2 and ours == {"shardeval.api.plugin", "shardeval.api.benchmark", "shardeval_example.capitals"}


def can_build_wheels() -> str | None:
    """Why pip cannot build the example here without network, or None when it can."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return "setuptools is not installed in the test environment"
    major, minor = (int(x) for x in version.split(".")[:2])
    if (major, minor) < (70, 1):
        try:
            importlib.metadata.version("wheel")
        except importlib.metadata.PackageNotFoundError:
            return f"setuptools {version} needs the `wheel` package to build wheels (or setuptools >= 70.1)"
    return None


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> str:
    reason = can_build_wheels()
    if reason:
        pytest.skip(f"cannot build the example plugin offline: {reason}")
    tmp = tmp_path_factory.mktemp("example_plugin")
    src = tmp / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp / "plugins"
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(target), str(src)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (target / "shardeval_example-0.1.0.dist-info" / "entry_points.txt").read_text().split() == [
        "[shardeval]",
        "example",
        "=",
        "shardeval_example",
    ]
    return str(target)


def test_the_plugin_is_found_through_its_entry_point(plugin_dir):
    env = {"SHARDEVAL_PLUGIN_DIR": plugin_dir}
    listed = shardeval_cmd("plugins", env=env)
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.startswith("example "))
    assert "shardeval_example" in line and "entry point (shardeval-example 0.1.0)" in line
    assert "registers: benchmark capitals" in listed.stdout
    benchmarks = shardeval_cmd("benchmarks", env=env)
    row = next(x for x in benchmarks.stdout.splitlines() if x.startswith("capitals "))
    assert row.split()[1:3] == ["example", "24"] and "pkg://shardeval_example/data/capitals.jsonl" in row
    without = shardeval_cmd("benchmarks", "capitals", env={"SHARDEVAL_PLUGIN_DIR": os.path.join(plugin_dir, "none")})
    assert without.returncode == 2 and "unknown benchmark 'capitals'" in without.stderr


def test_a_real_run_of_the_plugin_benchmark(plugin_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDEVAL_PLUGIN_DIR", plugin_dir)  # the simulator and the run both load it
    with running_sim("--bench", "capitals", "--accuracy", "0.5", "--ttft-ms", "0", "--itl-ms", "0") as url:
        result = shardeval_cmd(
            "run", "--bench", "capitals", "--model-url", url, "--model-id", "sim", "-n", "2", "-o", str(tmp_path / "out")
        )
    assert result.returncode == 0, result.stderr
    recs = [json.loads(x) for x in (tmp_path / "out" / "capitals" / "results.jsonl").read_text().splitlines()]
    assert len(recs) == 48 and all(r["status"] == "ok" for r in recs)
    assert {r["cluster"] for r in recs} == {"Europe", "Asia", "Africa", "Americas"}
    assert all(r["score"] == (1.0 if r["extracted"] == r["reference"] else 0.0) for r in recs)
    assert 0 < sum(r["score"] for r in recs) < 48
    merged = shardeval_cmd("merge", str(tmp_path / "out"), "-q")
    assert merged.returncode == 0, merged.stderr
    scores = json.loads((tmp_path / "out" / "merged" / "scores.json").read_text())["capitals"]
    assert scores["n_problems"] == 24 and list(scores["metrics"]) == ["accuracy"]  # the plugin's default metrics
