"""What the pages show of a reasoning model's replies (docs/reasoning.md): per benchmark, how many
answers were cut off while thinking and how many tokens a reply thought.

Every page reads a benchmark's numbers through one function, `reasoning_of`: the `reasoning`
object of scores.json (`{n_answered, truncated_reasoning, truncated, with_reasoning,
reasoning_tokens: {n, mean, p50, p90, max, from: {usage, stream}} | null}`), taken from the merge
when it carries one (a `reasoning` Struct or dict on its BenchmarkMerge) and otherwise computed
here, the same way, from the merge's per-cell `ReasoningCells`. None: the benchmark has neither
thinking nor a cut-off reply, and the pages show nothing of it. The histogram of tokens per reply
comes from those cells too (scores.json holds no per-record numbers).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import msgspec

from shardeval.api import OK

if TYPE_CHECKING:
    from shardeval.api import BenchmarkMerge

TRUNCATED_REASONING = "truncated while thinking"
TRUNCATED = "cut off after answering"
ANSWERED = "answered"
OUTCOMES = [ANSWERED, TRUNCATED, TRUNCATED_REASONING]  # the histogram's stacking, bottom up
MAX_BINS = 30  # a histogram's bars at most, whatever the run's size


def reasoning_of(b: "BenchmarkMerge") -> dict[str, Any] | None:
    """The benchmark's `reasoning` object as scores.json writes it, or None (see the module)."""
    given = getattr(b, "reasoning", None)
    if given is not None:
        return given if isinstance(given, dict) else msgspec.to_builtins(given)
    cells = b.cells.reasoning
    if cells is None:
        return None
    status = b.cells.status
    n_answered = status.count(OK)
    thought = truncated_reasoning = truncated = usage = stream = 0
    tokens = []
    for s, f, t in zip(status, cells.flags, cells.tokens):
        if s != OK:
            continue
        thought += f & cells.THOUGHT != 0
        truncated_reasoning += f & cells.TRUNCATED_REASONING != 0
        truncated += f & cells.TRUNCATED != 0
        if t >= 0:
            tokens.append(t)
            usage += f & cells.FROM_USAGE != 0
            stream += f & cells.FROM_STREAM != 0
    if not (thought or truncated_reasoning or truncated or tokens):
        return None  # only error records had any: the standing records say nothing of thinking
    tokens.sort()
    summary = {"n": len(tokens), "mean": sum(tokens) / len(tokens), "p50": _percentile(tokens, 0.5), "p90": _percentile(tokens, 0.9),
               "max": tokens[-1], "from": {"usage": usage, "stream": stream}} if tokens else None
    return {"n_answered": n_answered, "truncated_reasoning": truncated_reasoning, "truncated": truncated, "with_reasoning": thought,
            "reasoning_tokens": summary}


def _percentile(values: list[int], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, as merge's timing percentiles)."""
    pos = (len(values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def rate(summary: dict[str, Any]) -> float | None:
    """The share of answered (problem, repeat) pairs cut off while thinking."""
    return summary["truncated_reasoning"] / summary["n_answered"] if summary.get("n_answered") else None


def token_bins(b: "BenchmarkMerge") -> list[dict[str, Any]]:
    """The histogram of reasoning tokens per answered reply: rows {lo, hi, outcome, n}, at most
    MAX_BINS bins of a round width from 0 to the largest count, stacked by outcome (a reply cut
    off while thinking piles up at its budget). Empty when no reply has a token count."""
    cells = b.cells.reasoning
    if cells is None:
        return []
    counted = [(t, f) for s, f, t in zip(b.cells.status, cells.flags, cells.tokens) if s == OK and t >= 0]
    if not counted:
        return []
    width = bin_width(max(t for t, _ in counted))
    bins: dict[tuple[int, str], int] = {}
    for t, f in counted:
        outcome = TRUNCATED_REASONING if f & cells.TRUNCATED_REASONING else TRUNCATED if f & cells.TRUNCATED else ANSWERED
        key = (t // width, outcome)
        bins[key] = bins.get(key, 0) + 1
    return [{"lo": i * width, "hi": (i + 1) * width, "outcome": outcome, "n": n} for (i, outcome), n in sorted(bins.items())]


def bin_width(largest: int) -> int:
    """The smallest round width (1, 2 or 5 times a power of ten) that covers 0..largest in at most
    MAX_BINS bins."""
    scale = 1
    while True:
        for step in (1, 2, 5):
            if (largest // (step * scale)) + 1 <= MAX_BINS:
                return step * scale
        scale *= 10


def sweep_reasoning(sweep: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """Each (model, benchmark) of a sweep that has thinking or cut-off replies: its `reasoning`
    object from sweep.json's cells when they carry one, else from the model's merge (`reasoning_of`)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for c in sweep.document["cells"]:
        if c.get("reasoning"):
            found.setdefault((c["service"], c["benchmark"]), c["reasoning"])
    for m in sweep.models:
        for b in m.result.benchmarks if m.result is not None else []:
            if (m.service, b.manifest.name) not in found and (summary := reasoning_of(b)) is not None:
                found[(m.service, b.manifest.name)] = summary
    return found
