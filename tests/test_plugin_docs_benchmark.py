"""docs/plugins.md's worked benchmark beyond plain Q&A (`antonyms`: a chat with a system prompt and
a worked example, multiple choice read by extract_choice) is real code: taken out of the page,
loaded through SHARDEVAL_PLUGINS, run against the simulator in two shards and merged; what each
request carried, what was read from each reply and how it was scored are checked, right and wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import running_sim, shardeval_cmd
from test_plugin_docs import FAST, worked_plugin

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def plugin_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "shardeval_antonyms.py").write_text(worked_plugin("shardeval_antonyms.py"), encoding="utf-8")
    monkeypatch.setenv("SHARDEVAL_PLUGINS", "shardeval_antonyms")  # the simulator loads it too, to know the answers
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(modules), os.environ.get("PYTHONPATH", "")]))


def run_and_merge(run_dir: Path, accuracy: str, *overrides: str) -> list[dict]:
    with running_sim("--bench", "antonyms", "--accuracy", accuracy, *FAST) as url:
        for i in range(2):
            done = shardeval_cmd(
                "run",
                "--bench",
                "antonyms",
                "--model-url",
                url,
                "--model-id",
                "sim",
                "--shard",
                f"{i}/2",
                *overrides,
                "-o",
                str(run_dir / f"shard_{i}"),
            )
            assert done.returncode == 0, done.stderr
    merged = shardeval_cmd("merge", str(run_dir), "-q")
    assert merged.returncode == 0, merged.stderr
    lines = (run_dir / "merged" / "antonyms" / "results.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda r: r["problem_id"])


@pytest.mark.usefixtures("plugin_env")
def test_the_worked_chat_benchmark_is_asked_as_a_chat_and_read_as_multiple_choice(tmp_path: Path) -> None:
    right = run_and_merge(tmp_path / "right", "1.0")
    assert len(right) == 8 and all(r["status"] == "ok" for r in right)
    assert all(r["score"] == 1.0 and r["extracted"] == r["reference"] for r in right)
    assert sorted({r["reference"] for r in right}) == ["A", "B", "C", "D"]  # the right option moves

    trajectories = [
        json.loads(line)
        for shard in ("shard_0", "shard_1")
        for line in (tmp_path / "right" / shard / "antonyms" / "trajectories.jsonl").read_text().splitlines()
    ]
    asked = trajectories[0]["messages"]
    assert [m["role"] for m in asked[:4]] == ["system", "user", "assistant", "user"]
    assert asked[3]["content"].startswith("Which word means the opposite of") and "\nD. " in asked[3]["content"]

    # A wrong reply is read as the letter it names, and scored 0; the example left out is a different run.
    wrong = run_and_merge(tmp_path / "wrong", "0.0", "-O", "benchmarks.0.params.shots=false")
    assert all(r["status"] == "ok" and r["score"] == 0.0 for r in wrong)
    assert all(r["extracted"] in "ABCD" and r["extracted"] != r["reference"] for r in wrong)
    scores = json.loads((tmp_path / "wrong" / "merged" / "scores.json").read_text())
    assert scores["antonyms"]["metrics"]["accuracy"]["value"] == 0.0
