"""An echo answer is checked against the request it answers (issue 40, point 3).

A tiny real OpenAI-compatible server on 127.0.0.1 answers `/v1/completions` with `echo` and
`logprobs` as vLLM does (the prompt's tokens, the first with a null logprob, then one generated
token per max_tokens), or misbehaves on purpose, chosen by the path of the URL:

- short: only the last 2 entries of each logprobs list (an 8-token prompt scored on 2);
- positive: a continuation token's logprob is +0.7 (and its top_logprobs);
- nan / inf: a continuation token's logprob is NaN / 1e400 (JSON that no decoder reads as a float);
- nospan: the echo stops before the continuation (its tokens missing);
- good: vLLM's shape.

Through real `shardeval run` subprocesses: lm-eval's multiple choice (a local task YAML over a local
JSONL, the CI tokenizer), the core's loglikelihood solver (mmlu in loglikelihood mode) and
`perplexity`. Every misbehaving answer is a `protocol` error record naming what was wrong, the
shard is not COMPLETE and exits nonzero; a good server still scores every document.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from served import app_in_thread

BAD = ("short", "positive", "nan", "inf", "nospan")


def text_tokens(text: str) -> list[str]:
    return re.findall(r"\s*\S+|\s+", text)


CHERRY_IDS: list[int] = []  # the tokenizer's ids of " cherry", set by a test that asks lm-eval about it


def names_cherry(prompt: Any) -> bool:
    if isinstance(prompt, str):
        return "cherry" in prompt
    ids = prompt[0] if prompt and isinstance(prompt[0], list) else prompt
    return bool(CHERRY_IDS) and ids[-len(CHERRY_IDS) :] == CHERRY_IDS


def echo_logprobs(mode: str, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(raw JSON logprobs object, text) for one echo request, as `mode` answers it."""
    prompt = body["prompt"]
    if mode.startswith("cherry-"):  # misbehave only on prompts that end with a choice naming cherry
        mode = mode.split("-", 1)[1] if names_cherry(prompt) else "good"
    if isinstance(prompt, list):
        ids = prompt[0] if prompt and isinstance(prompt[0], list) else prompt
        toks = [f"<{i}>" for i in ids]
    else:
        toks = text_tokens(prompt)
    if mode == "nospan":
        toks = toks[: max(1, len(toks) // 2)]  # the continuation (and more) left out
    toks = toks + [" x"] * min(1, int(body.get("max_tokens", 0)))
    values: list[Any] = [-(1.0 + (sum(map(ord, t)) % 9) / 4) for t in toks]
    values[0] = None
    offsets = [sum(len(t) for t in toks[:i]) for i in range(len(toks))]
    top: list[Any] = [None if v is None else {t: v} for t, v in zip(toks, values)]
    bad = len(toks) - 2 if len(toks) > 2 else len(toks) - 1  # the last prompt token: always in the continuation
    if mode == "positive":
        values[bad], top[bad] = 0.7, {toks[bad]: 0.7}
    if mode == "short":
        toks, values, offsets, top = toks[-2:], values[-2:], offsets[-2:], top[-2:]
    lp = json.dumps({"tokens": toks, "token_logprobs": values, "text_offset": offsets, "top_logprobs": top})
    if mode in ("nan", "inf"):  # values JSON cannot carry: written raw, as a broken server would
        raw = "NaN" if mode == "nan" else "1e400"
        lp = lp.replace(json.dumps(values[bad]), raw, 1) if values[bad] is not None else lp
    return lp, "".join(toks)


def make_app() -> web.Application:
    async def completions(request: web.Request) -> web.Response:
        mode = request.match_info["mode"]
        body = await request.json()
        lp, text = echo_logprobs(mode, body)
        n = len(text_tokens(text))
        raw = (
            '{"id":"cmpl-1","object":"text_completion","created":0,"model":"%s","choices":[{"index":0,"text":%s,'
            '"logprobs":%s,"finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d}}'
            % (body.get("model", "m"), json.dumps(text), lp, n, n + 1)
        )
        return web.Response(text=raw, content_type="application/json")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/{mode}/v1/completions", completions)
    app.router.add_get("/{mode}/v1/models", models)
    return app


@pytest.fixture(scope="module")
def origin() -> Any:
    with app_in_thread(make_app()) as url:
        yield url


def run_shard(config: dict[str, Any], out: Path) -> subprocess.CompletedProcess[str]:
    out.mkdir(parents=True, exist_ok=True)
    cfg = out / "config.json"
    cfg.write_text(json.dumps(config))
    env_extra = {
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_DATASETS_CACHE": str(out / "hf_cache"),
    }
    return subprocess.run(
        [sys.executable, "-m", "shardeval", "run", str(cfg), "-o", str(out / "shard_0")],
        env={**os.environ, **env_extra},
        capture_output=True,
        text=True,
        timeout=600,
    )


def shard_records(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for p in sorted((out / "shard_0").glob("*/results.jsonl")) for line in p.read_text().splitlines() if line.strip()
    ]


def assert_protocol_errors(done: subprocess.CompletedProcess[str], out: Path, needle: str) -> None:
    recs = shard_records(out)
    assert recs, done.stderr[-2000:]
    assert done.returncode != 0, done.stderr[-2000:]
    assert all(r["status"] == "error" and r["error_kind"] == "protocol" for r in recs), [
        (r["status"], r.get("error_kind"), r.get("error")) for r in recs
    ]
    assert all(re.search(needle, r["error"]) for r in recs), [r["error"] for r in recs]
    manifest = json.loads((out / "shard_0" / "manifest.json").read_text()) if (out / "shard_0" / "manifest.json").exists() else {}
    assert manifest.get("status") != "complete", manifest.get("status")


NEEDLES = {  # what the record's error says, per mode
    "short": r"echo holds 2 token logprob|cover only",
    "positive": r"logprob 0\.7 .*finite number <= 0",
    "nan": r"(?i)malformed|decode|invalid",
    "inf": r"(?i)out of range|decode|invalid",
    "nospan": r"echo holds \d+ token logprob|cover only",
}

# --- the core's loglikelihood solver (mmlu, loglikelihood mode) and perplexity ---------------------------

DOCS = [
    "The cat sat on the mat and looked around the room.",
    "One two three four five six seven eight nine ten.",
    "A third document with a handful of words in it.",
]


def perplexity_config(url: str, data: Path) -> dict[str, Any]:
    data.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    return {
        "services": {"model": {"type": "api", "url": url, "model": "tiny"}},
        "benchmarks": [{"name": "perplexity", "params": {"path": str(data)}}],
        "output": {"progress_interval_s": 0},
    }


@pytest.mark.parametrize("mode", BAD)
def test_perplexity_refuses_a_bad_echo(origin: str, mode: str, tmp_path: Path) -> None:
    done = run_shard(perplexity_config(f"{origin}/{mode}/v1", tmp_path / "docs.jsonl"), tmp_path / "run")
    needle = {**NEEDLES, "short": r"cover only", "nospan": r"cover only"}[mode]
    assert_protocol_errors(done, tmp_path / "run", needle)


def test_perplexity_on_a_good_server_scores_every_document(origin: str, tmp_path: Path) -> None:
    done = run_shard(perplexity_config(f"{origin}/good/v1", tmp_path / "docs.jsonl"), tmp_path / "run")
    assert done.returncode == 0, done.stderr[-2000:]
    recs = shard_records(tmp_path / "run")
    assert len(recs) == len(DOCS) and all(r["status"] == "ok" for r in recs)
    for r in recs:
        assert r["scores"]["nll"] > 0 and math.isfinite(r["scores"]["nll"])


def test_one_bad_choice_makes_the_whole_question_an_error(origin: str) -> None:
    """The core's multiple choice: 4 choices, only the one with "cherry" answered with a positive
    logprob; the question is an error naming that choice, never scored on the other three."""
    import asyncio

    from shardeval.config import Generation, Retries, ServiceConfig, SolverConfig
    from shardeval.benchmark import Problem
    from shardeval.run.client import Client
    from shardeval.run.service import Endpoint
    from shardeval.run.solver import LoglikelihoodSolver, ServiceHandle

    async def go(mode: str) -> Any:
        url = f"{origin}/{mode}/v1"
        cfg = ServiceConfig(type="api", retries=Retries(attempts=1))
        async with Client(Endpoint(url, "tiny", "completions"), cfg, 4) as client:
            handle = ServiceHandle(Endpoint(url, "tiny", "completions"), client, asyncio.Semaphore(4))
            solver = LoglikelihoodSolver(SolverConfig(generation=Generation(max_tokens=8)), handle)
            problem = Problem(
                idx=0,
                id="p0",
                prompt="Which fruit is yellow?\nAnswer:",
                reference="B",
                metadata={"choices": [" apple", " banana", " cherry pie", " kiwi"]},
            )
            return await solver.solve(problem, seed=1)

    bad = asyncio.run(go("cherry-positive"))
    assert bad.completion.status == "error" and bad.completion.error_kind == "protocol", bad.completion
    assert bad.completion.error.startswith("choice C:") and "0.7" in bad.completion.error
    assert not bad.scores
    good = asyncio.run(go("good"))
    assert good.completion.status == "ok" and set(good.scores) >= {"logprob_A", "logprob_B", "logprob_C", "logprob_D"}


# --- lm-eval's adapter: a local multiple-choice task over a local JSONL ---------------------------------

MC_ROWS = [
    {"question": "Which fruit is yellow?", "choices": ["apple", "banana", "cherry", "kiwi"], "answer": 1},
    {"question": "Which animal barks?", "choices": ["cat", "dog", "cow", "owl"], "answer": 1},
    {"question": "What is two plus two?", "choices": ["three", "four", "five", "six"], "answer": 1},
]


def tokenizer_dir() -> str:
    """The CI model's tokenizer (scripts/setup/vllm.sh): lm-eval tokenizes loglikelihood requests itself."""
    from vllm_real import vllm_paths

    paths = vllm_paths()
    if paths is None:
        pytest.skip("no tokenizer here: run scripts/setup/vllm.sh")
    return paths[1]


def write_mc_task(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    data = root / "mc.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in MC_ROWS))
    (root / "tiny_mc.yaml").write_text(
        "task: tiny_mc\n"
        "dataset_path: json\n"
        "dataset_name: null\n"
        f"dataset_kwargs: {{data_files: {{test: {json.dumps(str(data))}}}}}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "Question: {{question}}\\nAnswer:"\n'
        'doc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return root


def lm_eval_config(url: str, tasks: Path, task: str) -> dict[str, Any]:
    params = {"tasks": [task], "include_path": str(tasks), "tokenizer": tokenizer_dir()}
    return {
        "services": {"model": {"type": "api", "url": url, "model": "tiny"}},
        "benchmarks": [{"name": "lm_eval", "params": params, "max_concurrent": 4}],
        "output": {"progress_interval_s": 0},
    }


@pytest.mark.parametrize("mode", BAD)
def test_lm_eval_refuses_a_bad_echo(origin: str, mode: str, tmp_path: Path) -> None:
    pytest.importorskip("lm_eval")
    done = run_shard(lm_eval_config(f"{origin}/{mode}/v1", write_mc_task(tmp_path / "tasks"), "tiny_mc"), tmp_path / "run")
    assert_protocol_errors(done, tmp_path / "run", NEEDLES[mode])
    assert len(shard_records(tmp_path / "run")) == len(MC_ROWS)


def test_lm_eval_on_a_good_server_scores_every_document(origin: str, tmp_path: Path) -> None:
    pytest.importorskip("lm_eval")
    done = run_shard(lm_eval_config(f"{origin}/good/v1", write_mc_task(tmp_path / "tasks"), "tiny_mc"), tmp_path / "run")
    assert done.returncode == 0, done.stderr[-2000:]
    recs = shard_records(tmp_path / "run")
    assert len(recs) == len(MC_ROWS) and all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]


# --- issue 40 point 13: a loglikelihood_rolling task's headline is lm-eval's corpus-level metrics ----------

PAGES = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A second page of text , with wikitext 's spacing @-@ and a few more words to score .",
    "Third and last : short .",
]
ROLLING_METRICS = ("word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none")


def write_rolling_task(root: Path) -> Path:
    import lm_eval

    root.mkdir(parents=True, exist_ok=True)
    data = root / "pages.jsonl"
    data.write_text("".join(json.dumps({"page": p}) + "\n" for p in PAGES))
    wikitext = Path(lm_eval.__file__).parent / "tasks" / "wikitext" / "wikitext.yaml"
    (root / "tiny_rolling.yaml").write_text(
        f"include: {wikitext}\n"
        "task: tiny_rolling\n"
        "tag: []\n"
        "dataset_path: json\n"
        "dataset_name: null\n"
        f"dataset_kwargs: {{data_files: {{test: {json.dumps(str(data))}}}, cache_dir: {json.dumps(str(root / 'cache'))}}}\n"
        "training_split: null\nvalidation_split: null\ntest_split: test\n"
    )
    return root


# A shard, a merge and lm-eval's own CLI: 69-80 s in full runs of the test command, against the
# default limit of 120 s (test_sim_knows' lm-eval example, at 147 of its 180 s, timed out once).
@pytest.mark.timeout(480)
def test_a_rolling_tasks_headline_is_lm_evals_perplexities_not_an_accuracy(origin: str, tmp_path: Path) -> None:
    """wikitext-like: scores.json and report.md carry word_perplexity, byte_perplexity and
    bits_per_byte equal to lm-eval's own run on the same server and data, and no accuracy."""
    pytest.importorskip("lm_eval")
    from lmeval_support import run_lm_eval_cli

    tasks = write_rolling_task(tmp_path / "tasks")
    url = f"{origin}/good/v1"
    done = run_shard(lm_eval_config(url, tasks, "tiny_rolling"), tmp_path / "run")
    assert done.returncode == 0, done.stderr[-2000:]
    merged = subprocess.run(
        [sys.executable, "-m", "shardeval", "merge", str(tmp_path / "run")], capture_output=True, text=True, timeout=600
    )
    assert merged.returncode == 0, merged.stderr[-2000:]
    scores = json.loads((tmp_path / "run" / "merged" / "scores.json").read_text())
    bench = scores["tiny_rolling"]
    assert "accuracy" not in bench["metrics"], bench["metrics"]
    reference = run_lm_eval_cli(url, tokenizer_dir(), ["tiny_rolling"], tasks, tmp_path / "cli", num_concurrent=2)
    theirs = reference["results"]["tiny_rolling"]
    report = (tmp_path / "run" / "merged" / "report.md").read_text()
    assert "accuracy" not in report, report
    for name in ROLLING_METRICS:
        assert bench["metrics"][name]["value"] == pytest.approx(theirs[name], rel=1e-12), (name, bench["metrics"][name], theirs)
        assert name.split(",")[0] in report
    (results_file,) = (tmp_path / "run" / "merged" / "lm_eval").glob("*/results_*.json")
    header = json.loads(results_file.read_text())
    for name in ROLLING_METRICS:
        assert header["results"]["tiny_rolling"][name] == pytest.approx(theirs[name], rel=1e-12)
    # the header says what the run used, as lm-eval's own does, never the planning placeholder
    assert "served-model" not in results_file.read_text()
    args = header["config"]["model_args"]
    assert (args["model"], args["base_url"], args["tokenizer"]) == ("tiny", f"{url}/completions", tokenizer_dir())
    for key in ("tokenizer_pad_token", "tokenizer_eos_token", "tokenizer_bos_token", "eot_token_id"):
        assert header[key] == reference[key] and header[key] is not None, key
    assert header["model_name"] == "tiny"


def test_lm_eval_a_question_with_one_bad_choice_is_an_error_and_the_others_score(origin: str, tmp_path: Path) -> None:
    """Only the request for the choice " cherry" (question 0 of 3) gets a positive logprob: that
    question is a protocol error, never scored on its other three choices; the others are ok."""
    pytest.importorskip("lm_eval")
    from transformers import AutoTokenizer

    CHERRY_IDS[:] = AutoTokenizer.from_pretrained(tokenizer_dir()).encode(" cherry", add_special_tokens=False)
    try:
        done = run_shard(lm_eval_config(f"{origin}/cherry-positive/v1", write_mc_task(tmp_path / "tasks"), "tiny_mc"), tmp_path / "run")
    finally:
        CHERRY_IDS.clear()
    recs = {r["problem_id"]: r for r in shard_records(tmp_path / "run")}
    assert done.returncode != 0, done.stderr[-2000:]
    bad = recs["tiny_mc/0"]
    assert (bad["status"], bad["error_kind"]) == ("error", "protocol") and "0.7" in bad["error"], bad
    assert not bad.get("scores")
    assert all(recs[f"tiny_mc/{i}"]["status"] == "ok" for i in (1, 2)), recs
