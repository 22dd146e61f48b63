"""Models are compared only on the same questions (guarantees H6, H6b).

Two runs whose data, prompts or scorer differ answer different questions, or are graded by
different rules: a paired difference and a p-value between them would say nothing about the
models. `compare` and a sweep's table refuse such a pair (named, with the fingerprints that
differ) and still compare every pair that asks the same. Real runs against the simulator, real
rescores, the real CLI.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import REPO, api_eval_config, running_sim, shardeval_cmd
from pages_support import page_datasets

TESTS = os.path.dirname(os.path.abspath(__file__))
SCORER_ENV = {"SHARDEVAL_PLUGINS": "rescore_scorer_plugin", "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}


def write_rows(path: Path, answers: list[str]) -> Path:
    """A data file whose rows carry two prompt fields, so one file can be asked two ways."""
    rows = [{"id": f"q{i}", "question": f"What is {i} + 1?", "alt": f"Compute {i} plus one.", "answer": a} for i, a in enumerate(answers)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Five runs of arith + a data file against one simulator: `a`; `same` (identical config,
    another seed: the same questions); `prompt` (the data file asked with its other field);
    `revised` (the data file with one answer corrected); `fewer` (the data file's first 5 rows
    only: max_problems)."""
    tmp = tmp_path_factory.mktemp("same_questions")
    answers = [str(i + 1) for i in range(12)]
    data = write_rows(tmp / "qa.jsonl", answers)
    revised = write_rows(tmp / "qa_v2.jsonl", answers[:-1] + ["13.0"])
    variants = {
        "a": (data, "question", 0),
        "same": (data, "question", 7),
        "prompt": (data, "alt", 0),
        "revised": (revised, "question", 0),
        "fewer": (data, "question", 0),
    }
    with running_sim("--bench", "arith", "--accuracy", "0.6", "--ttft-ms", "1", "--itl-ms", "0") as url:
        for name, (path, field, seed) in variants.items():
            cfg = api_eval_config(tmp / f"{name}.yaml", url, n=30, concurrency=8)
            config = json.loads(cfg.read_text())
            config["seed"] = seed
            config["benchmarks"].append(
                {
                    "name": str(path),
                    "id": "qa",
                    "params": {"prompt_field": field, "id_field": "id"},
                    **({"max_problems": 5} if name == "fewer" else {}),
                }
            )
            cfg.write_text(json.dumps(config))
            r = shardeval_cmd("run", str(cfg), "-o", str(tmp / name))
            assert r.returncode == 0, r.stderr
    return tmp


def test_compare_refuses_a_run_rescored_with_another_scorer(runs, tmp_path):
    """H6: the original against its own rescore by another scorer: every benchmark is graded by
    other rules, so there is nothing to compare: one line, exit 2, naming the scorers, no p-value."""
    r = shardeval_cmd("rescore", str(runs / "a"), "-o", str(tmp_path / "rescored"), "--scorer", "length_multiple", env=SCORER_ENV)
    assert r.returncode == 0, r.stderr
    r = shardeval_cmd("compare", str(runs / "a"), str(tmp_path / "rescored"), env=SCORER_ENV)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "do not ask the same questions" in r.stderr and "arith: the scorer differs (A sha256:" in r.stderr, r.stderr


@pytest.mark.parametrize("other, differs", [("prompt", "the prompts differ"), ("revised", "the data differ")])
def test_compare_keeps_apart_a_benchmark_asked_otherwise_and_compares_the_rest(runs, tmp_path, other, differs):
    """H6 variants: the data file asked through another prompt field (same rows, other prompts),
    and a revised data file (one answer corrected): that benchmark is named as not compared in
    the text, --json and --html; arith, asked the same in both runs, is compared as before."""
    text = shardeval_cmd("compare", str(runs / "a"), str(runs / other))
    assert text.returncode == 0, text.stderr
    section = text.stdout.split("## qa", 1)[1]
    assert f"- not compared: {differs} (A sha256:" in section and "difference" not in section and "p =" not in section
    assert "## arith" in text.stdout and "difference B − A" in text.stdout.split("## arith", 1)[1]
    as_json = shardeval_cmd("compare", str(runs / "a"), str(runs / other), "--json", "--html", str(tmp_path / "c.html"))
    assert as_json.returncode == 0, as_json.stderr
    found = {r["benchmark"]: r for r in json.loads(as_json.stdout)}
    assert set(found["qa"]) == {"benchmark", "not_compared"} and found["qa"]["not_compared"].startswith(differs)
    assert found["arith"]["n_shared"] == 30 and found["arith"]["p_value"] is not None
    page = (tmp_path / "c.html").read_text()
    assert f"qa: {differs}" in page and 'data-key="qa/diff"' not in page and 'data-key="arith/diff"' in page


