"""`shardeval export RUN --to inspect -o DIR` (issue 29): one Inspect .eval log per (model, benchmark),
read back with Inspect's own `read_eval_log`.

A shardeval benchmark's log is made from its merged records: every standing record a sample (its
conversation, answer, score, or error), the run's metrics in the results exactly as scores.json
holds them, status `success` only for a complete run. An Inspect task's benchmark gets the log its
merge writes (merged/inspect/<task>.eval), the same samples. Runs are real: the CLI against the
built-in simulator, failing some requests where a test needs errors.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from conftest import shardeval_cmd
from inspect_support import inspect_config, inspect_sim, inspect_view, merge, read_log, run_shards, write_tasks

pytest.importorskip("inspect_ai")
pytestmark = pytest.mark.timeout(180)

N, REPEATS = 12, 2
SIM = {"type": "sim", "bench": "arith", "accuracy": 0.6, "ttft_ms": 0, "itl_ms": 0, "output_tokens": 8}


def run_config(tmp: Path, name: str, services: dict, sweep: bool = False) -> Path:
    data = {
        "services": services,
        "benchmarks": [
            {"name": "arith", "params": {"n": N}, "repeats": REPEATS, "max_concurrent": 8},
            {"name": "arith", "id": "arith_b", "params": {"n": N, "seed": 7}, "max_concurrent": 8},
        ],
        "cluster": {"type": "local", "shards": 2},
        "output": {"progress_interval_s": 0},
        **({"sweep": {"services": list(services)}} if sweep else {}),
    }
    path = tmp / name
    path.write_text(json.dumps(data))
    return path


def launch(cfg: Path, out: Path, code: int = 0) -> Path:
    done = shardeval_cmd("run", str(cfg), "-o", str(out))
    assert done.returncode == code, done.stderr
    return out


def export(root: Path, out: Path) -> None:
    done = shardeval_cmd("export", str(root), "--to", "inspect", "-o", str(out))
    assert done.returncode in (0, 3), done.stderr  # 3: the run has errors, which the log says
    assert f"inspect view --log-dir {out}" in done.stdout and "Traceback" not in done.stderr, done.stderr


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_log(log_file: Path, merged: Path, bench: str, status: str) -> list:
    """The log holds every standing record of `bench` as a sample, its score or its error, and the
    run's metrics as scores.json holds them; returns the error samples."""
    log = read_log(log_file)
    records = jsonl(merged / bench / "results.jsonl")
    conversations = {(t["problem_id"], t["repeat"]): t for t in jsonl(merged / bench / "trajectories.jsonl")}
    scores = json.loads((merged / "scores.json").read_text())[bench]
    assert (log.status, log.eval.task, log.eval.model) == (status, bench, "sim")
    assert len(log.samples) == len(records) == scores["n_expected"]
    by_cell = {(s.id, s.epoch): s for s in log.samples}
    # every record once, epoch by epoch as Inspect orders them
    assert [(s.id, s.epoch) for s in log.samples] == sorted(by_cell, key=lambda cell: cell[1])
    assert sorted(by_cell) == sorted((r["problem_id"], r["repeat"] + 1) for r in records)
    errors = []
    for r in records:
        s = by_cell[(r["problem_id"], r["repeat"] + 1)]
        assert s.target == r["reference"] and s.metadata["status"] == r["status"] and s.metadata["shard"] == r["shard"]
        said = conversations[(r["problem_id"], r["repeat"])]["messages"]
        assert [m.text for m in s.input] == [m["content"] for m in said if m["role"] != "assistant"]
        if r["status"] == "ok":
            assert s.error is None and s.scores["shardeval"].value == r["score"] and s.scores["shardeval"].answer == r["extracted"]
            assert s.output.completion == r["response"] and s.messages[-1].role == "assistant" and s.messages[-1].text == r["response"]
            assert s.model_usage["sim"].output_tokens == r["completion_tokens"]
        else:
            assert not s.scores and r["error_kind"] in s.error.message
            errors.append(s)
    [result] = log.results.scores
    assert set(result.metrics) == set(scores["metrics"])
    for name, m in scores["metrics"].items():  # to the last digit
        got = result.metrics[name]
        assert (got.value, got.params["ci_low"], got.params["ci_high"], got.params["n"]) == (m["value"], m["ci_low"], m["ci_high"], m["n"])
    assert (log.results.total_samples, log.results.completed_samples) == (scores["n_expected"], scores["n_ok"])
    return errors


