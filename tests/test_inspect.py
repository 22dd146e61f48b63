"""The inspect plugin against the simulator, through the real `shardeval run` / `merge` / `rescore`.

Checked: the shard count changes no cell's answer or score (1 shard against 4); the merged
`.eval` log holds every (sample, epoch) with status success, and says error when a shard is
missing; a shard killed with SIGKILL mid-run and rerun asks exactly the pairs it had not answered
(one request per missing (sample, epoch), none twice) and merges complete; bad input is one line,
exit 2, no traceback, before any request; an Inspect sample error and a run-out limit are error
records of their own kinds, never scored; rescore refuses an inspect benchmark in one line; the
service's API key reaches the server yet no file of the run, the merged `.eval` included.

The tasks and the simulator that knows their answers: tests/inspect_support.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from conftest import shardeval_cmd
from served import kill_shard_mid_run
from inspect_support import (
    cells,
    inspect_config,
    inspect_sim,
    merge,
    question,
    read_log,
    records,
    Recording,
    recording,
    run_shards,
    write_tasks,
)

pytest.importorskip("inspect_ai")
pytestmark = pytest.mark.timeout(240)

N = 12
EPOCHS = 3
IDS = [f"s{i:02d}" for i in range(N)]
SECRET = "sk-shardeval-test-9f3c2a7e41d8"  # the service's key, by api_key_env
KEY_ENV = "SHARDEVAL_INSPECT_TEST_KEY"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("inspect_tasks"), N)


@pytest.fixture(scope="module")
def endpoint(tasks: Path) -> Iterator[Recording]:
    """The simulator behind a proxy that records what reaches it."""
    with inspect_sim(tasks) as url, recording(url) as seen:
        yield seen


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory, tasks: Path, endpoint: Recording) -> dict[int, Path]:
    """tasks.py@arith, 3 epochs, run whole (1 shard) and in 4 shards, each merged: {shards: run dir}."""
    root = tmp_path_factory.mktemp("sharded")
    cfg = inspect_config(root / "config.json", endpoint.url, tasks, [{"task": "arith", "repeats": EPOCHS}])
    runs = {}
    for total in (1, 4):
        runs[total] = root / f"n{total}"
        run_shards(cfg, runs[total], total)
        merged = merge(runs[total])
        assert merged.returncode == 0, merged.stderr
    return runs


def cell_answers(run: Path) -> dict[tuple[str, int], tuple[str, float | None, str | None]]:
    """{(sample id, repeat): (status, score, answer)} of a merged run, each cell exactly once."""
    merged = records(run / "merged", "arith")
    out = {(r["problem_id"], r["repeat"]): (r["status"], r["score"], r["response"]) for r in merged}
    assert len(out) == len(merged), "a cell appears twice in the merged records"
    return out


def test_the_shard_count_changes_no_cells_answer_or_score(sharded: dict[int, Path]) -> None:
    whole, four = cell_answers(sharded[1]), cell_answers(sharded[4])
    assert sorted(whole) == [(i, r) for i in IDS for r in range(EPOCHS)]
    assert four == whole
    assert {status for status, _, _ in whole.values()} == {"ok"}
    assert {score for _, score, _ in whole.values()} == {0.0, 1.0}, "the simulator should get some right and some wrong"
    assert {d.name for d in sharded[4].iterdir() if d.name.startswith("shard_")} == {f"shard_{i}" for i in range(4)}
    for d in (sharded[4] / f"shard_{i}" for i in range(4)):  # every shard answered a share, none the whole
        assert 0 < len(records(d, "arith")) < N * EPOCHS


def test_the_merged_log_has_every_sample_and_epoch(sharded: dict[int, Path]) -> None:
    logs = {total: read_log(run / "merged" / "inspect" / "arith.eval") for total, run in sharded.items()}
    for log in logs.values():
        assert log.status == "success" and log.error is None
        assert sorted(cells(log)) == [(i, e) for i in IDS for e in range(1, EPOCHS + 1)]
        assert all(s.scores and s.scores["match"].value in ("C", "I") for s in log.samples)
        assert (log.results.total_samples, log.results.completed_samples) == (N * EPOCHS, N * EPOCHS)
        assert log.eval.config.epochs == EPOCHS and log.eval.dataset.samples == N
    whole, four = cells(logs[1]), cells(logs[4])
    assert {k: (s.scores["match"].value, s.output.completion) for k, s in four.items()} == {
        k: (s.scores["match"].value, s.output.completion) for k, s in whole.items()
    }
    assert logs[4].results.scores[0].metrics["accuracy"].value == logs[1].results.scores[0].metrics["accuracy"].value


def test_a_missing_shard_makes_the_merged_log_an_error(sharded: dict[int, Path], tmp_path: Path) -> None:
    run = tmp_path / "three_of_four"
    for i in range(3):
        shutil.copytree(sharded[4] / f"shard_{i}", run / f"shard_{i}")
    present = sum(len(records(run / f"shard_{i}", "arith")) for i in range(3))
    merged = merge(run)
    assert merged.returncode != 0 and "Traceback" not in merged.stderr
    log = read_log(run / "merged" / "inspect" / "arith.eval")
    assert log.status == "error"
    assert f"{N * EPOCHS - present} of {N * EPOCHS}" in log.error.message
    assert len(log.samples) == present < N * EPOCHS


def test_a_task_that_no_longer_loads_leaves_the_merge_standing_and_no_earlier_log(
    sharded: dict[int, Path], tasks: Path, tmp_path: Path
) -> None:
    """Merging where the task file is gone (moved, another machine): shardeval's own merge stands,
    one line says the Inspect log was not written, and the earlier merge's log is removed, not
    left to read as this merge's."""
    run = tmp_path / "copy"
    shutil.copytree(sharded[4], run)
    assert (run / "merged" / "inspect" / "arith.eval").exists()  # the earlier merge's
    aside = tasks.with_name("tasks.py.aside")
    tasks.rename(aside)
    try:
        merged = merge(run)
    finally:
        aside.rename(tasks)
    assert merged.returncode == 0 and "Traceback" not in merged.stderr, merged.stderr
    [line] = [x for x in merged.stderr.splitlines() if "Inspect log not written for arith" in x]
    assert "no such file" in line, line
    assert not (run / "merged" / "inspect" / "arith.eval").exists()
    assert len(records(run / "merged", "arith")) == N * EPOCHS


