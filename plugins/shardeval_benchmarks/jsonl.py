"""Benchmarks from a JSONL file with a field mapping: bring your own data, no Python needed.

params: path (required), name (default: the file's stem), prompt_field (default: the first of
prompt/question/input present), messages_field, reference_field (default: answer/reference/target),
id_field (default: the row index), cluster_field. Scoring is exact match after normalisation
(answers.normalize); a GSM8K-style `#### x` in the reference or the response is reduced to x first.

The file is scanned once for its fingerprint and the byte offset of each row, so a shard seeks
to its own rows and never holds the others in memory.
"""

from __future__ import annotations

import hashlib
import os
from array import array
from typing import Any

import msgspec

from shardeval.benchmark import Benchmark, Problem, Score
from shardeval.errors import UsageError
from shardeval_benchmarks.answers import final_answer, normalize

PARAMS = {"path", "name", "prompt_field", "messages_field", "reference_field", "id_field", "cluster_field"}


class JsonlBenchmark(Benchmark):
    def __init__(self, params: dict[str, Any]) -> None:
        unknown = set(params) - PARAMS
        if unknown:
            raise UsageError(f"benchmark jsonl: unknown param {sorted(unknown)[0]!r}; known: {', '.join(sorted(PARAMS))}")
        path = params.get("path")
        if not path:
            raise UsageError("benchmark jsonl: params.path is required: the JSONL file to read")
        if not os.path.isfile(path):
            raise UsageError(f"benchmark {path!r}: no such file; give an existing JSONL path (relative to where you run shardeval)")
        self.path = path
        self.name = params.get("name") or os.path.basename(path).split(".")[0]
        self.params = params
        self._offsets, self._fingerprint = self._scan()
        first = self._row(0) if self._offsets else {}
        self.prompt_field = params.get("prompt_field") or _first_present(first, ("prompt", "question", "input"))
        self.messages_field = params.get("messages_field")
        self.reference_field = params.get("reference_field") or _first_present(first, ("answer", "reference", "target"))
        if self._offsets and not (self.prompt_field or self.messages_field):
            raise UsageError(
                f"benchmark {self.name}: cannot tell which field holds the prompt in {path}; "
                "set params.prompt_field (or params.messages_field)"
            )

    def _scan(self) -> tuple[array, str]:
        offsets = array("q")
        h = hashlib.sha256()
        pos = 0
        with open(self.path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    try:
                        msgspec.json.decode(line)
                    except msgspec.DecodeError as exc:
                        raise UsageError(f"{self.path}:{lineno}: not valid JSON ({exc}); fix or remove that line") from None
                    offsets.append(pos)
                    h.update(line.rstrip(b"\r\n"))
                    h.update(b"\n")
                pos += len(line)
        return offsets, "sha256:" + h.hexdigest()

    def _row(self, idx: int) -> dict[str, Any]:
        with open(self.path, "rb") as f:
            f.seek(self._offsets[idx])
            return msgspec.json.decode(f.readline())

    def size(self) -> int:
        return len(self._offsets)

    def fingerprint(self) -> str:
        return self._fingerprint

    def problem(self, idx: int) -> Problem:
        return self._to_problem(idx, self._row(idx))

    def problems(self, indices: range | list[int]):
        with open(self.path, "rb") as f:
            for idx in indices:
                f.seek(self._offsets[idx])
                yield self._to_problem(idx, msgspec.json.decode(f.readline()))

    def _to_problem(self, idx: int, row: dict[str, Any]) -> Problem:
        id_field, cluster_field = self.params.get("id_field"), self.params.get("cluster_field")
        reference = row.get(self.reference_field) if self.reference_field else None
        return Problem(
            idx=idx,
            id=str(row[id_field]) if id_field and id_field in row else str(idx),
            prompt=None if self.messages_field else str(row.get(self.prompt_field, "")),
            messages=row.get(self.messages_field) if self.messages_field else None,
            reference=None if reference is None else str(reference),
            cluster=str(row[cluster_field]) if cluster_field and cluster_field in row else None,
        )

    def score(self, problem: Problem, response: str) -> Score:
        extracted = final_answer(response) or response
        reference = problem.reference or ""
        want = final_answer(reference) or reference
        return Score(score=1.0 if normalize(extracted) == normalize(want) else 0.0, extracted=extracted.strip())


def _first_present(row: dict[str, Any], names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in row), None)
