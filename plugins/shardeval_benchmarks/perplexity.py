"""`perplexity`: a corpus's perplexity, exp(total NLL / total tokens), over any sharding.

Each document is one problem. The `loglikelihood` solver (which the simple solver hands these
problems to, so no `solver.type` is needed) sends it to `/v1/completions` with `echo: true,
logprobs: 1, max_tokens: 0` and records scores `nll` (minus the sum of its tokens' logprobs) and
`tokens` (how many were scored). The merge's `perplexity` metric sums both over the whole corpus in
canonical order (exactly rounded sums, so every sharding gives the same float) and reports
exp(Σ nll / Σ tokens), and `token_nll`, with delta-method intervals over documents. The record's
primary `score` is the document's own per-token NLL (the solver's reply); no metric uses it.

Scored tokens: every token of the document except its first, which nothing precedes (a server that
prepends BOS, like vLLM for Llama-family models, scores the first token too). A document longer
than the model's context window fails as a `client` error unless `max_chars_per_request` splits it
into windows: each request holds at most that many characters, the scored piece ending where a
whitespace run begins, preceded by up to `context_chars` characters (default a quarter of it) that
condition the piece without being scored. Characters, not tokens: the client has no tokenizer, so
leave headroom (about 3-4 characters per token for English text).

params
  path | url | hf (+ sha256, format)  the corpus: a `.txt` file is one document per non-empty line;
                 other files are rows (JSONL, JSON, CSV, Parquet) with the text in `text_field`
  text_field     default "text"
  id_field       a row field holding a stable document id (default: the row index)
  name           the benchmark's name in results (default "perplexity"), to run several corpora
  max_chars_per_request, context_chars   see above (default: no splitting)
"""

from __future__ import annotations

import hashlib
import math
import os
from array import array
from typing import Annotated, Any

import msgspec

from shardeval.api.benchmark import DataParams, decode_params, JsonlRows, open_from_params, Problem, Rows, RowsBenchmark, Score
from shardeval.api.plugin import UsageError
from shardeval.api.records import open_regular


class PerplexityParams(DataParams):
    text_field: str = "text"
    id_field: str | None = None
    name: str = "perplexity"
    max_chars_per_request: Annotated[int, msgspec.Meta(ge=2)] | None = None
    context_chars: Annotated[int, msgspec.Meta(ge=0)] | None = None  # and below max_chars_per_request


class TextLines(JsonlRows):
    """A plain-text corpus, one document per non-empty line (without its line break), read by offset."""

    def __init__(self, path: str) -> None:
        self.path = self.origin = path
        self.gz = False
        self._offsets = array("q")
        pos = 0
        with open_regular(path) as f:  # a FIFO or a device is refused, never waited on
            for line in f:
                if line.strip():
                    self._offsets.append(pos)
                pos += len(line)

    def _decode(self, line: bytes, i: int) -> dict[str, Any]:
        try:
            return {"text": line.rstrip(b"\r\n").decode("utf-8")}
        except UnicodeDecodeError as exc:
            raise UsageError(
                f"{self.origin}: document {i} is not UTF-8 (bad byte at offset {exc.start}); save the corpus as UTF-8"
            ) from None


class PerplexityBenchmark(RowsBenchmark):
    scorer_version = "1"  # bump when score() or its answer extraction changes
    metrics = ("perplexity",)

    @classmethod
    def scored_by_likelihood(cls, params: dict[str, Any]) -> bool:
        return True  # every document is scored, never answered

    def __init__(self, params: dict[str, Any]) -> None:
        p = decode_params(params, PerplexityParams, source="benchmark perplexity")
        self.name = p.name
        self.params = p
        if p.context_chars is not None:
            if p.max_chars_per_request is None:
                raise UsageError(f"benchmark {p.name}: params.context_chars needs params.max_chars_per_request")
            if not 0 <= p.context_chars < p.max_chars_per_request:
                raise UsageError(
                    f"benchmark {p.name}: params.context_chars must be >= 0 and below max_chars_per_request "
                    f"({p.max_chars_per_request}), got {p.context_chars}"
                )
        if not (p.path or p.url or p.hf):
            raise UsageError(
                f"benchmark {p.name}: no corpus given; set params.path to a .txt file (one document per line) or to "
                f"rows with a `{p.text_field}` field (.jsonl, .json, .csv, .parquet), or params.url / params.hf"
            )
        if p.path and (p.format == "text" or (p.format is None and p.path.lower().endswith(".txt"))):
            if not os.path.isfile(p.path):
                raise UsageError(f"benchmark {p.name}: {p.path}: no such file (looked at {os.path.abspath(p.path)}); give params.path")
            self.rows: Rows = TextLines(p.path)
        elif p.format == "text":
            raise UsageError(f"benchmark {p.name}: format text reads a local file; give it as params.path")
        else:
            self.rows = open_from_params(p, benchmark=p.name)
        self._metadata: dict[str, Any] = {"scoring": "loglikelihood"}
        if p.max_chars_per_request is not None:
            self._metadata["max_chars_per_request"] = p.max_chars_per_request
            self._metadata["context_chars"] = p.context_chars if p.context_chars is not None else p.max_chars_per_request // 4

    def fingerprint(self) -> str:
        """The corpus's rows and the text field they are read from."""
        return "sha256:" + hashlib.sha256(f"{self.rows.fingerprint()}\n{self.params.text_field}".encode()).hexdigest()

    def row_problem(self, idx: int, row: dict[str, Any]) -> Problem:
        field = self.params.text_field
        text = row.get(field)
        if not isinstance(text, str):
            raise UsageError(f"benchmark {self.name}: {self.rows.origin}: row {idx} has no text in field {field!r}; set params.text_field")
        id_field = self.params.id_field
        pid = str(row[id_field]) if id_field and row.get(id_field) is not None else str(idx)
        return Problem(idx=idx, id=pid, prompt=text, metadata=self._metadata)

    def score(self, problem: Problem, response: str) -> Score:
        """The document's per-token NLL, which the solver replies as text; None when no token was
        scored (the solver says NaN): an ok record in no mean, never a score that is not a number
        (which a record refuses: shardeval.store.records.score_fault)."""
        try:
            value = float(response)
        except ValueError:
            value = math.nan
        return Score(score=value if math.isfinite(value) else None)

    def answer_key(self):
        return lambda text: None  # nothing to answer: the simulator's logprobs need no key
