"""A sweep with `sweep.gate` (issue 44, point 4): every place a sweep's numbers are shown carries
each model's verdict against the baseline, and it is the verdict `shardeval gate` gives.

Real processes on the simulator: `shardeval run` of a sweep of three simulated models on `arith`
(400 problems): `base` (accuracy 0.70), `same` (0.70: two simulators started alike answer alike,
so an identical candidate) and `worse` (0.50). The launch's merge writes sweep.json, sweep.md and
sweep.html; then `shardeval gate SWEEP --json`, `shardeval status` and the trackers' export are
read against them.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import shardeval_cmd
from shardeval.results.sweep_merge import merge_any
from shardeval.results.trackers import tracker_export

SIM = {"type": "sim", "bench": "arith", "ttft_ms": 0, "itl_ms": 0, "output_tokens": 8}
ACCURACY = {"base": 0.70, "same": 0.70, "worse": 0.50}
MARGIN = 0.02


def write_config(path: Path, out: Path, gate: object) -> Path:
    config = {
        "services": {name: {**SIM, "accuracy": acc} for name, acc in ACCURACY.items()},
        "benchmarks": [
            {
                "name": "arith",
                "params": {"n": 400},
                "max_concurrent": 32,
                "solver": {"type": "simple", "generation": {"temperature": 0.7, "max_tokens": 16}},
            }
        ],
        "sweep": {"services": list(ACCURACY), "baseline": "base", "gate": gate},
        "cluster": {"type": "local", "shards": 1, "parallel": 3},
        "output": {"dir": str(out), "progress_interval_s": 0},
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gate_sweep")
    out = root / "out"
    run = shardeval_cmd("run", str(write_config(root / "sweep.yaml", out, {"margin": MARGIN})), "-o", str(out), timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def verdicts(doc: dict) -> dict[str, str]:
    return {m["service"]: m["verdict"] for m in doc["gate"]["models"]}


def test_sweep_json_holds_each_models_verdict_as_the_gate_command_decides_it(sweep: Path) -> None:
    doc = json.loads((sweep / "merged" / "sweep.json").read_text())
    assert doc["gate"]["rule"] == {"margin": MARGIN}  # alpha and power at their defaults, left out
    assert verdicts(doc) == {"same": "GO", "worse": "NO-GO"}  # never the baseline against itself
    command = shardeval_cmd("gate", str(sweep), "--margin", str(MARGIN), "--json", "--output", str(sweep.parent / "gate.json"))
    assert command.returncode == 4, command.stderr  # NO-GO: `worse` regressed
    by_command = {m["candidate"]: m for m in json.loads(command.stdout)["models"]}
    for model in doc["gate"]["models"]:
        mine, theirs = model["benchmarks"], by_command[model["service"]]["benchmarks"]
        assert [(b["benchmark"], b["verdict"], b["diff"], b["lower"], b["upper"]) for b in mine] == [
            (b["benchmark"], b["verdict"], b["diff"], b["lower"], b["upper"]) for b in theirs
        ]


def test_sweep_md_and_sweep_html_mark_each_model(sweep: Path) -> None:
    md = (sweep / "merged" / "sweep.md").read_text()
    assert f"## Gate: each model against base, margin {MARGIN:g}" in md
    assert re.search(r"\| worse \| \*\*NO-GO\*\* \| arith \| NO-GO \|", md) and re.search(r"\| same \| \*\*GO\*\* \| arith \| GO \|", md)
    html = (sweep / "merged" / "sweep.html").read_text()
    assert html.count('data-verdict="NO-GO"') == 3  # the models table, the gate table's model and its benchmark
    assert html.count('data-verdict="GO"') == 3
    assert 'id="gate"' in html


def test_status_says_each_verdict_is_final_once_every_cell_is_answered(sweep: Path) -> None:
    done = shardeval_cmd("status", str(sweep))
    assert done.returncode == 0, done.stderr
    assert "gate worse: NO-GO (final: every cell answered; it cannot change any more)" in done.stdout
    assert "gate same: GO (final" in done.stdout
    assert "gate base" not in done.stdout


def test_status_keeps_a_verdict_open_while_the_merge_has_not_seen_every_cell(sweep: Path, tmp_path: Path) -> None:
    copy = tmp_path / "out"
    shutil.copytree(sweep, copy, symlinks=True)
    doc = json.loads((copy / "merged" / "sweep.json").read_text())
    for cell in doc["cells"]:
        if cell["service"] == "worse":
            cell["n_missing"] = 1  # as a merge written while worse still ran would say
    (copy / "merged" / "sweep.json").write_text(json.dumps(doc))
    done = shardeval_cmd("status", str(copy))
    assert "gate worse: open" in done.stdout and "gate same: GO (final" in done.stdout


def test_the_trackers_runs_carry_the_verdict_as_tags(sweep: Path) -> None:
    runs = {(r.model, r.benchmark): r for r in tracker_export(merge_any(str(sweep), out_dir=None)).runs}
    assert runs["worse", "arith"].tags["shardeval.gate"] == "NO-GO"
    assert runs["worse", "arith"].tags["shardeval.gate.benchmark"] == "NO-GO"
    assert runs["same", "arith"].tags["shardeval.gate"] == "GO"
    assert runs["same", "arith"].tags["shardeval.gate.margin"] == f"{MARGIN:g}"
    assert not any(k.startswith("shardeval.gate") for k in runs["base", "arith"].tags)


def test_without_a_rule_no_verdict_is_made(sweep: Path, tmp_path: Path) -> None:
    copy = tmp_path / "out"
    shutil.copytree(sweep, copy, symlinks=True)
    plan = json.loads((copy / "sweep_plan.json").read_text())
    assert plan.pop("gate") == {"margin": MARGIN}
    (copy / "sweep_plan.json").write_text(json.dumps(plan))
    done = shardeval_cmd("merge", str(copy))
    assert done.returncode == 0, done.stderr
    doc = json.loads((copy / "merged" / "sweep.json").read_text())
    assert "gate" not in doc and "## Gate" not in (copy / "merged" / "sweep.md").read_text()
    assert "gate " not in shardeval_cmd("status", str(copy)).stdout


@pytest.mark.parametrize(
    "gate, named",
    [
        ({"margin": 1.5}, "margin"),
        ({"margin": 0.02, "alpha": 0.7}, "alpha"),
        ({"alpha": 0.05}, "margin"),
        ({"margin": 0.02, "beta": 1}, "beta"),
    ],
)
def test_a_bad_rule_is_one_line_before_anything_runs(tmp_path: Path, gate: dict, named: str) -> None:
    out = tmp_path / "out"
    done = shardeval_cmd("run", str(write_config(tmp_path / "sweep.yaml", out, gate)), "-o", str(out))
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "sweep.gate" in done.stderr and named in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def test_a_runs_report_shows_its_gate_while_the_answers_decided_on_stand(sweep: Path, tmp_path: Path) -> None:
    """`shardeval gate BASE CAND` writes CAND/merged/gate.json with the fingerprint of the answers
    it decided on; report.md and report.html show the verdict from the next merge, and a gate.json
    decided on other answers (here: another run's) is named as not this run's verdict."""
    copy = tmp_path / "out"
    shutil.copytree(sweep, copy, symlinks=True)
    done = shardeval_cmd("gate", str(copy / "base"), str(copy / "worse"), "--margin", str(MARGIN))
    assert done.returncode == 4, done.stderr
    gate = json.loads((copy / "worse" / "merged" / "gate.json").read_text())
    assert gate["kind"] == "shardeval-gate" and len(gate["candidate_scores"]) == 64
    assert shardeval_cmd("merge", str(copy / "worse")).returncode == 0
    md = (copy / "worse" / "merged" / "report.md").read_text()
    assert f"## Gate against {copy / 'base'}" in md and "**NO-GO** at margin" in md
    assert re.search(r"\| arith \| NO-GO \| -0\.\d+ \|", md)
    html = (copy / "worse" / "merged" / "report.html").read_text()
    assert html.count('data-verdict="NO-GO"') == 2 and 'id="gate-stale"' not in html  # overall and arith
    # another run's gate.json beside `same`'s merge: named, its verdict not shown as same's
    shutil.copy(copy / "worse" / "merged" / "gate.json", copy / "same" / "merged" / "gate.json")
    assert shardeval_cmd("merge", str(copy / "same")).returncode == 0
    md = (copy / "same" / "merged" / "report.md").read_text()
    assert "was decided on other answers than these" in md and "**NO-GO**" not in md
    html = (copy / "same" / "merged" / "report.html").read_text()
    assert 'id="gate-stale"' in html and 'data-verdict="NO-GO"' not in html
    # and a run with no gate.json has no section
    assert "## Gate" not in (copy / "base" / "merged" / "report.md").read_text()
