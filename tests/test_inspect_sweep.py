"""An Inspect task in a sweep: two simulated models × one Inspect task, 2 shards each, one launch.

Issue 27: "merge, pass@k, intervals, compare, sweeps, report.html and export work as for native
benchmarks". Both models are `type: sim` services that know the task's answers (their `bench:
inspect` loads the same task), at accuracies 0.3 and 0.9; the sweep's table, `shardeval compare`
and `shardeval export` read the Inspect records as they read any, and every model gets its own
merged Inspect log.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import shardeval_cmd
from inspect_support import write_tasks

pytest.importorskip("inspect_ai")

N, EPOCHS = 40, 2
TRUTH = {"weak": 0.3, "strong": 0.9}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inspect_sweep")
    tasks = write_tasks(root / "tasks", N)
    sim = {"type": "sim", "bench": "inspect", "bench_params": {"task": f"{tasks}@arith"}, "ttft_ms": 0, "itl_ms": 0, "output_tokens": 12}
    config = root / "sweep.json"
    config.write_text(
        json.dumps(
            {
                "services": {name: {**sim, "accuracy": accuracy} for name, accuracy in TRUTH.items()},
                "benchmarks": [{"name": "inspect", "params": {"task": f"{tasks}@arith"}, "repeats": EPOCHS}],
                "sweep": {"services": list(TRUTH), "baseline": "weak"},
                "cluster": {"type": "local", "shards": 2, "parallel": 2},
                "output": {"dir": str(root / "out"), "progress_interval_s": 0},
            }
        )
    )
    run = shardeval_cmd("run", str(config), cwd=str(root), timeout=400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return root / "out"


@pytest.mark.timeout(500)
def test_the_sweep_table_compare_and_export_read_inspect_records(sweep: Path, tmp_path: Path) -> None:
    from inspect_ai.log import read_eval_log

    doc = json.loads((sweep / "merged" / "sweep.json").read_text())
    cells = {c["service"]: c for c in doc["cells"] if c["metric"] == "accuracy" and c["benchmark"] == "arith"}
    assert set(cells) == set(TRUTH)
    for service, truth in TRUTH.items():
        assert cells[service]["complete"] and cells[service]["n"] == N, cells[service]
        assert cells[service]["ci_low"] <= truth <= cells[service]["ci_high"], cells[service]
        log = read_eval_log(str(sweep / service / "merged" / "inspect" / "arith.eval"))  # each model's own log
        assert log.status == "success" and len(log.samples) == N * EPOCHS
        assert log.results.scores[0].metrics["accuracy"].value == pytest.approx(cells[service]["value"])
    [row] = [r for r in doc["vs_baseline"] if r["benchmark"] == "arith"]
    assert row["service"] == "strong" and row["ci_low"] > 0 and row["complete"], row  # a sure, right sign

    compared = shardeval_cmd("compare", str(sweep / "weak"), str(sweep / "strong"), "--json")
    assert compared.returncode == 0, compared.stderr
    [mine] = json.loads(compared.stdout)
    assert (mine["diff"], mine["ci_low"], mine["ci_high"]) == (row["diff"], row["ci_low"], row["ci_high"])

    exported = shardeval_cmd("export", str(sweep), "-o", str(tmp_path / "all.csv"))
    assert exported.returncode == 0, exported.stderr
    with open(tmp_path / "all.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(TRUTH) * N * EPOCHS
    assert len({r["problem_id"] for r in rows}) == N and {r["status"] for r in rows} == {"ok"}
    assert (sweep / "strong" / "merged" / "report.html").stat().st_size > 0