# --- a shard killed mid-run ------------------------------------------------------------------------


def test_a_shard_killed_mid_run_asks_only_the_missing_pairs_again(tmp_path: Path, tasks: Path) -> None:
    with inspect_sim(tasks, "--ttft-ms", "150") as slow_url, recording(slow_url) as slow:
        cfg = inspect_config(tmp_path / "config.json", slow.url, tasks, [{"task": "arith", "repeats": EPOCHS, "max_concurrent": 2}])
        out = tmp_path / "run" / "shard_0"
        kill_shard_mid_run(["run", str(cfg), "-o", str(out)], out / "arith" / "results.jsonl", 6)
        before = records(out, "arith")
        answered = {(r["problem_id"], r["repeat"]) for r in before}
        assert all(r["status"] == "ok" for r in before)
        assert 6 <= len(answered) < N * EPOCHS, "the kill must land mid-run"
        # a sample with an early epoch answered and a later one not: the rerun asks the later one as
        # its eval's epoch 1, and the merged log must still call it by its own epoch
        assert any([r for r in range(EPOCHS) if (i, r) not in answered] not in ([], [0], [0, 1], [0, 1, 2]) for i in IDS)
        slow.clear()
        rerun = shardeval_cmd("run", str(cfg), "-o", str(out))
        assert rerun.returncode == 0, rerun.stderr
        assert "resuming" in rerun.stderr
        asked_again = Counter(slow.prompts())
    missing = Counter(i for i in IDS for r in range(EPOCHS) if (i, r) not in answered)
    assert asked_again == Counter({question(int(i[1:]))[0]: count for i, count in missing.items()})
    after = records(out, "arith")
    assert sorted((r["problem_id"], r["repeat"]) for r in after) == [(i, r) for i in IDS for r in range(EPOCHS)]
    assert all(r["status"] == "ok" and r["score"] in (0.0, 1.0) for r in after)
    merged = merge(out.parent)
    assert merged.returncode == 0, merged.stderr
    log = read_log(out.parent / "merged" / "inspect" / "arith.eval")
    assert log.status == "success" and sorted(cells(log)) == [(i, e) for i in IDS for e in range(1, EPOCHS + 1)]
    in_log = cells(log)  # each (sample, epoch) is the answer recorded for that repeat, not another epoch's
    assert all(in_log[(r["problem_id"], r["repeat"] + 1)].output.completion == r["response"] for r in after)


# --- bad input -------------------------------------------------------------------------------------


def one_line_error(run: subprocess.CompletedProcess[str], needle: str) -> None:
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("shardeval: error:"), run.stderr
    assert "Traceback" not in run.stderr and needle in run.stderr, run.stderr


