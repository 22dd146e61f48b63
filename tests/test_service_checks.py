"""Every service's settings are checked when the config is read (issue 40, point 10).

A simulator service with `bench: vqa/vqa.jsonl` (a data file, not a registered name) used to start
every shard, fail each as its simulator refused the flag, exit 1 and print a PARTIAL report of
dashes. Each service type now checks its own keys at config time (ServiceConfig.check): one line
naming the key, exit 2, before any shard directory exists or any process starts. Real
`shardeval run` processes; the local orchestrator with two shards, and one shard in-process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import shardeval_cmd

BAD = {
    "sim bench: a data file that is not there": (
        {"type": "sim", "bench": "vqa/vqa.jsonl"},
        "services.model: bench 'vqa/vqa.jsonl': ",
        "no such file",
    ),
    "sim bench: an unknown name": (
        {"type": "sim", "bench": "arithh"},
        "services.model: bench: unknown benchmark 'arithh'; did you mean 'arith'?",
        "",
    ),
    "sim bench_params: a key the benchmark has not": (
        {"type": "sim", "bench": "gsm8k", "bench_params": {"bogus": 1}},
        "services.model: bench 'gsm8k': ",
        "'params.bogus'",
    ),
    "sim fault rates summing past 1": (
        {"type": "sim", "fail_429": 0.7, "reset": 0.5},
        "services.model: fault rates sum to 1.2 (fail_429 + fail_5xx",
        "",
    ),
    "sim fail_5xx_statuses out of range": (
        {"type": "sim", "fail_5xx_statuses": "500,404"},
        "services.model: fail_5xx_statuses '500,404': expected",
        "",
    ),
    "api url not http(s)": (
        {"type": "api", "url": "node17:8000/v1", "model": "m"},
        "services.model: url: 'node17:8000/v1' is not an http(s) URL",
        "",
    ),
    "vllm launch_command empty": (
        {"type": "vllm", "model": "m", "launch_command": []},
        "services.model: launch_command: must not be empty",
        "",
    ),
}


def write(tmp: Path, service: dict, shards: int | None) -> Path:
    cluster = {"cluster": {"type": "local", "shards": shards}} if shards else {}
    path = tmp / "run.yaml"
    path.write_text(json.dumps({"services": {"model": service}, "benchmarks": [{"name": "arith", "params": {"n": 8}}], **cluster}))
    return path


@pytest.mark.parametrize("shards", [2, None], ids=["local 2 shards", "in-process"])
@pytest.mark.parametrize("case", list(BAD))
def test_a_service_setting_it_would_refuse_is_one_line_before_any_shard(tmp_path, case, shards):
    service, starts, contains = BAD[case]
    out = tmp_path / "out"
    proc = shardeval_cmd("run", str(write(tmp_path, service, shards)), "-o", str(out), cwd=str(tmp_path), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith((f"shardeval: error: {tmp_path / 'run.yaml'}: {starts}", f"shardeval: error: run.yaml: {starts}")), line
    assert contains in line
    assert not out.exists()  # no shard started, nothing written


def test_a_sim_knows_the_answers_of_a_data_file_as_a_benchmarks_entry_names_it(tmp_path):
    """The other side of the check: `bench:` takes what a benchmarks: entry takes, a data file too."""
    data = tmp_path / "vqa" / "vqa.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n" for i in range(40)))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        json.dumps(
            {
                "services": {"model": {"type": "sim", "bench": "vqa/vqa.jsonl", "accuracy": 1.0, "ttft_ms": 0, "itl_ms": 0}},
                "benchmarks": [{"name": "vqa/vqa.jsonl"}],
                "cluster": {"type": "local", "shards": 2},
            }
        )
    )
    proc = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), cwd=str(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    scores = json.loads((tmp_path / "out" / "merged" / "scores.json").read_text())
    (bench,) = scores.values()
    assert bench["n_ok"] == 40 and bench["metrics"]["accuracy"]["value"] == 1.0, bench