def test_compare_says_why_runs_of_other_sizes_are_not_compared(runs):
    """H6c: the same data file asked for its first 5 problems only (max_problems): qa is not
    compared, and the reason given is the true one (it said the prompts and the scorer differ,
    which they do not: both fingerprints are taken at probes spread over each run's problems)."""
    r = shardeval_cmd("compare", str(runs / "a"), str(runs / "fewer"), "--json")
    assert r.returncode == 0, r.stderr
    found = {x["benchmark"]: x for x in json.loads(r.stdout)}
    assert found["qa"] == {
        "benchmark": "qa",
        "not_compared": "they ask different numbers of problems (A 12, B 5: another "
        "max_problems), so their prompts and scorer cannot be checked against each other",
    }
    assert found["arith"]["n_shared"] == 30


def test_compare_of_the_same_questions_is_unchanged(runs):
    """H6: what differs is only the model's answers (another seed): every benchmark is compared."""
    r = shardeval_cmd("compare", str(runs / "a"), str(runs / "same"), "--json")
    assert r.returncode == 0, r.stderr
    assert [x["n_shared"] for x in json.loads(r.stdout)] == [30, 12]


def test_a_sweep_shows_a_model_scored_otherwise_apart_and_never_pairs_it(tmp_path):
    """H6b: in a sweep, one model's directory replaced by its rescore with another scorer: its
    cells are shown and marked ≠, it has no row against the baseline (no difference, no p, not
    in the Holm family), sweep.json/md/html say why; the other model is compared as before."""
    example = os.path.join(REPO, "examples", "sweep_sim.yaml")
    small = ["-O", "benchmarks.0.params.n=30", "-O", "benchmarks.1.params.n=30", "-O", "cluster.shards=1"]
    r = shardeval_cmd("run", example, *small, "-o", str(tmp_path / "sweep"), timeout=180)
    assert r.returncode == 0, r.stderr
    before = json.loads((tmp_path / "sweep" / "merged" / "sweep.json").read_text())
    assert {(v["service"], v["benchmark"]) for v in before["vs_baseline"]} == {
        (s, b) for s in ("step1", "step2") for b in ("arith", "arith_b")
    }
    r = shardeval_cmd(
        "rescore", str(tmp_path / "sweep"), "-o", str(tmp_path / "rescored"), "--scorer", "arith=length_multiple", env=SCORER_ENV
    )
    assert r.returncode == 0, r.stderr
    shutil.rmtree(tmp_path / "sweep" / "step1")
    shutil.copytree(tmp_path / "rescored" / "step1", tmp_path / "sweep" / "step1")
    r = shardeval_cmd("merge", str(tmp_path / "sweep"), "-q", env=SCORER_ENV)
    assert r.returncode == 0, r.stderr
    merged = tmp_path / "sweep" / "merged"
    doc = json.loads((merged / "sweep.json").read_text())
    assert {(v["service"], v["benchmark"]) for v in doc["vs_baseline"]} == {("step1", "arith_b"), ("step2", "arith"), ("step2", "arith_b")}
    [apart] = doc["not_compared"]
    assert (apart["service"], apart["benchmark"]) == ("step1", "arith")
    assert apart["why"].startswith("not compared with base: the scorer differs (base sha256:")
    marked = {(c["service"], c["benchmark"]) for c in doc["cells"] if c.get("differs_from_baseline")}
    assert marked == {("step1", "arith")}
    md = (merged / "sweep.md").read_text()
    assert "- step1 (arith): not compared with base: the scorer differs" in md
    step1 = next(line for line in md.splitlines() if line.startswith("| step1 |") and "[" in line)
    assert step1.split(" | ")[1].endswith("≠") and not step1.rstrip(" |").endswith("≠")  # arith marked, arith_b not
    html = (merged / "sweep.html").read_text()
    assert "step1 (arith): not compared with base: the scorer differs" in html
    shown = page_datasets(html)  # what the page's tables and charts draw
    assert {(r["service"], r["benchmark"]) for r in shown["vs"]} == {("step1", "arith_b"), ("step2", "arith"), ("step2", "arith_b")}
    assert {(c["service"], c["benchmark"]) for c in shown["cells"] if c["ok_shown"].endswith("≠")} == {("step1", "arith")}
