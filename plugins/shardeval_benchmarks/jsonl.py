"""Benchmarks from a data file with a field mapping: bring your own data, no Python needed.

params: path (or url / hf, with optional sha256 and format: see datasets.py; any supported format
works, JSONL being the usual one), name (default: the file's stem), prompt_field (default: the
first of prompt/question/input present), messages_field, reference_field (default:
answer/reference/target), id_field (default: the row index), cluster_field. Scoring is exact
match after normalisation (answers.normalize); a GSM8K-style `#### x` in the reference or the
response is reduced to x first.

Rows come from `datasets.open_rows`: a JSONL file is scanned once for its fingerprint and each
row's byte offset, so a shard seeks to its own rows and never holds the others in memory.
"""

from __future__ import annotations

import os
from typing import Any

from shardeval.api import (
    SOURCE_PARAMS, Problem, RowsBenchmark, Score, UsageError, final_answer, normalize, open_from_params,
)

PARAMS = {"name", "prompt_field", "messages_field", "reference_field", "id_field", "cluster_field", *SOURCE_PARAMS}


class JsonlBenchmark(RowsBenchmark):
    scorer_version = "1"  # bump when score() or its answer extraction changes
    def __init__(self, params: dict[str, Any]) -> None:
        unknown = set(params) - PARAMS
        if unknown:
            raise UsageError(f"benchmark jsonl: unknown param {sorted(unknown)[0]!r}; known: {', '.join(sorted(PARAMS))}")
        source = params.get("path") or params.get("url") or params.get("hf")
        if not source:
            raise UsageError("benchmark jsonl: params.path is required: the JSONL file to read (or params.url / params.hf)")
        self.name = params.get("name") or _stem(str(source))
        self.params = params
        self.rows = open_from_params(params, benchmark=self.name)
        self.data_origin = self.rows.origin
        first = self.rows.row(0) if len(self.rows) else {}
        self.prompt_field = params.get("prompt_field") or _first_present(first, ("prompt", "question", "input"))
        self.messages_field = params.get("messages_field")
        self.reference_field = params.get("reference_field") or _first_present(first, ("answer", "reference", "target"))
        if len(self.rows) and not (self.prompt_field or self.messages_field):
            raise UsageError(
                f"benchmark {self.name}: cannot tell which field holds the prompt in {self.rows.origin}; "
                "set params.prompt_field (or params.messages_field)"
            )

    def row_problem(self, idx: int, row: dict[str, Any]) -> Problem:
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


def _stem(source: str) -> str:
    """`data/trivia.jsonl.gz` -> `trivia`; a URL's or hub spec's last path part likewise."""
    if source.startswith("hf://"):
        source = source.split(":", 2)[1] if source.count(":") > 1 else source
    base = os.path.basename(source.split("?")[0].rstrip("/"))
    return base.split(".")[0] or "data"


def _first_present(row: dict[str, Any], names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in row), None)
