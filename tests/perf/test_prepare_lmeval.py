"""A prepared lm-eval shard (issue 43): planned once, a shard's first request comes at once, and
one shard outruns lm-eval's own CLI against a server that is not the bottleneck.

The group is MMLU-sized in its shape: GROUP_TASKS small multiple-choice tasks (lm-eval's MMLU
has 57), each the example's 16 capitals questions from its own local JSON Lines file
(`dataset_path: json`), one lm-eval group over them; the simulator (ttft and itl 0) knows the
answers, the tokenizer is the example's (tests/test_prepare_lmeval.py runs the same task offline).

1. Time from a shard's start (its process spawned) to the first request the simulator logs
   (`--log-requests`, polled): a shard that plans as today (lm-eval's `simple_evaluate` over every
   document of every task, in every shard) against one that reads the plan `shardeval prepare`
   kept. Rounds alternate; reported: today's / prepared (best round each), which must be >= FLOOR.
2. Throughput of one whole shard (spawn to exit, records scored) against
   `lm_eval run --model local-completions --log_samples` on the same tasks, both at concurrency 8
   (lm-eval `num_concurrent=8`, shardeval `max_concurrent: 8`): lm-eval's time / the prepared
   shard's must be >= 1.0 (the unprepared shard's ratio is printed beside it).

`PYTHONPATH=$PWD/core:$PWD/plugins:$PWD/shims python -m pytest -q -s tests/perf/test_prepare_lmeval.py`
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, running_sim, stop_process
from lmeval_support import _run_cli

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.timeout(2400)

EXAMPLE = Path(REPO) / "examples" / "lm_eval_local"
GROUP = "capitals_group"
GROUP_TASKS = 57
CONCURRENCY = 8
ROUNDS = 2
FLOOR = 5.0  # first request: today's per-shard planning / the prepared shard's


def write_group(root: Path) -> Path:
    """GROUP_TASKS tasks over their own copies of the example's data, and the group; the include path."""
    tasks = root / "tasks"
    tasks.mkdir(parents=True)
    template = yaml.safe_load((EXAMPLE / "tasks" / "capitals_mc.yaml").read_text())
    names = [f"capitals_{i:02d}" for i in range(GROUP_TASKS)]
    for name in names:
        data = root / "data" / f"{name}.jsonl"
        data.parent.mkdir(exist_ok=True)
        shutil.copy(EXAMPLE / "capitals.jsonl", data)
        task = {**template, "task": name, "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(root / "hf_datasets")}}
        (tasks / f"{name}.yaml").write_text(yaml.safe_dump(task))
    group = {"group": GROUP, "task": names, "aggregate_metric_list": [{"metric": "acc", "weight_by_size": True}]}
    (tasks / f"_{GROUP}.yaml").write_text(yaml.safe_dump(group))
    return tasks


def write_config(path: Path, url: str, include: Path) -> Path:
    params = {
        "tasks": [GROUP],
        "include_path": str(include),
        "tokenizer": str(EXAMPLE / "sim_tokenizer"),
        "tokenizer_backend": "huggingface",
        "tokenized_requests": False,
    }
    config = {
        "services": {"model": {"type": "api", "url": url, "model": "sim"}},
        "benchmarks": [{"name": "lm_eval", "max_concurrent": CONCURRENCY, "params": params}],
        "output": {"progress_interval_s": 0},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NEL_", "SHARDEVAL_"))}
    return {**clean, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def shard(config: Path, out: Path, log: Path) -> tuple[float, float]:
    """One shard, 0 of 1: (seconds to its first request, seconds to its exit)."""
    log.write_bytes(b"")
    argv = [sys.executable, "-m", "shardeval", "run", str(config), "--shard", "0/1", "-o", str(out)]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = None
    try:
        while proc.poll() is None:
            if first is None and log.stat().st_size > 0:
                first = time.perf_counter() - start
            time.sleep(0.005)
    finally:
        if proc.poll() is None:
            stop_process(proc)
    total = time.perf_counter() - start
    assert proc.returncode == 0, (proc.stderr.read() if proc.stderr else "")[-3000:]
    return (first if first is not None else total), total


def lm_eval_cli(url: str, include: Path, out: Path) -> float:
    args = (
        f"model=sim,base_url={url.rstrip('/')}/completions,tokenizer_backend=huggingface,tokenizer={EXAMPLE / 'sim_tokenizer'},"
        f"tokenized_requests=False,num_concurrent={CONCURRENCY},max_retries=3"
    )
    start = time.perf_counter()
    _run_cli("local-completions", args, [GROUP], include, out, None, None, (), 1200)
    return time.perf_counter() - start


def test_a_prepared_shard_asks_at_once_and_outruns_lm_eval(tmp_path: Path) -> None:
    include = write_group(tmp_path)
    log = tmp_path / "requests.jsonl"
    sim_args = ["--bench", str(EXAMPLE / "capitals.yaml"), "--accuracy", "0.75", "--ttft-ms", "0", "--itl-ms", "0"]
    with running_sim(*sim_args, "--log-requests", str(log)) as url:
        config = write_config(tmp_path / "config.yaml", url, include)
        prepared_root = tmp_path / "prepared_run"
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "shardeval", "prepare", str(config), "-o", str(prepared_root)],
            env=env(),
            capture_output=True,
            text=True,
            timeout=1200,
        )
        prepare_s = time.perf_counter() - start
        assert done.returncode == 0, done.stderr[-3000:]
        today, prepared, theirs = [], [], []
        for r in range(ROUNDS):
            today.append(shard(config, tmp_path / f"today_{r}" / "shard_0", log))
            prepared.append(shard(config, prepared_root / f"round_{r}", log))
            theirs.append(lm_eval_cli(url, include, tmp_path / f"lm_eval_{r}"))
        log.write_bytes(b"")
        shard(config, prepared_root / "counted", log)
        n_requests = len(log.read_text().splitlines())  # one prepared shard's: every request of the group
    first_today, first_prepared = min(t[0] for t in today), min(p[0] for p in prepared)
    whole_today, whole_prepared, lm_eval_s = min(t[1] for t in today), min(p[1] for p in prepared), min(theirs)
    first_ratio = first_today / first_prepared
    throughput = lm_eval_s / whole_prepared
    print(
        f"\n{GROUP_TASKS} tasks x 16 documents ({n_requests} requests): prepare {prepare_s:.1f} s once; first request "
        f"after {first_today:.2f} s planning per shard (today) vs {first_prepared:.2f} s prepared: ratio {first_ratio:.1f} "
        f"(floor {FLOOR}); one shard {whole_prepared:.1f} s prepared, {whole_today:.1f} s unprepared, lm_eval "
        f"(num_concurrent={CONCURRENCY}) {lm_eval_s:.1f} s: throughput shardeval/lm-eval {throughput:.2f} prepared "
        f"(>= 1.0), {lm_eval_s / whole_today:.2f} unprepared"
    )
    records = [json.loads(x) for x in (prepared_root / "round_0" / "capitals_00" / "results.jsonl").read_text().splitlines()]
    assert len(records) == 16 and all(r["status"] == "ok" for r in records)
    assert first_ratio >= FLOOR
    assert throughput >= 1.0