@pytest.fixture(scope="module")
def errors_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 2-shard run whose simulator fails a quarter of the requests (one attempt each), exported:
    (the run, the logs' folder)."""
    tmp = tmp_path_factory.mktemp("errors")
    failing = {**SIM, "fail_5xx": 0.25, "retries": {"attempts": 1}}
    root = launch(run_config(tmp, "errors.yaml", {"model": failing}), tmp / "run", code=3)
    export(root, tmp / "logs")
    return root, tmp / "logs"


def test_a_run_with_errors_exports_every_record_its_scores_and_its_errors(errors_export: tuple[Path, Path]) -> None:
    root, out = errors_export
    assert sorted(p.name for p in out.iterdir()) == ["arith.eval", "arith_b.eval"]
    errors = check_log(out / "arith.eval", root / "merged", "arith", "error")
    errors += check_log(out / "arith_b.eval", root / "merged", "arith_b", "error")
    assert errors, "a 25 % failure rate with one attempt left no error"
    log = read_log(out / "arith.eval")
    n_ok = json.loads((root / "merged" / "scores.json").read_text())["arith"]["n_ok"]
    assert f"{N * REPEATS - n_ok} of {N * REPEATS} (sample, epoch) cells have no ok answer" in log.error.message


def test_inspect_view_lists_the_exported_logs_and_chromium_shows_the_samples_and_errors(errors_export: tuple[Path, Path], browser) -> None:
    root, out = errors_export
    records = jsonl(root / "merged" / "arith" / "results.jsonl")
    failed = [r for r in records if r["status"] != "ok"]
    with inspect_view(out) as origin:
        with urllib.request.urlopen(origin + "/api/logs", timeout=10) as reply:
            listed = json.loads(reply.read())
        assert sorted((Path(f["name"]).name, f["task"]) for f in listed["files"]) == [("arith.eval", "arith"), ("arith_b.eval", "arith_b")]
        with visit(browser, origin + "/#/logs/arith.eval", ready="() => document.body.innerText.includes('rows')", timeout_ms=30_000) as v:
            text = v.page.inner_text("body")
            assert v.exceptions == [] and v.foreign_requests() == []
    assert f"TASK FAILED\n({N * REPEATS} SAMPLES)" in text and f"{N * REPEATS} rows" in text
    assert f"{len(failed)} of {N * REPEATS} samples" in text  # errors are shown as Inspect's own, unscored
    assert failed[0]["error"] in text and records[0]["problem_id"] in text


def test_a_sweep_writes_one_log_per_model_and_benchmark_and_export_again_replaces_them(tmp_path: Path) -> None:
    services = {"base": SIM, "step100": {**SIM, "accuracy": 0.8}}
    root = launch(run_config(tmp_path, "sweep.yaml", services, sweep=True), tmp_path / "sweep")
    out = tmp_path / "logs"
    export(root, out)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["base/arith.eval", "base/arith_b.eval", "step100/arith.eval", "step100/arith_b.eval"]
    check_log(out / "step100" / "arith.eval", root / "step100" / "merged", "arith", "success")
    ids = {f: read_log(out / f).eval.eval_id for f in files}
    assert len(set(ids.values())) == 4
    export(root, out)  # the same logs again, under the same ids: replaced, none added, no temporary left
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == files
    assert {f: read_log(out / f).eval.eval_id for f in files} == ids


def test_an_inspect_task_run_exports_the_log_its_merge_writes(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks", 8)
    with inspect_sim(tasks) as url:
        cfg = inspect_config(tmp_path / "config.json", url, tasks, [{"task": "arith", "repeats": 2}])
        run_shards(cfg, tmp_path / "run", 2)
    assert merge(tmp_path / "run").returncode == 0
    out = tmp_path / "logs"
    export(tmp_path / "run", out)
    merged, exported = read_log(tmp_path / "run" / "merged" / "inspect" / "arith.eval"), read_log(out / "arith.eval")
    assert len(exported.samples) == 16 and exported.status == merged.status == "success"
    assert [s.model_dump() for s in exported.samples] == [s.model_dump() for s in merged.samples]
    assert exported.results.model_dump() == merged.results.model_dump()
    assert (exported.eval.task, exported.eval.task_file, exported.plan.model_dump()) == (
        merged.eval.task,
        merged.eval.task_file,
        merged.plan.model_dump(),
    )

    # the task gone from where it was: the log is made from the records instead, and says so
    tasks.rename(tasks.with_name("moved.py"))
    done = shardeval_cmd("export", str(tmp_path / "run"), "--to", "inspect", "-o", str(out))
    assert done.returncode == 0 and "inspect: model/arith: the task's own log cannot be made here" in done.stdout, done.stderr
    fallback = read_log(out / "arith.eval")
    assert sorted((s.id, s.epoch) for s in fallback.samples) == sorted((s.id, s.epoch) for s in merged.samples)
    assert fallback.eval.eval_id == exported.eval.eval_id and fallback.status == "success"


def one_line(done, code: int = 2) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_bad_output_folders_are_one_line_and_exit_2_before_any_merge(tmp_path: Path, errors_export: tuple[Path, Path]) -> None:
    root = tmp_path / "run"  # never merged: each refusal comes before the merge would be asked for
    (root / "shard_0").mkdir(parents=True)
    (root / "shard_0" / "manifest.json").write_text("{}")
    a_file = tmp_path / "logs.eval"
    a_file.write_text("")
    line = one_line(shardeval_cmd("export", str(root), "--to", "inspect", "-o", str(a_file)))
    assert str(a_file) in line and "a file, not a folder" in line
    line = one_line(shardeval_cmd("export", str(root), "--to", "inspect"))
    assert "--to inspect needs -o (e.g. -o DIR)" in line
    assert not (root / "merged").exists()
    run, _ = errors_export
    inside = run / "shard_0" / "inspect_logs"
    line = one_line(shardeval_cmd("export", str(run), "--to", "inspect", "-o", str(inside)))
    assert f"-o {inside} is inside the shard directory" in line and not inside.exists()
