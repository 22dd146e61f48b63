"""Benchmarks from a data file with a field mapping: bring your own data, no Python needed.

params: path (or url / hf, with optional sha256 and format: see datasets.py; any supported format
works, JSONL being the usual one), name (default: the file's stem), prompt_field (default: the
first of prompt/question/input present), messages_field, reference_field (default:
answer/reference/target), id_field (default: the row index), cluster_field, images_field (default:
`images` when rows have it: paths relative to the data file, http(s) or data: URLs, placed at the
prompt's `<image>` markers or before its text), images_root (a folder outside the data file's that
rows may name images in; without it a row naming a file outside the data file's folder is refused). Scoring is exact
match after normalisation (answers.normalize); a GSM8K-style `#### x` in the reference or the
response is reduced to x first. Rows come from `datasets.open_rows`, so a shard reads only its own.
"""

from __future__ import annotations

import os
from typing import Any

from shardeval.api.benchmark import DataParams, Problem, RowsBenchmark, Score, decode_params, final_answer, normalize, open_from_params
from shardeval.api.plugin import UsageError


class JsonlParams(DataParams):
    name: str | None = None
    prompt_field: str | None = None
    messages_field: str | None = None
    reference_field: str | None = None
    id_field: str | None = None
    cluster_field: str | None = None
    images_field: str | None = None
    images_root: str | None = None  # relative to the working directory, as `path` is


class JsonlBenchmark(RowsBenchmark):
    scorer_version = "1"  # bump when score() or its answer extraction changes

    def __init__(self, params: dict[str, Any]) -> None:
        p = decode_params(params, JsonlParams, source="benchmark jsonl")
        source = p.path or p.url or p.hf
        if not source:
            raise UsageError("benchmark jsonl: params.path is required: the JSONL file to read (or params.url / params.hf)")
        self.name = p.name or _stem(source)
        self.params = p
        self.rows = open_from_params(p, benchmark=self.name)
        first = self.rows.row(0) if len(self.rows) else {}
        self.prompt_field = p.prompt_field or self.first_field(first, ("prompt", "question", "input"))
        self.messages_field = p.messages_field
        self.reference_field = p.reference_field or self.first_field(first, ("answer", "reference", "target"))
        if len(self.rows) and not (self.prompt_field or self.messages_field):
            raise UsageError(
                f"benchmark {self.name}: cannot tell which field holds the prompt in {self.rows.origin}; "
                "set params.prompt_field (or params.messages_field)"
            )
        images_field = p.images_field or ("images" if "images" in first else None)
        base_dir = os.path.dirname(os.path.abspath(p.path)) if p.path else None
        self.use_images(
            images_field,
            base_dir,
            f"benchmark {self.name} ({self.rows.origin})",
            _folder(p.images_root, f"benchmark {self.name}: params.images_root") if p.images_root else None,
        )

    def row_problem(self, idx: int, row: dict[str, Any]) -> Problem:
        id_field, cluster_field = self.params.id_field, self.params.cluster_field
        reference = row.get(self.reference_field) if self.reference_field else None
        problem = Problem(
            idx=idx,
            id=str(row[id_field]) if id_field and id_field in row else str(idx),
            prompt=None if self.messages_field else str(row.get(self.prompt_field, "")) if self.prompt_field else "",
            messages=row.get(self.messages_field) if self.messages_field else None,
            reference=None if reference is None else str(reference),
            cluster=str(row[cluster_field]) if cluster_field and cluster_field in row else None,
        )
        return self.with_images(
            problem, row, problem.user_text(), f"benchmark {self.name} ({self.rows.origin}): row {idx} (id {problem.id})"
        )

    def score(self, problem: Problem, response: str) -> Score:
        extracted = final_answer(response) or response
        reference = problem.reference or ""
        want = final_answer(reference) or reference
        return Score(score=1.0 if normalize(extracted) == normalize(want) else 0.0, extracted=extracted.strip())


def _folder(path: str, where: str) -> str:
    """An images_root: an existing folder, made absolute."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        raise UsageError(f"{where}: {path} is not a folder; name the folder that holds the rows' images")
    return path


def _stem(source: str) -> str:
    """`data/trivia.jsonl.gz` -> `trivia`; a URL's or hub spec's last path part likewise."""
    if source.startswith("hf://"):
        source = source.split(":", 2)[1] if source.count(":") > 1 else source
    base = os.path.basename(source.split("?")[0].rstrip("/"))
    return base.split(".")[0] or "data"