@pytest.mark.parametrize(
    "case, entry, needle",
    [
        ("task file missing", {"task": "arith", "params": {"task": "{dir}/no_such_tasks.py@arith"}}, "no such file"),
        ("task not in the file", {"task": "no_such_task"}, "no_such_task"),
        ("unknown task_args key", {"task": "arith", "params": {"task_args": {"shift": 1}}}, "'shift' is not an argument"),
    ],
)
def test_bad_input_is_one_line_before_any_request(
    case: str, entry: dict[str, Any], needle: str, tasks: Path, endpoint: Recording, tmp_path: Path
) -> None:
    params = {k: v.format(dir=tasks.parent) if isinstance(v, str) else v for k, v in entry.get("params", {}).items()}
    cfg = inspect_config(tmp_path / "config.json", endpoint.url, tasks, [{**entry, "params": params}])
    endpoint.clear()
    one_line_error(shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out")), needle)
    assert endpoint.bodies == []


def test_bench_inspect_with_no_task_is_one_line(endpoint: Recording, tmp_path: Path) -> None:
    endpoint.clear()
    run = shardeval_cmd("run", "--bench", "inspect:", "--model-url", endpoint.url, "--model-id", "sim", "-o", str(tmp_path / "out"))
    one_line_error(run, "--bench inspect:TASK")
    assert endpoint.bodies == []


def test_without_inspect_installed_a_run_is_one_line_naming_the_extra(tasks: Path, endpoint: Recording, tmp_path: Path) -> None:
    """inspect-ai is an optional extra: where it cannot be imported (blocked in sys.modules, as if
    never installed), a run that names an inspect benchmark says how to get it."""
    cfg = inspect_config(tmp_path / "config.json", endpoint.url, tasks, [{"task": "arith"}])
    code = "import sys; sys.modules['inspect_ai'] = None; from shardeval.cli import main; sys.argv[0] = 'shardeval'; main()"
    endpoint.clear()
    run = subprocess.run(
        [sys.executable, "-c", code, "run", str(cfg), "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=120
    )
    one_line_error(run, "pip install 'shardeval[inspect]'")
    assert "plugins install" in run.stderr
    assert endpoint.bodies == []


def test_a_docker_sandbox_the_node_cannot_provide_is_one_line_before_any_request(tasks: Path, endpoint: Recording, tmp_path: Path) -> None:
    """The task asks for Inspect's docker sandbox on a node whose docker has no Compose v2 plugin
    (an empty DOCKER_CONFIG, the engine's folder off PATH; or no docker at all): every sample
    would fail in the sandbox, so the run is refused before it asks anything or writes a shard."""
    cfg = inspect_config(tmp_path / "config.json", endpoint.url, tasks, [{"task": "arith", "params": {"sandbox": "docker"}}])
    (tmp_path / "no-plugins").mkdir()
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if "shardeval-ci" not in p)
    endpoint.clear()
    run = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), env={"DOCKER_CONFIG": str(tmp_path / "no-plugins"), "PATH": path})
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("shardeval: error:") and "`docker` sandbox" in last and "params.sandbox: local" in last, run.stderr
    assert endpoint.bodies == [] and not (tmp_path / "out" / "arith").exists()


# --- errors, limits, rescore and the API key -------------------------------------------------------


@pytest.fixture(scope="module")
def troubled(tmp_path_factory: pytest.TempPathFactory, tasks: Path, endpoint: Recording) -> tuple[Path, list[str]]:
    """One shard of `flaky` (its solver raises for s03) and `chatty` (two turns under message_limit 2),
    2 epochs each, with an API key from the environment; merged. (run dir, Authorization headers seen)"""
    root = tmp_path_factory.mktemp("troubled")
    cfg = inspect_config(
        root / "config.json",
        endpoint.url,
        tasks,
        [{"task": "flaky", "repeats": 2}, {"task": "chatty", "repeats": 2, "params": {"message_limit": 2}}],
        service={"api_key_env": KEY_ENV},
    )
    endpoint.clear()
    run = shardeval_cmd("run", str(cfg), "-o", str(root / "run" / "shard_0"), env={KEY_ENV: SECRET})
    assert run.returncode == 3, run.stderr  # finished, with error records
    merged = merge(root / "run", env={KEY_ENV: SECRET})
    assert merged.returncode == 3 and "Traceback" not in merged.stderr, merged.stderr
    return root / "run", list(endpoint.authorizations)


