"""Time to result: one shardeval shard of an lm-eval task against lm-eval's own CLI (issue 26).

Same CPU vLLM (SmolLM2-135M-Instruct, scripts/setup/vllm.sh), same task and data: the MMLU group of
three local subjects, 0-shot (60 questions, 240 loglikelihood requests), lm-eval's own YAMLs
(tests/lmeval_support.py). (5-shot, ~600-token prompts, took 16 minutes for the whole test on two
cores, at a ratio of 0.99 before shardeval sent a question's first choice ahead of the others.) Each side is a fresh process, as a user runs it, and its clock
stops when its numbers are on disk: `lm_eval run --model local-completions` with `--log_samples`
(planning, requests, scoring, results and samples files), against `shardeval run --shard 0/1`
(planning, requests, per-document scoring into records). shardeval's `merge` (which also writes
lm-eval's files) is timed and reported apart.

Matched concurrency: lm-eval `num_concurrent=8`, shardeval `max_concurrent: 8` (adaptive
concurrency is off by default, so neither side opens more). Rounds alternate so drift on a shared
machine hits both. Reported: ratio = lm-eval's time / shardeval's time, and against lm-eval's
defaults (`num_concurrent=1`, one request at a time).

The issue asks for a ratio >= 1.0. On this machine both sides wait on the same server: one core
computes every prompt's log-probabilities (echo), and lm-eval at one request at a time takes only
~15 % longer than at eight. Measured ratios were 0.97 to 1.01 here (0-shot), and 0.99 at 5-shot.
Sending a question's first choice ahead of the others, so the server's prefix cache holds the
question when the rest come, changed nothing measurable (34.4-35.3 s against 34.6-34.8 s). So this
test guards against a regression (FLOOR) and prints the ratio; it does not claim the 1.0.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lmeval_support import MMLU_GROUP, OFFLINE_ENV, run_lm_eval_cli, SERVED_MODEL, write_tasks
from vllm_real import require_vllm, running_vllm

pytestmark = pytest.mark.timeout(1800)

CONCURRENCY = 8
NUM_FEWSHOT = 0
ROUNDS = 2
FLOOR = 0.9  # the shard's own overhead (planning, records, per-document scoring) must stay small


def shardeval_shard(url: str, model_dir: str, include: Path, out: Path) -> tuple[float, float]:
    """(seconds to the shard's scored records, seconds of the merge after it)."""
    config = {
        "services": {"model": {"type": "api", "url": url, "model": SERVED_MODEL}},
        "benchmarks": [
            {
                "name": "lm_eval",
                "max_concurrent": CONCURRENCY,
                "params": {"tasks": [MMLU_GROUP], "num_fewshot": NUM_FEWSHOT, "include_path": str(include), "tokenizer": model_dir},
            }
        ],
        "output": {"progress_interval_s": 0},
    }
    out.mkdir(parents=True)
    (out / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, **OFFLINE_ENV, "HF_DATASETS_CACHE": str(include.parent / "hf_datasets_cache")}
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "shardeval", "run", str(out / "config.yaml"), "--shard", "0/1", "-o", str(out / "shard_0")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    shard_s = time.perf_counter() - start
    assert run.returncode == 0, run.stderr[-3000:]
    start = time.perf_counter()
    merged = subprocess.run(
        [sys.executable, "-m", "shardeval", "merge", str(out), "-q"], env=env, capture_output=True, text=True, timeout=900
    )
    assert merged.returncode == 0, merged.stderr[-3000:]
    return shard_s, time.perf_counter() - start


def lm_eval_cli(url: str, model_dir: str, include: Path, out: Path, num_concurrent: int) -> float:
    start = time.perf_counter()
    run_lm_eval_cli(url, model_dir, [MMLU_GROUP], include, out, num_fewshot=NUM_FEWSHOT, num_concurrent=num_concurrent)
    return time.perf_counter() - start


def test_one_shard_takes_about_as_long_as_lm_eval(tmp_path: Path) -> None:
    _, model_dir = require_vllm()
    pytest.importorskip("lm_eval")
    include = write_tasks(tmp_path)
    ours, merges, theirs = [], [], []
    with running_vllm(str(tmp_path / "vllm.log")) as (url, _proc):
        lm_eval_cli(url, model_dir, include, tmp_path / "warm", CONCURRENCY)  # datasets' cache, the server's first batches
        for r in range(ROUNDS):
            theirs.append(lm_eval_cli(url, model_dir, include, tmp_path / f"lm_eval_{r}", CONCURRENCY))
            shard_s, merge_s = shardeval_shard(url, model_dir, include, tmp_path / f"shardeval_{r}")
            ours.append(shard_s)
            merges.append(merge_s)
        defaults = lm_eval_cli(url, model_dir, include, tmp_path / "lm_eval_defaults", 1)
    ratio = min(theirs) / min(ours)
    print(
        f"\nlm_eval (num_concurrent={CONCURRENCY}) {min(theirs):.1f} s, shardeval one shard (max_concurrent={CONCURRENCY}) "
        f"{min(ours):.1f} s (+ merge {min(merges):.1f} s): ratio {ratio:.2f} (floor {FLOOR}; the issue's target 1.0); "
        f"against lm-eval's defaults (num_concurrent=1, {defaults:.1f} s): {defaults / min(ours):.2f}; "
        f"shard + merge against lm_eval: {min(theirs) / (min(ours) + min(merges)):.2f}"
    )
    assert ratio >= FLOOR
