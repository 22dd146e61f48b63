"""A watched sweep's merge, updated a checkpoint at a time, equals the one-shot merge (issue 42).

Real shards against simulators on 127.0.0.1, each cell run by hand (`shardeval run --sweep-services
M --shard I/2`, as an orchestrator's cell runs: no launch merge), and the sweep merged in this
process by an IncrementalSweep after each step: models added one at a time, one merged again once a
resume added its second shard's records, then the baseline changed. At the end sweep.json, sweep.md
and every model's scores.json equal `shardeval merge ROOT -o ELSEWHERE` byte for byte; sweep.html and
every model's merged/ equal an in-place `shardeval merge ROOT` (the pages link the models' reports
relative to where they are written, so only the in-place merge draws the same links).
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import ExitStack
from pathlib import Path

import msgspec

from conftest import running_sim, shardeval_cmd
from shardeval.results.incremental import IncrementalSweep
from shardeval.results.trackers import tracker_export
from shardeval.store.discover import PLAN_FILE
from shardeval.store.records import SweepPlan, pretty_json

MODELS = {"a": "0.5", "b": "0.6", "c": "0.7", "d": "0.8"}


def _config(path: Path, urls: dict[str, str], root: Path) -> Path:
    config = {
        "services": {name: {"type": "api", "url": url, "model": "sim"} for name, url in urls.items()},
        "benchmarks": [
            {"name": "arith", "params": {"n": 30}, "max_concurrent": 8},
            {"name": "arith", "id": "arith_b", "params": {"n": 30, "seed": 3}, "max_concurrent": 8},
        ],
        "sweep": {"services": list(urls), "baseline": "a"},
        "cluster": {"type": "local", "shards": 2},
        "output": {"dir": str(root), "progress_interval_s": 0},
    }
    path.write_text(json.dumps(config))
    return path


def _cell(config: Path, root: Path, model: str, shard: int) -> None:
    done = shardeval_cmd("run", str(config), "-o", str(root), "--sweep-services", model, "--shard", f"{shard}/2", timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]


def _plan(root: Path, services: list[str], baseline: str = "a") -> SweepPlan:
    """The plan as a launch writes it (what the one-shot merge at the end reads)."""
    plan = SweepPlan(services=services, baseline=baseline, shards=2)
    (root / PLAN_FILE).write_bytes(pretty_json(plan))
    return plan


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_sweep_updated_a_checkpoint_at_a_time_equals_the_one_shot_merge(tmp_path: Path) -> None:
    root = tmp_path / "out"
    with ExitStack() as servers:
        urls = {
            m: servers.enter_context(running_sim("--bench", "arith", "--accuracy", acc, "--ttft-ms", "1", "--itl-ms", "0"))
            for m, acc in MODELS.items()
        }
        config = _config(tmp_path / "sweep.json", urls, root)
        sweep = IncrementalSweep(str(root))
        for shard in (0, 1):
            _cell(config, root, "a", shard)
        first = sweep.update(_plan(root, ["a"]))
        assert first.verdict == "COMPLETE" and first.sweep_document["vs_baseline"] == []
        for shard in (0, 1):
            _cell(config, root, "b", shard)
        merged = sweep.update(_plan(root, ["a", "b"]))
        base_scores = root / "a" / "merged" / "scores.json"
        written = base_scores.stat().st_mtime_ns
        assert {r["service"] for r in merged.sweep_document["vs_baseline"]} == {"b"}

        _cell(config, root, "c", 0)  # half of c: PARTIAL, paired on the cells both have
        merged = sweep.update(_plan(root, ["a", "b", "c"]))
        assert merged.verdict.startswith("PARTIAL") and merged.sweep_document["partial"]
        assert base_scores.stat().st_mtime_ns == written  # the others' merged/ not written again
        _cell(config, root, "c", 1)  # the resume adds c's other shard
        merged = sweep.update(_plan(root, ["a", "b", "c"]))
        assert merged.verdict.startswith("PARTIAL")  # c not named as changed: its merge is kept
        merged = sweep.update(_plan(root, ["a", "b", "c"]), changed=["c"])
        assert merged.verdict == "COMPLETE" and not merged.sweep_document["partial"]

        for shard in (0, 1):
            _cell(config, root, "d", shard)
        merged = sweep.update(_plan(root, ["a", "b", "c", "d"]))
        assert base_scores.stat().st_mtime_ns == written
        assert len(merged.sweep_document["vs_baseline"]) == 3 * 2  # three models x two benchmarks

        exported = tracker_export(merged, services=["d"])  # the watcher exports the new checkpoint only
        assert {run.model for run in exported.runs} == {"d"} and [run.step for run in exported.runs] == [3, 3]
        assert {run.model for run in tracker_export(merged).runs} == set(MODELS)

        merged = sweep.update(_plan(root, ["a", "b", "c", "d"], baseline="b"))  # the baseline moves: every pair again
        assert {r["service"] for r in merged.sweep_document["vs_baseline"]} == {"a", "c", "d"}

    one_shot = tmp_path / "one_shot"
    done = shardeval_cmd("merge", "-q", str(root), "-o", str(one_shot))
    assert done.returncode == 0, done.stderr
    watched = root / "merged"
    for name in ("sweep.json", "sweep.md"):
        assert (watched / name).read_bytes() == (one_shot / name).read_bytes(), name
    for model in MODELS:
        assert (root / model / "merged" / "scores.json").read_bytes() == (one_shot / model / "scores.json").read_bytes(), model
    assert merged.text == (watched / "sweep.md").read_text()

    # in place: the pages too, and every file of every model's merged/
    before = {"merged": _files(watched), **{model: _files(root / model / "merged") for model in MODELS}}
    shutil.rmtree(watched)
    for model in MODELS:
        shutil.rmtree(root / model / "merged")
    done = shardeval_cmd("merge", "-q", str(root))
    assert done.returncode == 0, done.stderr
    after = {"merged": _files(watched), **{model: _files(root / model / "merged") for model in MODELS}}
    assert after.keys() == before.keys()
    for folder in after:
        assert after[folder].keys() == before[folder].keys(), folder
        differ = [name for name in after[folder] if after[folder][name] != before[folder][name]]
        assert differ == [], (folder, differ)
    assert os.path.exists(watched / "sweep.html")
    doc = msgspec.json.decode((watched / "sweep.json").read_bytes())
    assert doc["baseline"] == "b" and all(row["p_holm"] is not None for row in doc["vs_baseline"])
