"""docs/plugins.md's worked benchmark plugin is real code: taken out of the page, loaded through
SHARDEVAL_PLUGINS, run against the simulator in two shards and merged, as a reader would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import REPO, running_sim, shardeval_cmd

PAGE = os.path.join(REPO, "docs", "plugins.md")
FAST = ("--ttft-ms", "0", "--itl-ms", "0")


def worked_plugin(name: str) -> str:
    """The code block that follows `<!-- worked plugin: NAME -->` in docs/plugins.md."""
    text = Path(PAGE).read_text(encoding="utf-8")
    match = re.search(rf"<!-- worked plugin: {re.escape(name)} -->\n```\w+\n(.*?)\n```\n", text, re.DOTALL)
    assert match, f"docs/plugins.md has no worked plugin block {name}"
    return match.group(1) + "\n"


def test_the_worked_plugin_declares_its_module_as_the_entry_point():
    project = tomllib.loads(worked_plugin("pyproject.toml"))
    assert project["project"]["entry-points"]["shardeval"] == {"squares": "shardeval_squares"}


def test_the_worked_plugin_runs_in_two_shards_against_the_simulator_and_merges(tmp_path, monkeypatch: pytest.MonkeyPatch):
    source = worked_plugin("shardeval_squares.py")
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "shardeval_squares.py").write_text(source, encoding="utf-8")
    monkeypatch.setenv("SHARDEVAL_PLUGINS", "shardeval_squares")  # the simulator loads it too, to know the answers
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(modules), os.environ.get("PYTHONPATH", "")]))

    listing = shardeval_cmd("plugins")
    assert listing.returncode == 0 and "warning" not in listing.stderr, listing.stderr
    assert "registers: benchmark squares" in listing.stdout

    run_dir = tmp_path / "run"
    with running_sim("--bench", "squares", "--accuracy", "1.0", *FAST) as url:
        for i in range(2):
            result = shardeval_cmd(
                "run",
                "--bench",
                "squares",
                "--model-url",
                url,
                "--model-id",
                "sim",
                "--shard",
                f"{i}/2",
                "-O",
                "benchmarks.0.params.n=12",
                "-o",
                str(run_dir / f"shard_{i}"),
            )
            assert result.returncode == 0, result.stderr
    merged = shardeval_cmd("merge", str(run_dir), "-q")
    assert merged.returncode == 0, merged.stderr

    lines = (run_dir / "merged" / "squares" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert sorted(r["problem_id"] for r in records) == sorted(f"square-{x}" for x in range(1, 13))
    # The simulator answers every one right (`#### N`); the page's score() reads it with extract_numeric.
    assert all(r["status"] == "ok" and r["score"] == 1.0 and r["extracted"] == r["reference"] for r in records)
    assert {r["cluster"] for r in records} == {"even", "odd"}
    scores = json.loads((run_dir / "merged" / "scores.json").read_text())["squares"]
    assert scores["n_problems"] == 12 and scores["n_missing"] == 0
    assert scores["metrics"]["accuracy"]["value"] == 1.0


def test_every_name_of_the_facade_resolves_and_the_page_names_it():
    """A name docs/plugins.md does not explain is no API; one that does not resolve breaks a plugin
    at its first use. Importing the role modules loads nothing of shardeval but the SDK's own
    modules (the code sandbox imports them under a bare Python)."""
    from shardeval.api import roles

    probe = (
        "import importlib, sys\n"
        "mods = [importlib.import_module(f'shardeval.api.{r}') for r in sys.argv[1:]]\n"
        "print(sorted(m for m in sys.modules if m.startswith(('shardeval', 'pluggy', 'click', 'msgspec'))))\n"
        "print(sorted(f'{m.__name__}.{n}' for m in mods for n in m.__all__ if getattr(m, n, None) is None))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe, *roles.ROLES], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    loaded, unresolved = result.stdout.splitlines()
    assert loaded == str(sorted(["shardeval", "shardeval.api", "shardeval.api.roles", *(f"shardeval.api.{r}" for r in roles.ROLES)]))
    assert unresolved == "[]"

    page = Path(PAGE).read_text(encoding="utf-8")
    unexplained = [n for names in roles.ROLES.values() for n in names if not re.search(rf"[`/ ]{re.escape(n)}[`(]", page)]
    assert unexplained == []


def test_the_worked_orchestrator_runs_a_sharded_launch_its_dry_run_and_a_failing_one(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """docs/plugins.md's orchestrator fills the lifecycle's phases and nothing else: the merge at
    the end, the dry run that starts nothing, the failed-shard report and exit 3 are the core's."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "shardeval_pool.py").write_text(worked_plugin("shardeval_pool.py"), encoding="utf-8")
    monkeypatch.setenv("SHARDEVAL_PLUGINS", "shardeval_pool")  # the cells' processes load it too
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(modules), os.environ.get("PYTHONPATH", "")]))

    listing = shardeval_cmd("plugins")
    assert listing.returncode == 0 and "warning" not in listing.stderr, listing.stderr
    assert "registers: orchestrator pool" in listing.stdout

    pool = ("-O", "cluster.type=pool", "-O", "cluster.shards=3", "-O", "cluster.workers=2", "-O", "benchmarks.0.params.n=12")
    run_dir = tmp_path / "run"
    with running_sim("--bench", "arith", "--accuracy", "1.0", *FAST) as url:
        quick = ("--bench", "arith", "--model-url", url, "--model-id", "sim")
        plan = shardeval_cmd("run", *quick, *pool, "-o", str(run_dir), "--dry-run")
        assert plan.returncode == 0, plan.stderr
        commands = plan.stdout.splitlines()
        assert [c.split(" --shard ")[1].split()[0] for c in commands] == ["0/3", "1/3", "2/3"], plan.stdout
        assert not run_dir.exists()  # a dry run starts nothing and writes nothing

        done = shardeval_cmd("run", *quick, *pool, "-o", str(run_dir))
        assert done.returncode == 0, done.stderr
    assert f"merged into {run_dir}/merged/" in done.stdout and "**COMPLETE**" in done.stdout, done.stdout
    scores = json.loads((run_dir / "merged" / "scores.json").read_text())["arith"]
    assert scores["n_problems"] == 12 and scores["n_missing"] == 0 and scores["metrics"]["accuracy"]["value"] == 1.0

    failing = tmp_path / "failing"
    with running_sim("--bench", "arith", "--fail-5xx", "1.0", *FAST) as url:
        quick = ("--bench", "arith", "--model-url", url, "--model-id", "sim", "-O", "services.model.retries.attempts=1")
        failed = shardeval_cmd("run", *quick, *pool, "-o", str(failing))
    assert failed.returncode == 3, failed.stdout + failed.stderr  # every shard finished with errors, as each exited
    assert "**ERRORS**: 12 of 12 cells end in errors" in failed.stdout, failed.stdout
    assert "shardeval: 3 of 3 shards failed or finished with errors (0, 1, 2); rerun the same command" in failed.stderr
