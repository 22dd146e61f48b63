"""An Inspect task's identity: what changes its answers or scores keeps shards apart.

inspect_ai's version, the task file's content, the task arguments and the limits all join the
benchmark's dataset fingerprint, which every resume and merge compares (shardeval.identity): a
shard run before a change is never resumed or merged with one run after it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import running_sim, shardeval_cmd

pytest.importorskip("inspect_ai")

TASK = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import match
from inspect_ai.solver import generate


@task
def sums(offset: int = 0):
    return Task(dataset=[Sample(id=f"s{i}", input=f"What is {i} + {offset}?", target=str(i + offset)) for i in range(4)],
                solver=generate(), scorer=match())
"""


def fingerprint(folder: Path, **params: object) -> str:
    from shardeval_inspect.benchmark import InspectBenchmark

    return InspectBenchmark({"task": str(folder / "sums.py@sums"), **params}).fingerprint()


def test_version_source_arguments_and_limits_each_change_the_fingerprint(tmp_path: Path) -> None:
    from shardeval_inspect import task as task_module
    from shardeval_inspect.benchmark import InspectBenchmark

    (tmp_path / "sums.py").write_text(TASK, encoding="utf-8")
    base = fingerprint(tmp_path)
    assert fingerprint(tmp_path) == base  # stable
    changed = {
        "task_args": fingerprint(tmp_path, task_args={"offset": 1}),
        "message_limit": fingerprint(tmp_path, message_limit=5),
        "token_limit": fingerprint(tmp_path, token_limit=1000),
        "time_limit": fingerprint(tmp_path, time_limit=60),
    }
    assert all(f != base for f in changed.values()), changed
    bench = InspectBenchmark({"task": str(tmp_path / "sums.py@sums")})
    other_version = dataclasses.replace(bench.loaded, inspect_version="0.0.1")
    bench.loaded = other_version
    assert bench.fingerprint() != base  # inspect_ai's version
    (tmp_path / "sums.py").write_text(TASK + "\n# a comment is a change of the task's source\n", encoding="utf-8")
    task_module._load.cache_clear()
    assert fingerprint(tmp_path) != base


@pytest.mark.timeout(240)
def test_a_shard_is_not_resumed_after_the_task_file_changed(tmp_path: Path) -> None:
    (tmp_path / "sums.py").write_text(TASK, encoding="utf-8")
    with running_sim("--ttft-ms", "0", "--itl-ms", "0") as base:
        config = tmp_path / "c.yaml"
        config.write_text(
            json.dumps(
                {
                    "services": {"model": {"type": "api", "url": base, "model": "sim"}},
                    "benchmarks": [{"name": "inspect", "params": {"task": "sums.py@sums"}}],
                }
            )
        )
        first = shardeval_cmd("run", str(config), "-o", str(tmp_path / "run"), cwd=str(tmp_path))
        assert first.returncode == 0, first.stderr
        (tmp_path / "sums.py").write_text(TASK.replace("What is", "Compute"), encoding="utf-8")
        again = shardeval_cmd("run", str(config), "-o", str(tmp_path / "run"), cwd=str(tmp_path))
    assert again.returncode == 2, again.stderr
    assert "Traceback" not in again.stderr and "data" in again.stderr and "--fresh" in again.stderr, again.stderr
