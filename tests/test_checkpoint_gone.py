"""Issue 42, point 3: a checkpoint deleted by the trainer before its evaluation is reported, not
retried forever: its cells start no server, end in error records of kind `checkpoint_gone`
naming the path, and exit 3, as a shard whose pairs all end in errors does. Real `shardeval run`,
`merge` and `status` processes against the simulator."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import shardeval_cmd
from shardeval.config.loading import load_config
from shardeval.config.sweep import checkpoint_name, checkpoint_paths, plan_sweep
from shardeval.store.records import read_manifest

SIM = {"type": "sim", "bench": "arith", "ttft_ms": 0, "itl_ms": 0, "output_tokens": 4}
BENCHMARKS = [{"name": "arith", "params": {"n": 4}}, {"name": "arith", "id": "arith_b", "params": {"n": 3, "seed": 7}}]


def _sweep(tmp_path: Path, paths: list[str] | str, template: dict, key: str = "root") -> Path:
    config = {
        "services": {"tpl": template},
        "benchmarks": BENCHMARKS,
        "sweep": {"checkpoints": {"template": "tpl", "key": key, "paths": paths}},
        "output": {"progress_interval_s": 0},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(config))
    return path


def _records(cell: Path) -> list[dict]:
    return [json.loads(line) for bench in ("arith", "arith_b") for line in (cell / bench / "results.jsonl").read_text().splitlines()]


def test_a_deleted_checkpoints_cell_ends_in_errors_naming_it(tmp_path: Path) -> None:
    """The watcher's launch of each checkpoint (explicit paths, `--sweep-services NAME`): the one
    deleted since ends exit 3 with every pair a `checkpoint_gone` error naming its path and no
    simulator started; the other is complete; the merge says ERRORS naming the kind; status gives
    the path. Once the folder is back, a rerun of that cell asks its pairs and is complete."""
    ckpts = [tmp_path / "ckpt" / "step1", tmp_path / "ckpt" / "step2"]
    for folder in ckpts:
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    requests, weights = tmp_path / "requests.jsonl", tmp_path / "weights.jsonl"
    template = {**SIM, "log_requests": str(requests), "weights_log": str(weights)}
    config = _sweep(tmp_path, f"{tmp_path}/ckpt/step*/", template)
    listed = "sweep.checkpoints.paths=" + json.dumps([f"{folder}/" for folder in ckpts])
    root = tmp_path / "out"

    def cell(name: str):
        return shardeval_cmd("run", str(config), "-O", listed, "--sweep-services", name, "--shard", "0/1", "-o", str(root))

    gone = ckpts[1]
    (gone / "config.json").unlink()
    gone.rmdir()
    out = cell("step2")
    assert out.returncode == 3, out.stderr
    reason = f"checkpoint {gone}/ is gone (no such file or folder): deleted before its evaluation; not retried"
    assert f"shard 0/1 finished with errors: {reason}: 7 of 7 pairs end in errors (checkpoint_gone 7)" in out.stderr
    records = _records(root / "step2" / "shard_0")
    assert len(records) == 7
    assert all(r["status"] == "error" and r["error_kind"] == "checkpoint_gone" and r["error"] == reason for r in records)
    assert all(r["score"] is None for r in records)
    assert not requests.exists() and not weights.exists(), "no simulator was started for the deleted checkpoint"
    assert not (root / "step2" / "shard_0" / "logs" / "sim.log").exists()
    manifest = read_manifest(str(root / "step2" / "shard_0"))
    assert manifest.state == "finished_with_errors" and reason in (manifest.reason or "")
    assert {bm.name: bm.error_kinds for bm in manifest.benchmarks} == {"arith": {"checkpoint_gone": 4}, "arith_b": {"checkpoint_gone": 3}}

    assert (ok := cell("step1")).returncode == 0, ok.stderr
    assert read_manifest(str(root / "step1" / "shard_0")).state == "complete"
    merged = shardeval_cmd("merge", str(root))
    assert merged.returncode == 3, merged.stderr
    assert "ERRORS: 7 of 7 cells end in errors (7 checkpoint_gone)" in merged.stdout
    report = (root / "step2" / "merged" / "report.md").read_text()
    assert "excluded from scores: checkpoint_gone 4" in report
    assert reason in (root / "step2" / "merged" / "report.html").read_text()  # each error record's text
    status = shardeval_cmd("status", str(root))
    assert reason in status.stdout, status.stdout

    # the checkpoint is back (restored from a backup): the cell is asked as any error pairs are
    gone.mkdir()
    (gone / "config.json").write_text("{}")
    again = cell("step2")
    assert again.returncode == 0, again.stderr
    assert read_manifest(str(root / "step2" / "shard_0")).state == "complete"
    roots = [json.loads(line)["root"] for line in weights.read_text().splitlines()]
    assert roots == [f"{ckpts[0]}/", f"{gone}/"]
    assert shardeval_cmd("merge", str(root)).returncode == 0


def test_checkpoint_names_that_are_not_local_paths_are_left_alone(tmp_path: Path) -> None:
    """`org/model-step1` may be a Hugging Face id (vLLM tries a folder, then the hub): that nothing
    is at that relative path proves nothing, so its cell runs as before (the simulator reports it
    as its root and never reads it). A local-looking path (absolute, `./`, `~/`) that is missing is
    gone; so is nothing behind an `api` service, whose model names weights on another machine."""
    config = _sweep(tmp_path, ["org/model-step1", "org/model-step2"], SIM)
    sweep = plan_sweep(load_config(str(config)))
    assert sweep.checkpoints == {"model-step1": "org/model-step1", "model-step2": "org/model-step2"}
    assert sweep.gone("model-step1") is None
    out = shardeval_cmd(
        "run", str(config), "--sweep-services", "model-step2", "--shard", "0/1", "-o", str(tmp_path / "out"), cwd=str(tmp_path)
    )
    assert out.returncode == 0, out.stderr
    records = _records(tmp_path / "out" / "model-step2" / "shard_0")
    assert len(records) == 7 and all(r["status"] == "ok" for r in records)

    local = plan_sweep(load_config(str(_sweep(tmp_path, ["./nothing/step3", f"{tmp_path}/nothing/step4"], SIM))))
    assert local.gone("step3") == "checkpoint ./nothing/step3 is gone (no such file or folder): deleted before its evaluation; not retried"
    assert local.gone("step4") is not None
    remote = {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "placeholder"}
    elsewhere = plan_sweep(load_config(str(_sweep(tmp_path, [f"{tmp_path}/nothing/step5"], remote, key="model"))))
    assert elsewhere.checkpoints == {"step5": f"{tmp_path}/nothing/step5"} and elsewhere.gone("step5") is None


def test_checkpoint_paths_are_the_generated_services_and_nothing_else(tmp_path: Path) -> None:
    """checkpoint_paths names each service `sweep.checkpoints` generated with the same rule as the
    generation (prefix, characters made `_`), for globs and lists alike, and never a listed service."""
    (tmp_path / "ckpt" / "step 10").mkdir(parents=True)
    (tmp_path / "ckpt" / "step2").mkdir()
    config = {
        "services": {"base": {**SIM, "root": f"{tmp_path}/ckpt/step2"}},
        "benchmarks": BENCHMARKS,
        "sweep": {
            "services": ["base"],
            "checkpoints": {"template": "base", "key": "root", "paths": f"{tmp_path}/ckpt/step*", "prefix": "c_"},
        },
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(config))
    loaded = load_config(str(path))
    assert loaded.sweep is not None and loaded.sweep.services == ["base", "c_step2", "c_step_10"]
    assert checkpoint_paths(loaded) == {"c_step2": f"{tmp_path}/ckpt/step2", "c_step_10": f"{tmp_path}/ckpt/step 10"}
    assert checkpoint_name(f"{tmp_path}/ckpt/step 10/", "c_") == "c_step_10"
    no_sweep = {"services": {"model": SIM}, "benchmarks": BENCHMARKS}
    path.write_text(json.dumps(no_sweep))
    assert checkpoint_paths(load_config(str(path))) == {}
