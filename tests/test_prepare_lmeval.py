"""A prepared lm-eval run on nodes without internet (issue 43; docs/lm-eval.md "Prepared runs").

The task is lm-eval YAML over a local JSON Lines file (`dataset_path: json`), its tokenizer a
Hugging Face hub cache entry (`shardeval-test/capitals-tokenizer`, made here from the example's
simulator tokenizer, read with HF_HUB_OFFLINE=1: the "network" the login node has). The service is
a managed `sim` that logs every body it receives.

- `shardeval prepare`, then two shards, each in a network namespace with only loopback and no
  Hugging Face cache (HF_HOME empty): both COMPLETE, and every document's answer and scores equal
  an unprepared run's (two shards, with the cache);
- without `prepare`, the same shard in the namespace is one line naming `shardeval prepare`,
  exit 2, and the simulator received nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.timeout(900)

EXAMPLE = Path(REPO) / "examples" / "lm_eval_local"
TOKENIZER = "shardeval-test/capitals-tokenizer"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHARDS = 2


def hub_cache(hf_home: Path) -> Path:
    """A Hugging Face hub cache holding TOKENIZER (its files, `refs/main`, and the files the hub
    knows are absent, as a download leaves them), so transformers loads it by name offline."""
    repo = hf_home / "hub" / ("models--" + TOKENIZER.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for f in (EXAMPLE / "sim_tokenizer").iterdir():
        shutil.copy(f, snapshot / f.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    absent = repo / ".no_exist" / COMMIT
    absent.mkdir(parents=True)
    for name in ("config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json"):
        (absent / name).touch()
    return hf_home


def write_run(root: Path) -> tuple[Path, Path]:
    """The task (its data by absolute path), the simulator's bench, a config; (config, request log)."""
    data = root / "capitals.jsonl"
    shutil.copy(EXAMPLE / "capitals.jsonl", data)
    tasks = root / "tasks"
    tasks.mkdir()
    task = yaml.safe_load((EXAMPLE / "tasks" / "capitals_mc.yaml").read_text())
    task["dataset_kwargs"] = {"data_files": {"test": str(data)}, "cache_dir": str(root / "hf_datasets")}
    (tasks / "capitals_mc.yaml").write_text(yaml.safe_dump(task))
    shutil.copy(EXAMPLE / "capitals.yaml", root / "capitals.yaml")
    log = root / "requests.jsonl"
    config = {
        "services": {
            "model": {
                "type": "sim",
                "bench": str(root / "capitals.yaml"),
                "accuracy": 0.75,
                "ttft_ms": 0,
                "itl_ms": 0,
                "log_requests": str(log),
            }
        },
        "benchmarks": [
            {
                "name": "lm_eval",
                "max_concurrent": 8,
                "params": {
                    "tasks": ["capitals_mc"],
                    "include_path": str(tasks),
                    "tokenizer": TOKENIZER,
                    "tokenizer_backend": "huggingface",
                    "tokenized_requests": False,
                },
            }
        ],
        "output": {"progress_interval_s": 0},
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, log


def shardeval(*args: str, env: dict[str, str], isolated: bool = False) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess; `isolated`: in a network namespace with only loopback."""
    argv = [sys.executable, "-m", "shardeval", *args]
    if isolated:
        argv = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)


def base_env(hf_home: Path, offline: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "NEL_", "SHARDEVAL_"))}
    env.update({"HF_HOME": str(hf_home), "TOKENIZERS_PARALLELISM": "false"})
    if offline:  # the login node's "network": its hub cache, never the real hub
        env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    return env


def run_shards(config: Path, out: Path, env: dict[str, str], isolated: bool) -> None:
    for i in range(SHARDS):
        done = shardeval(
            "run",
            str(config),
            "-o",
            str(out / f"shard_{i}"),
            env={**env, "NEL_SHARD_IDX": str(i), "NEL_TOTAL_SHARDS": str(SHARDS)},
            isolated=isolated,
        )
        assert done.returncode == 0, done.stderr[-3000:]


def documents(out: Path) -> dict[str, dict[str, Any]]:
    """Every document's record (answer, score, scores, status) over the run's shards."""
    docs = {}
    for results in sorted(out.glob("shard_*/capitals_mc/results.jsonl")):
        for line in results.read_text().splitlines():
            r = json.loads(line)
            assert r["problem_id"] not in docs
            docs[r["problem_id"]] = {k: r[k] for k in ("response", "score", "scores", "status", "extracted")}
    return docs


def manifests(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("shard_*/manifest.json"))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("prepare_lmeval")
    config, log = write_run(root)
    hf_home, nothing = hub_cache(root / "hf_home"), root / "no_hf_home"
    nothing.mkdir()
    reference = root / "reference"
    run_shards(config, reference, base_env(hf_home, offline=True), isolated=False)
    reference_bodies = log.read_text().splitlines()
    log.unlink()
    prepared = root / "prepared_run"
    done = shardeval("prepare", str(config), "-o", str(prepared), env=base_env(hf_home, offline=True))
    assert done.returncode == 0, done.stderr[-3000:]
    assert not log.exists()  # prepare asks no model
    run_shards(config, prepared, base_env(nothing, offline=False), isolated=True)
    prepared_bodies = log.read_text().splitlines()
    log.unlink()
    bare = shardeval(
        "run", str(config), "-o", str(root / "unprepared" / "shard_0"),
        env={**base_env(nothing, offline=False), "NEL_SHARD_IDX": "0", "NEL_TOTAL_SHARDS": str(SHARDS)}, isolated=True,
    )  # fmt: skip
    return {
        "reference": reference,
        "prepared": prepared,
        "bodies": (reference_bodies, prepared_bodies),
        "bare": bare,
        "log": log,
        "prepare_stdout": done.stdout,
    }


def test_prepared_shards_without_network_complete_with_the_unprepared_runs_scores(runs: dict[str, Any]) -> None:
    whole, prepared = documents(runs["reference"]), documents(runs["prepared"])
    assert len(whole) == len((EXAMPLE / "capitals.jsonl").read_text().splitlines())
    assert all(d["status"] == "ok" for d in whole.values())
    assert 0 < sum(d["score"] for d in whole.values()) < len(whole)  # some right, some wrong: the comparison has teeth
    assert prepared == whole
    assert [m["state"] for m in manifests(runs["prepared"])] == ["complete"] * SHARDS
    fingerprints = {b["dataset_fingerprint"] for m in manifests(runs["prepared"]) + manifests(runs["reference"]) for b in m["benchmarks"]}
    assert len(fingerprints) == 1  # planned once, as the unprepared shards planned it
    reference_bodies, prepared_bodies = runs["bodies"]
    assert sorted(reference_bodies) == sorted(prepared_bodies)  # the same requests, byte for byte


def test_the_preparation_keeps_the_plan_dataset_and_tokenizer(runs: dict[str, Any]) -> None:
    preparation = json.loads((runs["prepared"] / "prepared" / "preparation.json").read_text())
    (bench,) = preparation["benchmarks"]
    assert bench["name"] == "capitals_mc" and len(bench["plan"]) == 64  # the task plan's sha256
    kept = {f["path"] for f in preparation["files"]}
    (plan_dir,) = {p.split("/")[2] for p in kept if p.startswith("plugins/lm_eval/")}
    base = f"plugins/lm_eval/{plan_dir}"
    assert {f"{base}/plan.json", f"{base}/tasks/capitals_mc.json", f"{base}/tokenizer/tokenizer.json"} <= kept
    assert any(p.startswith(f"{base}/datasets/capitals_mc/") and p.endswith(".arrow") for p in kept)


def test_without_prepare_a_shard_without_network_is_one_line_naming_prepare_and_sends_nothing(runs: dict[str, Any]) -> None:
    bare = runs["bare"]
    assert bare.returncode == 2, bare.stderr[-3000:]
    lines = [line for line in bare.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, bare.stderr
    assert "shardeval prepare" in lines[0] and TOKENIZER in lines[0]
    assert not runs["log"].exists() or runs["log"].read_text() == ""


def test_the_merge_of_a_prepared_run_needs_no_network_either(runs: dict[str, Any], tmp_path: Path) -> None:
    """The merge job reads the preparation too: lm-eval's own results files and the metrics are
    made without the hub, the tokenizer or the task index (issue 43, point 3)."""
    nothing = tmp_path / "no_hf_home"
    nothing.mkdir()
    merged = shardeval("merge", str(runs["prepared"]), env=base_env(nothing, offline=False), isolated=True)
    assert merged.returncode == 0 and "COMPLETE" in merged.stdout, merged.stdout[-2000:] + merged.stderr[-3000:]
    reference = shardeval("merge", str(runs["reference"]), env=base_env(tmp_path, offline=True))
    assert reference.returncode == 0, reference.stderr[-3000:]
    mine = json.loads((runs["prepared"] / "merged" / "scores.json").read_text())
    theirs = json.loads((runs["reference"] / "merged" / "scores.json").read_text())
    assert mine["capitals_mc"]["metrics"] == theirs["capitals_mc"]["metrics"]
