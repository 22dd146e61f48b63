"""Parity with Inspect itself (issue 27): the same Inspect tasks, run once by the real `inspect eval`
command and once by shardeval in 4 shards, against the same simulator, give the same answer and
the same scores for every (sample, epoch), and the merged `.eval` log has the metrics Inspect's
own log has.

Two tasks (tests/inspect_support.py): `arith`, a local JSON dataset of 40 sums with ids,
`generate()` and `match()`; `unnamed`, 30 of the same questions without ids (Inspect numbers them,
and shardeval must number them the same), with two scorers and two epoch reducers. Both 3 epochs.
The simulator answers about half right, so a wrong score or a misplaced sample shows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from inspect_support import cells, inspect_config, inspect_sim, merge, MODEL, only_log, read_log, records, run_shards, write_tasks

pytest.importorskip("inspect_ai")
pytestmark = pytest.mark.timeout(300)

N = 40
EPOCHS = 3
TASKS = {"arith": N, "unnamed": 30}  # task -> its samples


@dataclass
class Runs:
    reference: dict[str, Any]  # task -> the EvalLog `inspect eval` wrote
    merged: dict[str, Any]  # task -> merged/inspect/<task>.eval
    run: Path  # shardeval's run directory (shard_*/, merged/)


def inspect_eval(tasks: Path, task: str, url: str, log_dir: Path) -> None:
    """The real `inspect eval` command (the venv's own), with Inspect's OpenAI-compatible provider."""
    inspect_cli = Path(sys.executable).parent / "inspect"
    env = {**os.environ, "SIM_BASE_URL": url, "SIM_API_KEY": "unused", "INSPECT_DISPLAY": "none"}
    done = subprocess.run(
        [
            str(inspect_cli),
            "eval",
            f"{tasks}@{task}",
            "--model",
            f"openai-api/sim/{MODEL}",
            "--epochs",
            str(EPOCHS),
            "--log-dir",
            str(log_dir),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tasks.parent,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    root = tmp_path_factory.mktemp("parity")
    tasks = write_tasks(root / "tasks", N)
    with inspect_sim(tasks) as url:
        reference = {}
        for task in TASKS:
            inspect_eval(tasks, task, url, root / "reference" / task)
            reference[task] = read_log(only_log(root / "reference" / task))
        cfg = inspect_config(root / "config.json", url, tasks, [{"task": t, "repeats": EPOCHS} for t in TASKS])
        run_shards(cfg, root / "run", 4)
    merged = merge(root / "run")
    assert merged.returncode == 0, merged.stderr
    yield Runs(reference, {t: read_log(root / "run" / "merged" / "inspect" / f"{t}.eval") for t in TASKS}, root / "run")


@pytest.mark.parametrize("task", list(TASKS))
def test_every_sample_and_epoch_has_the_same_answer_and_scores(runs: Runs, task: str) -> None:
    reference, merged = cells(runs.reference[task]), cells(runs.merged[task])
    assert len(reference) == TASKS[task] * EPOCHS
    assert sorted(merged) == sorted(reference)
    differ = [
        key
        for key in reference
        if merged[key].output.completion != reference[key].output.completion
        or {n: (s.value, s.answer) for n, s in merged[key].scores.items()}
        != {n: (s.value, s.answer) for n, s in reference[key].scores.items()}
    ]
    assert not differ, f"{len(differ)} of {len(reference)} (sample, epoch) differ, e.g. {differ[:3]}"
    values = [s.scores["match"].value for s in reference.values()]
    assert "C" in values and "I" in values, "the simulator should get some right and some wrong"


@pytest.mark.parametrize("task", list(TASKS))
def test_the_merged_logs_metrics_are_the_single_runs(runs: Runs, task: str) -> None:
    reference, merged = runs.reference[task].results, runs.merged[task].results
    assert runs.merged[task].status == "success"
    assert (merged.total_samples, merged.completed_samples) == (reference.total_samples, reference.completed_samples)

    def metrics(results: Any) -> dict[tuple[str, str | None], dict[str, float]]:
        return {(s.name, s.reducer): {m.name: m.value for m in s.metrics.values()} for s in results.scores}

    expected = metrics(reference)
    assert len(expected) == (1 if task == "arith" else 4)  # unnamed: 2 scorers x 2 reducers
    got = metrics(merged)
    assert got.keys() == expected.keys()
    for key, values in expected.items():  # the same numbers (summed in another order, so to the last bits)
        assert got[key] == pytest.approx(values, rel=1e-12, abs=1e-15), key
    for scored in expected.values():
        assert 0 < scored["accuracy"] < 1


def test_samples_without_ids_are_numbered_as_inspect_numbers_them(runs: Runs) -> None:
    reference, merged = runs.reference["unnamed"], runs.merged["unnamed"]
    assert reference.eval.dataset.sample_ids == list(range(1, 31))
    assert merged.eval.dataset.sample_ids == reference.eval.dataset.sample_ids
    assert sorted({s.id for s in merged.samples}) == list(range(1, 31))
    # sample 1 is the last question of arith.jsonl's first 30 in both
    for log in (reference, merged):
        assert next(s for s in log.samples if s.id == 1).input.startswith("Question 29:")


def test_shardevals_own_records_hold_inspects_scores(runs: Runs) -> None:
    """The records shardeval merged (its own scores.json numbers come from them) carry, per (sample,
    repeat), the score Inspect gave that (sample, epoch), as Inspect's value_to_float reads it."""
    from inspect_ai.scorer import value_to_float

    to_float = value_to_float()
    reference = cells(runs.reference["arith"])
    merged = records(runs.run / "merged", "arith")
    assert len(merged) == N * EPOCHS and all(r["status"] == "ok" for r in merged)
    for r in merged:
        sample = reference[(r["problem_id"], r["repeat"] + 1)]
        assert r["score"] == to_float(sample.scores["match"].value)
        assert r["response"] == sample.output.completion
    accuracy = runs.reference["arith"].results.scores[0].metrics["accuracy"].value
    assert sum(r["score"] for r in merged) / len(merged) == pytest.approx(accuracy)


# --- a reasoning model (issue 39) -----------------------------------------------------------------------
#
# A small server plays a reasoning model on arith: the thinking in vLLM's `reasoning` field, in the
# older `reasoning_content`, or inline between <think> tags (inspect_support.thinking_reply). Inspect's
# provider turns each into ContentReasoning; `inspect eval` with --reasoning-effort/--reasoning-tokens
# and shardeval with solver.generation.reasoning ask the same questions.

THINK_N = 12
EFFORT, BUDGET = "high", 64


@dataclass
class ThinkingRuns:
    reference: Any  # the EvalLog `inspect eval` wrote
    reference_bodies: list[dict[str, Any]]
    merged: Any  # merged/inspect/arith.eval
    records: list[dict[str, Any]]  # merged/arith/results.jsonl
    bodies: list[dict[str, Any]]  # what shardeval's shards sent


@pytest.fixture(scope="module")
def thinking_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThinkingRuns]:
    from inspect_support import thinking_server

    root = tmp_path_factory.mktemp("thinking")
    tasks = write_tasks(root / "tasks", THINK_N)
    with thinking_server() as seen:
        inspect_cli = Path(sys.executable).parent / "inspect"
        env = {**os.environ, "THINK_BASE_URL": seen.url, "THINK_API_KEY": "unused", "INSPECT_DISPLAY": "none"}
        done = subprocess.run(
            [
                str(inspect_cli),
                "eval",
                f"{tasks}@arith",
                "--model",
                f"openai-api/think/{MODEL}",
                "--reasoning-effort",
                EFFORT,
                "--reasoning-tokens",
                str(BUDGET),
                "--log-dir",
                str(root / "reference"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tasks.parent,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        reference_bodies = list(seen.bodies)
        seen.clear()
        generation = {"reasoning": {"enable": True, "effort": EFFORT, "budget_tokens": BUDGET}}
        cfg = inspect_config(root / "config.json", seen.url, tasks, [{"task": "arith", "repeats": 1, "solver": {"generation": generation}}])
        run_shards(cfg, root / "run", 2)
        bodies = list(seen.bodies)
    merged = merge(root / "run")
    assert merged.returncode == 0, merged.stderr
    yield ThinkingRuns(
        read_log(only_log(root / "reference")),
        reference_bodies,
        read_log(root / "run" / "merged" / "inspect" / "arith.eval"),
        records(root / "run" / "merged", "arith"),
        bodies,
    )


def reasoning_of(sample: Any) -> list[str]:
    """The ContentReasoning texts of a sample's answer (its output's message)."""
    content = sample.output.message.content
    return [c.reasoning for c in content if c.type == "reasoning"] if isinstance(content, list) else []


def test_a_reasoning_models_thinking_is_the_records_and_in_the_log(thinking_runs: ThinkingRuns) -> None:
    """Per sample: the record's `reasoning` is Inspect's ContentReasoning (in `inspect eval`'s log and in
    the merged log alike), its response is the ContentText Inspect scored (no thinking in it), its
    reasoning tokens are Inspect's usage, and it scores as `inspect eval` scored it."""
    from inspect_ai.scorer import value_to_float

    to_float = value_to_float()
    reference, merged = cells(thinking_runs.reference), cells(thinking_runs.merged)
    assert len(thinking_runs.records) == len(reference) == len(merged) == THINK_N
    for r in thinking_runs.records:
        key = (r["problem_id"], r["repeat"] + 1)
        theirs, ours = reference[key], merged[key]
        assert r["status"] == "ok"
        assert reasoning_of(theirs) == reasoning_of(ours) == [r["reasoning"]], key
        assert r["reasoning"].startswith("Adding ")
        assert r["response"] == theirs.output.completion == ours.output.completion and r["response"].startswith("#### ")
        assert "answer" not in r  # what was scored is the response: Inspect's text, never split again
        assert r["score"] == to_float(theirs.scores["match"].value) == to_float(ours.scores["match"].value)
        tokens = [u.reasoning_tokens for u in theirs.model_usage.values() if u.reasoning_tokens is not None]
        assert r.get("reasoning_tokens") == (sum(tokens) if tokens else None), key
    assert {r["score"] for r in thinking_runs.records} == {0.0, 1.0}
    assert any("reasoning_tokens" not in r for r in thinking_runs.records)  # inline thinking: no count in the usage


def test_generation_reasoning_reaches_the_server_as_inspect_and_shardeval_ask(thinking_runs: ThinkingRuns) -> None:
    """effort is Inspect's reasoning_effort, sent by Inspect; the budget (Inspect's reasoning_tokens, which its
    OpenAI-compatible provider does not send) and enable reach the server as shardeval asks vLLM."""
    assert len(thinking_runs.bodies) == len(thinking_runs.reference_bodies) == THINK_N
    for body in thinking_runs.reference_bodies:
        assert body["reasoning_effort"] == EFFORT and "thinking_token_budget" not in body
    for body in thinking_runs.bodies:
        assert body["reasoning_effort"] == EFFORT
        assert body["thinking_token_budget"] == BUDGET and body["chat_template_kwargs"] == {"enable_thinking": True}
    config = next(e for e in thinking_runs.merged.samples[0].events if e.event == "model").config
    assert (config.reasoning_effort, config.reasoning_tokens) == (EFFORT, BUDGET)


EPOCHS_TASK = """
from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import match
from inspect_ai.solver import generate


@task
def arith_epochs():
    return Task(dataset=json_dataset("arith.jsonl"), solver=generate(), scorer=match(), epochs=Epochs(3, "mean"))
"""


def test_a_tasks_own_epochs_are_the_default_and_the_log_names_the_runs_url(tmp_path) -> None:
    """Issue 40, point 13: with `repeats` left out, a task's own `Epochs(3, "mean")` was ignored (1
    epoch; accuracy 0.5 against Inspect's 0.4583), and the merged log's model_base_url was a
    placeholder. Every default now comes from the task: 3 epochs, Inspect's numbers, the run's URL."""
    import json

    tasks = write_tasks(tmp_path / "tasks", 16)
    epochs_file = tasks.parent / "epochs_tasks.py"
    epochs_file.write_text(EPOCHS_TASK)
    with inspect_sim(tasks) as url:
        inspect_cli = Path(sys.executable).parent / "inspect"
        env = {**os.environ, "SIM_BASE_URL": url, "SIM_API_KEY": "unused", "INSPECT_DISPLAY": "none"}
        done = subprocess.run(
            [
                str(inspect_cli),
                "eval",
                f"{epochs_file}@arith_epochs",
                "--model",
                f"openai-api/sim/{MODEL}",
                "--log-dir",
                str(tmp_path / "reference"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tasks.parent,
        )  # no --epochs: the task's own
        assert done.returncode == 0, done.stderr[-2000:]
        cfg = tmp_path / "run.json"
        cfg.write_text(
            json.dumps(
                {
                    "services": {"model": {"type": "api", "url": url, "model": MODEL}},
                    "benchmarks": [{"name": "inspect", "params": {"task": f"{epochs_file}@arith_epochs"}}],
                    "output": {"progress_interval_s": 0},
                }
            )
        )  # no repeats
        run_shards(cfg, tmp_path / "run", 2)
    assert merge(tmp_path / "run").returncode == 0
    reference = read_log(only_log(tmp_path / "reference"))
    merged = read_log(tmp_path / "run" / "merged" / "inspect" / "arith_epochs.eval")
    assert reference.eval.config.epochs == merged.eval.config.epochs == 3
    assert len(merged.samples) == len(reference.samples) == 16 * 3

    def metrics(log: Any) -> dict[tuple[str, str | None], dict[str, float]]:
        return {(s.name, s.reducer): {m.name: m.value for m in s.metrics.values()} for s in log.results.scores}

    assert metrics(merged).keys() == metrics(reference).keys()
    for key, values in metrics(reference).items():
        assert metrics(merged)[key] == pytest.approx(values, rel=1e-12, abs=1e-15), key
    assert merged.eval.model_base_url == url
