"""The built-in benchmarks: arith is deterministic and self-solving; JSONL maps fields and scores."""

from __future__ import annotations

import json

import pytest

from shardeval.errors import UsageError
from shardeval.api.benchmark import final_answer, normalize
from shardeval_benchmarks.arith import ArithBenchmark, solve_prompt
from shardeval_benchmarks.jsonl import JsonlBenchmark


def test_arith_is_deterministic_and_seed_dependent():
    a, b, c = ArithBenchmark({"n": 50}), ArithBenchmark({"n": 50}), ArithBenchmark({"n": 50, "seed": 1})
    assert [a.problem(i) for i in range(50)] == [b.problem(i) for i in range(50)]
    assert [a.problem(i).prompt for i in range(50)] != [c.problem(i).prompt for i in range(50)]
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    assert ArithBenchmark({"n": 51}).fingerprint() != a.fingerprint()


def test_arith_problem_depends_only_on_its_index():
    small, big = ArithBenchmark({"n": 10}), ArithBenchmark({"n": 100_000})
    assert small.problem(7).prompt == big.problem(7).prompt
    assert list(big.problems(range(99_990, 100_000)))[-1].idx == 99_999


def test_arith_answer_key_solves_every_prompt_and_nothing_else():
    bench = ArithBenchmark({"n": 3000, "seed": 5})
    for i in range(3000):
        p = bench.problem(i)
        assert solve_prompt(p.prompt) == p.reference
        assert int(p.reference) > 0
    assert solve_prompt("What is the capital of France?") is None


@pytest.mark.parametrize(
    "response,expected",
    [("so 12 + 3 = 15\n#### 15", 1.0), ("#### 15.0", 1.0), ("#### $15.", 1.0), ("#### 16", 0.0), ("15", 0.0)],
)
def test_arith_scoring(response, expected):
    bench = ArithBenchmark({"n": 1})
    problem = bench.problem(0).__class__(idx=0, id="x", prompt="p", reference="15")
    assert bench.score(problem, response).score == expected


@pytest.mark.parametrize("params", [{"n": -1}, {"n": "many"}, {"seed": 1.5}, {"size": 3}])
def test_arith_bad_params_are_usage_errors(params):
    with pytest.raises(UsageError):
        ArithBenchmark(params)


def test_answer_helpers():
    assert final_answer("a\n#### 1,234\n") == "1,234"
    assert final_answer("no marker") is None
    assert normalize(" The  Answer. ") == "the answer"
    assert normalize("$1,234") == "1234"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_jsonl_maps_fields_and_reads_only_requested_rows(tmp_path):
    rows = [{"question": f"q{i}", "answer": f"step\n#### {i}", "uid": f"u{i}", "topic": "t"} for i in range(20)]
    bench = JsonlBenchmark({"path": write_jsonl(tmp_path / "d.jsonl", rows), "id_field": "uid", "cluster_field": "topic"})
    assert bench.name == "d" and bench.size() == 20
    problems = list(bench.problems(range(5, 8)))
    assert [p.id for p in problems] == ["u5", "u6", "u7"]
    assert problems[0].prompt == "q5" and problems[0].cluster == "t"
    assert bench.score(problems[0], "thinking...\n#### 5").score == 1.0
    assert bench.score(problems[0], "#### 6").score == 0.0


def test_jsonl_fingerprint_changes_with_content(tmp_path):
    a = JsonlBenchmark({"path": write_jsonl(tmp_path / "a.jsonl", [{"prompt": "x", "answer": "1"}])})
    b = JsonlBenchmark({"path": write_jsonl(tmp_path / "b.jsonl", [{"prompt": "x", "answer": "2"}])})
    assert a.fingerprint() != b.fingerprint()


def test_jsonl_errors_name_the_problem(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        JsonlBenchmark({"path": str(tmp_path / "missing.jsonl")})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n{oops\n')
    with pytest.raises(UsageError, match="bad.jsonl:2"):
        JsonlBenchmark({"path": str(bad)})
    with pytest.raises(UsageError, match="prompt_field"):
        JsonlBenchmark({"path": write_jsonl(tmp_path / "c.jsonl", [{"text": "x"}])})


def test_benchmark_declares_what_core_reads_and_nothing_only_the_simulator_uses():
    """Core reads a benchmark only through what `Benchmark` declares (no `getattr` with a default
    that hides an undeclared attribute); the simulator's hooks live in its plugin, with defaults
    a benchmark that leaves them out gets."""
    import ast
    from pathlib import Path

    import shardeval
    from shardeval.api.benchmark import Benchmark, Problem
    from shardeval_sim.benchmark_hooks import answer_key, reply_renderer

    guarded = []
    for path in Path(shardeval.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "getattr"
                and node.args
                and getattr(node.args[0], "id", None) in ("benchmark", "bench", "data")
            ):
                guarded.append(f"{path.name}:{node.lineno}")
    assert guarded == []
    assert (Benchmark.data_origin, Benchmark.judge_rubric) == ("", None)
    assert not hasattr(Benchmark, "answer_key") and not hasattr(Benchmark, "simulated_reply")

    class Two(Benchmark):
        def size(self) -> int:
            return 2

        def problem(self, idx: int) -> Problem:
            return Problem(idx=idx, id=str(idx), prompt=f"what is {idx} + 1?", reference=str(idx + 1))

    key = answer_key(Two())
    assert (key(" what is 1 + 1? "), key("what is 5 + 1?")) == ("2", None)
    assert reply_renderer(Two()) is None  # the simulator's generic reply
    arith = ArithBenchmark({"n": 5})
    assert answer_key(arith)(arith.problem(3).prompt) == arith.problem(3).reference  # its own key