def test_a_sample_error_is_an_inspect_error_record_never_scored(troubled: tuple[Path, list[str]]) -> None:
    run, _ = troubled
    flaky = records(run / "shard_0", "flaky")
    assert sorted((r["problem_id"], r["repeat"]) for r in flaky) == [(i, r) for i in IDS for r in range(2)]
    failed = [r for r in flaky if r["problem_id"] == "s03"]
    assert len(failed) == 2
    for r in failed:
        assert (r["status"], r["error_kind"], r["score"]) == ("error", "inspect", None) and not r["scores"]
        assert "the solver fails on sample s03" in r["error"]
    assert all(r["status"] == "ok" and r["score"] in (0.0, 1.0) for r in flaky if r["problem_id"] != "s03")
    log = read_log(run / "merged" / "inspect" / "flaky.eval")
    assert log.status == "error" and "2 of 24" in log.error.message
    assert log.eval.config.fail_on_error is False  # as the shards ran it: past the error, to the other samples
    assert all(s.error is not None for s in log.samples if s.id == "s03")


def test_a_run_out_limit_is_a_limit_error_record_never_scored(troubled: tuple[Path, list[str]]) -> None:
    run, _ = troubled
    chatty = records(run / "shard_0", "chatty")
    assert len(chatty) == N * 2
    for r in chatty:
        assert (r["status"], r["error_kind"], r["score"]) == ("error", "limit", None) and not r["scores"]
        assert "message limit 2" in r["error"]
    samples = read_log(run / "merged" / "inspect" / "chatty.eval").samples
    assert len(samples) == N * 2 and all(s.limit is not None and s.limit.type == "message" for s in samples)
    assert all(s.output.completion for s in samples), "the first turn was answered before the limit"


def test_rescore_refuses_an_inspect_benchmark_in_one_line(troubled: tuple[Path, list[str]], tmp_path: Path) -> None:
    run, _ = troubled
    rescored = shardeval_cmd("rescore", str(run), "-o", str(tmp_path / "rescored"))
    one_line_error(rescored, "flaky")
    assert not (tmp_path / "rescored").exists() or not any((tmp_path / "rescored").rglob("results.jsonl"))


def test_the_api_key_reaches_the_server_and_no_file_of_the_run(troubled: tuple[Path, list[str]]) -> None:
    run, authorizations = troubled
    assert authorizations and set(authorizations) == {f"Bearer {SECRET}"}
    files = [p for p in run.rglob("*") if p.is_file()]
    evals = [p for p in files if p.suffix == ".eval"]
    assert {p.name for p in evals} == {"flaky.eval", "chatty.eval"}
    leaks = [str(p) for p in files if SECRET.encode() in p.read_bytes()]
    for path in evals:  # a .eval is a zip (deflated): its members are read one by one
        with zipfile.ZipFile(path) as archive:
            leaks += [f"{path}:{name}" for name in archive.namelist() if SECRET.encode() in archive.read(name)]
    assert not leaks


# --- a reasoning model's answer, as Inspect split it (issue 39) ------------------------------------------


def ended_sample(content: Any) -> Any:
    """An ended EvalSample whose answer is one assistant message of `content`, scored C."""
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ModelOutput
    from inspect_ai.scorer import Score

    message = ChatMessageAssistant(content=content, model="m")
    output = ModelOutput.from_message(message)
    return EvalSample(
        id="s00",
        epoch=1,
        input="q",
        target="5",
        messages=[ChatMessageUser(content="q"), message],
        output=output,
        scores={"match": Score(value="C", answer="5")},
    )


def test_inspects_split_stands_and_shardeval_never_splits_its_answer_again() -> None:
    from inspect_ai._util.content import ContentReasoning, ContentText

    from shardeval.api.benchmark import split_reply
    from shardeval_inspect.samples import attempt_of

    tags = ("<think>", "</think>")
    c = attempt_of(ended_sample([ContentReasoning(reasoning="2 + 3"), ContentText(text="#### 5")]), str, 1, tags).completion
    assert (c.text, c.reasoning) == ("#### 5", "2 + 3")
    # a redacted block: its summary, never the opaque payload
    redacted = ContentReasoning(reasoning="opaque", summary="added them", redacted=True)
    assert attempt_of(ended_sample([redacted, ContentText(text="5")]), str, 1, tags).completion.reasoning == "added them"
    # a closing tag with no opening one: Inspect found no thinking and its scorer saw all of it, so
    # the record's answer is all of it too (reasoning "", the answer never split again)
    c = attempt_of(ended_sample("so 2 + 3 = 5</think> #### 5"), str, 1, tags).completion
    assert c.reasoning == "" and split_reply(c.text, c.reasoning, tags).answer == c.text
    # no thinking and no tag: the record is what it always was
    assert attempt_of(ended_sample("#### 5"), str, 1, tags).completion.reasoning is None
