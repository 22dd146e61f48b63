"""Paths from files stay inside the run (H15): a sweep_plan.json (or a symlink) cannot pull another
run into a sweep's merge, export or status; a sweep model named like what shardeval keeps at the
sweep's root is refused at config time; `rescore -o` never writes into another run. Real CLI
processes on runs made by real shards against the simulator."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import api_eval_config, running_sim, shardeval_cmd


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Two finished one-shard runs of arith: `mine` and `other` (another run beside it)."""
    root = tmp_path_factory.mktemp("runs")
    with running_sim("--bench", "arith", "--ttft-ms", "1", "--itl-ms", "0") as url:
        for name, n in (("mine", 4), ("other", 6)):
            cfg = api_eval_config(root / f"{name}.yaml", url, n=n)
            result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(root / name / "shard_0"))
            assert result.returncode == 0, result.stderr
    return root


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def a_sweep(tmp: Path, runs: Path, listed: list[str]) -> Path:
    """A sweep root whose model `a` is the `mine` run, with a sweep_plan.json listing `listed`;
    `other` copied beside it."""
    shutil.copytree(runs / "other", tmp / "other")
    root = tmp / "sweep"
    shutil.copytree(runs / "mine", root / "a")
    (root / "sweep_plan.json").write_text(json.dumps({"services": ["a", *listed], "baseline": "a", "shards": 1}))
    return root


@pytest.mark.parametrize("listed", ["../other", "ABSOLUTE", ".", "merged", "a/../../other"])
def test_a_sweep_plan_naming_a_path_outside_is_refused_by_merge_export_and_status(tmp_path, runs, listed):
    listed = str(tmp_path / "other") if listed == "ABSOLUTE" else listed
    root = a_sweep(tmp_path, runs, [listed])
    before = tree(tmp_path / "other")
    for argv in (["merge", str(root)], ["export", str(root), "-o", str(tmp_path / "rows.csv")], ["status", str(root)]):
        result = shardeval_cmd(*argv)
        assert result.returncode == 2, (argv, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and f"lists the model {listed!r}, which is not a folder of this sweep" in lines[0], result.stderr
    assert tree(tmp_path / "other") == before  # no merged/ written into the other run
    assert not (tmp_path / "rows.csv").exists()


def test_a_model_folder_that_links_outside_the_sweep_is_refused(tmp_path, runs):
    root = a_sweep(tmp_path, runs, ["b"])
    (root / "b").symlink_to(tmp_path / "other")
    before = tree(tmp_path / "other")
    for argv in (["merge", str(root)], ["export", str(root), "-o", str(tmp_path / "rows.csv")]):
        result = shardeval_cmd(*argv)
        assert result.returncode == 2, result.stderr
        assert f"{root / 'b'} leads outside the sweep (to {tmp_path / 'other'})" in result.stderr
    assert tree(tmp_path / "other") == before


def test_the_control_a_plan_of_its_own_folders_merges(tmp_path, runs):
    root = a_sweep(tmp_path, runs, ["b"])
    shutil.copytree(runs / "other", root / "b")
    result = shardeval_cmd("merge", str(root))
    assert result.returncode == 0, result.stderr
    assert json.loads((root / "merged" / "sweep.json").read_text())["services"] == ["a", "b"]


@pytest.mark.parametrize("name", ["merged", "sweep_plan.json", "superseded", "logs", "shard_0"])
def test_a_sweep_model_named_like_a_reserved_file_is_refused_at_config_time(tmp_path, name):
    config = {
        "services": {name: {"type": "sim", "bench": "arith"}, "b": {"type": "sim", "bench": "arith"}},
        "benchmarks": [{"name": "arith", "params": {"n": 2}}],
        "sweep": {"services": [name, "b"]},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(config))
    result = shardeval_cmd("run", str(path), "--dry-run", "-o", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"service {name!r} cannot be a sweep model: <out>/{name} is" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_folder_named_merged_is_refused_with_the_prefix_as_the_fix(tmp_path):
    (tmp_path / "ckpt" / "merged").mkdir(parents=True)
    config = {
        "services": {"base": {"type": "sim", "bench": "arith", "model": "base"}},
        "benchmarks": [{"name": "arith", "params": {"n": 2}}],
        "sweep": {"services": ["base"], "checkpoints": {"template": "base", "paths": f"{tmp_path}/ckpt/*/"}},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(config))
    result = shardeval_cmd("run", str(path), "--dry-run", "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and "service 'merged' cannot be a sweep model" in result.stderr
    assert "sweep.checkpoints.prefix" in result.stderr


@pytest.mark.parametrize("where", ["other_root", "inside_other_shard", "other_with_other_names"])
def test_rescore_into_another_run_is_refused_before_anything_is_written(tmp_path, runs, where):
    shutil.copytree(runs / "mine", tmp_path / "mine")
    shutil.copytree(runs / "other", tmp_path / "other")
    if where == "other_with_other_names":  # its shard is not called shard_0: no per-shard check would meet it
        (tmp_path / "other" / "shard_0").rename(tmp_path / "other" / "node-a")
    before = tree(tmp_path / "other")
    out = tmp_path / "other" / ("shard_0/rescored" if where == "inside_other_shard" else "")
    result = shardeval_cmd("rescore", str(tmp_path / "mine"), "-o", str(out))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert ("inside the shard directory" if where == "inside_other_shard" else "holds another run") in lines[0], lines
    assert tree(tmp_path / "other") == before  # no lock, heartbeat, shard or log of the rescore in it


def test_rescore_into_an_earlier_rescore_of_the_same_run_still_resumes(tmp_path, runs):
    shutil.copytree(runs / "mine", tmp_path / "mine")
    first = shardeval_cmd("rescore", str(tmp_path / "mine"), "-o", str(tmp_path / "new"))
    assert first.returncode == 0, first.stderr
    again = shardeval_cmd("rescore", str(tmp_path / "mine"), "-o", str(tmp_path / "new"))
    assert again.returncode == 0, again.stderr
    assert os.path.exists(tmp_path / "new" / "shard_0" / "manifest.json")
