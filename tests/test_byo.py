"""Bring your own benchmark: a data file plus a YAML mapping, run end to end; each scorer; mapping errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import REPO, running_sim, shardeval_cmd
from shardeval.errors import UsageError
from shardeval_benchmarks.custom import CustomBenchmark

TRIVIA = os.path.join(REPO, "examples", "byo", "trivia.yaml")
QUIZ = os.path.join(REPO, "examples", "byo", "quiz_mc.yaml")
FAST = ("--ttft-ms", "0", "--itl-ms", "0")


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mapping(tmp: Path, text: str, rows: list[dict] | None = None, name: str = "m.yaml") -> str:
    if rows is not None:
        (tmp / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp / name
    path.write_text(text)
    return str(path)


# --- end to end ----------------------------------------------------------------------------------


def test_trivia_example_quick_mode_against_the_simulator(tmp_path):
    """`--bench path/to/mapping.yaml` routes to the custom benchmark; the sim knows the answers from the same mapping."""
    with running_sim("--bench", "custom", "--bench-param", f"spec={TRIVIA}", "--accuracy", "0.6", *FAST) as url:
        result = shardeval_cmd("run", "--bench", TRIVIA, "--model-url", url, "--model-id", "sim", "-n", "3", "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    recs = records(tmp_path / "out" / "trivia" / "results.jsonl")
    assert len(recs) == 23 * 3 and all(r["status"] == "ok" for r in recs)
    right = [r for r in recs if r["score"] == 1.0]
    assert 0 < len(right) < len(recs)  # the sim gets some right and some wrong, and scoring tells them apart
    bench = CustomBenchmark({"spec": TRIVIA})
    for r in recs:
        problem = bench.problem(r["problem_idx"])
        assert r["problem_id"] == problem.id and r["reference"] == problem.reference
        assert r["score"] == bench.score(problem, r["response"]).score
    assert {r["cluster"] for r in recs} == {"geography", "science", "history"}
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["benchmarks"][0]["dataset_fingerprint"] == bench.fingerprint()
    assert manifest["benchmarks"][0]["metrics"] == ["accuracy"]  # from the mapping's `metrics`


def test_mapping_via_params_spec_two_shards_and_merge(tmp_path):
    with running_sim("--bench", "custom", "--bench-param", f"spec={QUIZ}", "--accuracy", "1.0", *FAST) as url:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            f"services: {{model: {{type: api, url: {url}, model: sim}}}}\n"
            f"benchmarks: [{{name: custom, params: {{spec: {QUIZ}}}, repeats: 2}}]\n"
        )
        for i in range(2):
            result = shardeval_cmd("run", str(cfg), "--shard", f"{i}/2", "-o", str(tmp_path / "run" / f"s{i}"))
            assert result.returncode == 0, result.stderr
    merged = shardeval_cmd("merge", str(tmp_path / "run"), "-q")
    assert merged.returncode == 0, merged.stderr
    recs = records(tmp_path / "run" / "merged" / "quiz_mc" / "results.jsonl")
    # Accuracy 1.0: the benchmark's own simulated reply names the right letter, and extraction finds it.
    assert len(recs) == 16 and all(r["score"] == 1.0 and r["extracted"] == r["reference"] for r in recs)
    scores = json.loads((tmp_path / "run" / "merged" / "scores.json").read_text())["quiz_mc"]
    assert scores["n_problems"] == 8 and scores["n_missing"] == 0


def test_a_broken_mapping_fails_the_run_with_one_line(tmp_path):
    bad = mapping(tmp_path, "data: rows.jsonl\nscorr: exact\n", rows=[{"question": "q", "answer": "a"}])
    result = shardeval_cmd("run", "--bench", bad, "--model-url", "http://127.0.0.1:9/v1", "--model-id", "m", "-o", str(tmp_path / "o"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"shardeval: error: {bad}: unknown key 'scorr'; did you mean 'scorer'?"


def test_benchmarks_command_describes_a_mapping(tmp_path):
    result = shardeval_cmd("benchmarks", TRIVIA, "--show", "1")
    assert result.returncode == 0, result.stderr
    assert "name:        trivia" in result.stdout and "problems:    23" in result.stdout
    assert "[user] Question: What is the capital of France?\nAnswer:" in result.stdout
    listing = shardeval_cmd("benchmarks")
    assert listing.returncode == 0, listing.stderr
    lines = {line.split()[0]: line for line in listing.stdout.splitlines() if line.strip()}
    assert "unavailable: benchmark custom: needs params.spec" in lines["custom"] and lines["arith"].split()[1:3] == ["benchmarks", "1000"]


# --- each scorer on hand-written replies ---------------------------------------------------------


def test_exact_scorer_with_aliases_and_normalisation(tmp_path):
    spec = mapping(
        tmp_path,
        "data: rows.jsonl\nprompt: 'Q: {question}'\n",
        rows=[{"question": "Capital of France?", "answer": "Paris"}, {"question": "Who?", "answer": ["Neil Armstrong", "Armstrong"]}],
    )
    b = CustomBenchmark({"spec": spec})
    paris, neil = b.problem(0), b.problem(1)
    assert paris.prompt == "Q: Capital of France?" and b.name == "m"
    for reply, right in [
        ("Paris", True),
        ("paris.", True),
        ("  PARIS  ", True),
        ("The answer is Paris.", True),
        ("I think so.\n#### Paris", True),
        ("Lyon", False),
        ("Paris, or maybe Lyon", False),
        ("", False),
    ]:
        assert b.score(paris, reply).score == float(right), reply
    assert b.score(neil, "armstrong").score == 1.0 and b.score(neil, "The Neil Armstrong!").score == 1.0
    assert b.score(neil, "Buzz Aldrin").score == 0.0


def test_numeric_scorer(tmp_path):
    spec = mapping(
        tmp_path, "data: rows.jsonl\nscorer: numeric\n", rows=[{"input": "2.5 + 1?", "target": 3.5}, {"input": "?", "target": "1,000"}]
    )
    b = CustomBenchmark({"spec": spec})
    p, q = b.problem(0), b.problem(1)
    assert p.reference == "3.5" and p.prompt == "2.5 + 1?"
    assert b.score(p, "It is 3.50").score == 1.0 and b.score(p, "#### $3.5").score == 1.0
    assert b.score(p, "The answer is 3.").score == 0.0 and b.score(p, "no idea").score == 0.0
    assert b.score(q, "\\boxed{1000}").score == 1.0 and b.score(q, "1,001").score == 0.0


def test_regex_scorer(tmp_path):
    spec = mapping(
        tmp_path,
        "data: rows.jsonl\nscorer: regex\nregex: 'FINAL: *(\\w+)'\n",
        rows=[{"question": "colour of the sky?", "answer": "blue"}],
    )
    b = CustomBenchmark({"spec": spec})
    p = b.problem(0)
    assert b.score(p, "FINAL: red ... no wait FINAL: Blue").score == 1.0  # the last match counts
    assert b.score(p, "FINAL: red").extracted == "red" and b.score(p, "FINAL: red").score == 0.0
    assert b.score(p, "blue").score == 0.0 and b.score(p, "blue").extracted is None  # no match, no answer
    whole = CustomBenchmark({"data": str(tmp_path / "rows.jsonl"), "scorer": "regex", "regex": r"\bblue\b"})
    assert whole.score(whole.problem(0), "it is blue").score == 1.0


def test_choice_scorer_targets_and_rendering(tmp_path):
    rows = [
        {"q": "2+2?", "options": ["3", "4", "5"], "gold": "B"},
        {"q": "Red planet?", "options": ["Mars", "Venus", "Earth"], "gold": 0},
        {"q": "Largest?", "options": ["Moon", "Sun", "Mars"], "gold": "Sun"},
    ]
    spec = mapping(
        tmp_path,
        'data: rows.jsonl\nscorer: choice\nfields: {input: q, target: gold, choices: options}\nprompt: "{input}\\n{choices}\\nAnswer:"\n',
        rows=rows,
    )
    b = CustomBenchmark({"spec": spec})
    assert [p.reference for p in b.problems(range(3))] == ["B", "A", "B"]
    assert b.problem(0).prompt == "2+2?\nA. 3\nB. 4\nC. 5\nAnswer:"
    p = b.problem(0)
    for reply, right in [
        ("B", True),
        ("(B)", True),
        ("The answer is (B).", True),
        ("Answer: B", True),
        ("#### B", True),
        ("\\boxed{B}", True),
        ("A is wrong and C is wrong, so B", True),
        ("The answer is A.", False),
        ("D", False),  # not one of the three options
        ("I don't know", False),
    ]:
        assert b.score(p, reply).score == float(right), reply
    assert b.simulated_reply("C", True).endswith("(C).") and "(A)" in b.simulated_reply("C", False)


def test_csv_with_choice_columns_and_categories():
    b = CustomBenchmark({"spec": QUIZ})
    p = b.problem(0)
    assert b.size() == 8 and p.cluster == "astronomy" and p.reference == "B" and p.id == "q1"
    assert 'Which planet is known as the "Red Planet"?\n\nA. Venus\nB. Mars' in p.prompt


def test_inline_mapping_in_params_and_system_prompt(tmp_path, monkeypatch):
    (tmp_path / "d.csv").write_text("question,answer,topic\nWhat is 1+1?,2,math\n")
    monkeypatch.chdir(tmp_path)
    b = CustomBenchmark({"name": "inline", "data": "d.csv", "system_prompt": "Be brief.", "fields": {"category": "topic"}})
    p = b.problem(0)
    assert b.name == "inline" and p.cluster == "math" and p.prompt is None
    assert p.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 1+1?"}]
    assert p.user_text() == "What is 1+1?"


# --- mapping errors are one line ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        ("data: rows.jsonl\nscorerr: exact\n", "unknown key 'scorerr'; did you mean 'scorer'?"),
        ("data: rows.jsonl\nfields: {inputs: q}\n", "unknown key 'fields.inputs'; did you mean 'input'?"),
        ("data: rows.jsonl\nscorer: fuzzy\n", "scorer: invalid value 'fuzzy'; expected one of: exact, numeric, regex, choice"),
        ("scorer: exact\n", "missing required key 'data'"),
        ("data: nowhere.jsonl\n", "nowhere.jsonl: no such file (looked at"),
        ("data: rows.jsonl\nprompt: 'Q: {question} ({topic})'\n", "prompt uses {topic}, but row 0 of"),
        ("data: rows.jsonl\nprompt: 'Q: {question.upper}'\n", "prompt uses {question.upper}; use plain field names"),
        ("data: rows.jsonl\nprompt: 'Q: {question'\n", "prompt is not a valid template"),
        ("data: rows.jsonl\nfields: {id: uid}\n", "fields.id is 'uid', but row 0 of"),
        ("data: rows.jsonl\nscorer: regex\n", "scorer regex needs `regex:`"),
        ("data: rows.jsonl\nscorer: regex\nregex: '(unclosed'\n", "regex '(unclosed' is not a valid pattern"),
        ("data: rows.jsonl\nscorer: choice\n", "scorer choice needs fields.choices"),
        ("data: rows.jsonl\nmetrics: accuracy\n", "metrics: expected list"),
        ("- just\n- a list\n", "the top level must be a mapping"),
        ("data: rows.jsonl\ndata: again.jsonl\n", "duplicate key 'data'"),
    ],
)
def test_mapping_errors_are_one_line(tmp_path, text, message):
    spec = mapping(tmp_path, text, rows=[{"question": "q", "answer": "a"}])
    with pytest.raises(UsageError) as exc:
        CustomBenchmark({"spec": spec})
    assert "\n" not in str(exc.value) and message in str(exc.value), str(exc.value)


def test_params_errors(tmp_path):
    with pytest.raises(UsageError, match="needs params.spec=path/to/mapping.yaml"):
        CustomBenchmark({})
    with pytest.raises(UsageError, match=r"no such mapping file \(looked at .*missing.yaml\)"):
        CustomBenchmark({"spec": str(tmp_path / "missing.yaml")})
    with pytest.raises(UsageError, match="put 'prompt' in that file instead"):
        CustomBenchmark({"spec": TRIVIA, "prompt": "x"})
    with pytest.raises(UsageError, match="benchmark custom: unknown key 'params.dataa'; did you mean 'data'"):
        CustomBenchmark({"dataa": "x.jsonl"})
    bad_target = mapping(
        tmp_path,
        "data: rows.jsonl\nscorer: choice\nfields: {choices: [a, b]}\n",
        rows=[{"question": "q", "a": "x", "b": "y", "answer": "Z"}],
    )
    with pytest.raises(UsageError, match="row 0: target 'Z' is not a letter A-B"):
        CustomBenchmark({"spec": bad_target})
    # every choice field of a list is looked for, not only the last
    no_first = mapping(
        tmp_path, "data: rows.jsonl\nscorer: choice\nfields: {choices: [a, b]}\n", rows=[{"question": "q", "b": "y", "answer": "A"}]
    )
    with pytest.raises(UsageError, match=r"fields.choices\[0\] is 'a', but row 0 of .* has no such field"):
        CustomBenchmark({"spec": no_first})
