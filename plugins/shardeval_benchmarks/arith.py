"""`arith`: generated arithmetic word problems, deterministic from a seed, any size.

No data to download, so demos, tests and benchmarks work offline at any scale. Problem i depends
only on (seed, i), so any shard generates its own range in O(range) time and O(1) memory. Answers
use GSM8K's `#### <number>` form. The prompts follow fixed templates, so `answer_key` solves a
prompt from its text alone: the simulator needs no index of the dataset.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any
from collections.abc import Callable

from shardeval.api.benchmark import Benchmark, Problem, Score, as_number, final_answer
from shardeval.api.plugin import UsageError

GENERATOR_VERSION = "arith-v1"
INSTRUCTION = "Solve the problem. End your reply with the final answer on its own line as '#### <number>'."
NAMES = ("Ada", "Bilal", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemi", "Lior")
ITEMS = ("apples", "marbles", "stamps", "pencils", "shells", "coins", "books", "tickets")


# (template, regex that recovers a, b, c from it, answer) for each problem shape.
TEMPLATES: list[tuple[str, str, Callable[[int, int, int], int]]] = [
    (
        "{name} has {a} {item}. {name} gets {b} more and gives away {c}. How many {item} does {name} have now?",
        r"has (\d+) \w+\. \w+ gets (\d+) more and gives away (\d+)\.",
        lambda a, b, c: a + b - c,
    ),
    (
        "A box holds {a} {item}. {name} buys {b} boxes and loses {c} {item}. How many {item} does {name} have?",
        r"A box holds (\d+) \w+\. \w+ buys (\d+) boxes and loses (\d+) ",
        lambda a, b, c: a * b - c,
    ),
    (
        "{name} shares {a} {item} equally among {b} friends and keeps the {c} left over. How many {item} does each friend get?",
        r"shares (\d+) \w+ equally among (\d+) friends and keeps the (\d+) left",
        lambda a, b, c: (a - c) // b,
    ),
    (
        "{name} had {a} dollars, spent {b} dollars on {item}, then earned {c} dollars. How many dollars does {name} have?",
        r"had (\d+) dollars, spent (\d+) dollars on \w+, then earned (\d+) dollars",
        lambda a, b, c: a - b + c,
    ),
]
PATTERNS = [re.compile(regex) for _, regex, _ in TEMPLATES]


class ArithBenchmark(Benchmark):
    """params: n (problems, default 1000), seed (default 0)."""

    scorer_version = "1"  # bump when score() or its answer extraction changes
    name = "arith"

    def __init__(self, params: dict[str, Any]) -> None:
        unknown = set(params) - {"n", "seed"}
        if unknown:
            raise UsageError(f"benchmark arith: unknown param {sorted(unknown)[0]!r}; arith takes n and seed")
        n, seed = params.get("n", 1000), params.get("seed", 0)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise UsageError(f"benchmark arith: params.n must be a whole number >= 0, got {n!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise UsageError(f"benchmark arith: params.seed must be an integer, got {seed!r}")
        self.n, self.seed = n, seed

    def size(self) -> int:
        return self.n

    def problem(self, idx: int) -> Problem:
        rng = random.Random(f"{GENERATOR_VERSION}:{self.seed}:{idx}")
        shape = rng.randrange(len(TEMPLATES))
        template, _, solve = TEMPLATES[shape]
        if shape == 2:  # division must come out even
            b, per = rng.randint(2, 9), rng.randint(2, 40)
            c = rng.randint(0, b - 1)
            a = b * per + c
        else:
            a, c = rng.randint(20, 99), rng.randint(1, 20)  # a >= c keeps every answer positive
            b = rng.randint(2, a) if shape == 3 else rng.randint(2, 60)
        question = template.format(name=rng.choice(NAMES), item=rng.choice(ITEMS), a=a, b=b, c=c)
        return Problem(
            idx=idx,
            id=f"arith-{self.seed}-{idx}",
            prompt=f"{question}\n{INSTRUCTION}",
            reference=str(solve(a, b, c)),
        )

    def fingerprint(self) -> str:
        """The rows are a pure function of (generator version, seed, n): hash that, not a million rows."""
        return "sha256:" + hashlib.sha256(f"{GENERATOR_VERSION}:{self.seed}:{self.n}".encode()).hexdigest()

    def score(self, problem: Problem, response: str) -> Score:
        extracted = final_answer(response)
        got, want = as_number(extracted), as_number(problem.reference)
        return Score(score=1.0 if got is not None and got == want else 0.0, extracted=extracted)

    def answer_key(self) -> Callable[[str], str | None]:
        return solve_prompt


def solve_prompt(text: str) -> str | None:
    """Recover an arith problem's answer from its wording alone (None if it is not one)."""
    for pattern, (_, _, solve) in zip(PATTERNS, TEMPLATES):
        match = pattern.search(text)
        if match:
            a, b, c = (int(g) for g in match.groups())
            return str(solve(a, b, c))
    return None
