"""What the pages show of a reasoning model's replies (docs/reasoning.md): per benchmark, how many
answers were cut off while thinking and how many tokens a reply thought.

Every page reads a benchmark's numbers through one function, `reasoning_of`: the `reasoning`
object of scores.json (`{n_answered, truncated_reasoning, truncated, with_reasoning,
reasoning_tokens: {n, mean, p50, p90, max, from: {usage, stream}} | null}`), made by the core's
`reasoning_counts` from the merge's tally, so a page and scores.json cannot disagree. None: the
benchmark has neither thinking nor a cut-off reply, and the pages show nothing of it. The
histogram of tokens per reply comes from the same tally (each counted reply's tokens and outcome;
scores.json holds no per-record numbers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from shardeval.api.pages import BenchmarkView

if TYPE_CHECKING:
    from shardeval.api.pages import BenchmarkMerge

TRUNCATED_REASONING = "truncated while thinking"
TRUNCATED = "cut off after answering"
ANSWERED = "answered"
OUTCOMES = [ANSWERED, TRUNCATED, TRUNCATED_REASONING]  # the histogram's stacking, bottom up
MAX_BINS = 30  # a histogram's bars at most, whatever the run's size


def reasoning_of(b: BenchmarkMerge) -> dict[str, Any] | None:
    """The benchmark's `reasoning` object as scores.json writes it, or None (see the module)."""
    counts = BenchmarkView(b).reasoning()
    return None if counts is None else msgspec.to_builtins(counts)


def rate(summary: dict[str, Any]) -> float | None:
    """The share of answered (problem, repeat) pairs cut off while thinking."""
    return summary["truncated_reasoning"] / summary["n_answered"] if summary.get("n_answered") else None


def token_bins(b: BenchmarkMerge) -> list[dict[str, Any]]:
    """The histogram of reasoning tokens per answered reply: rows {lo, hi, outcome, n}, at most
    MAX_BINS bins of a round width from 0 to the largest count, stacked by outcome (a reply cut
    off while thinking piles up at its budget). Empty when no reply has a token count."""
    tally = b.cells.reasoning
    if not tally.tokens:
        return []
    names = {tally.ANSWERED: ANSWERED, tally.TRUNCATED: TRUNCATED, tally.TRUNCATED_REASONING: TRUNCATED_REASONING}
    width = bin_width(max(tally.tokens))
    bins: dict[tuple[int, str], int] = {}
    for t, kind in zip(tally.tokens, tally.outcomes):
        key = (t // width, names[kind])
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
    celled: set[tuple[str, str]] = set()  # a cell without `reasoning` says its merge found none
    for c in sweep.document["cells"]:
        key = (c["service"], c["benchmark"])
        celled.add(key)
        if c.get("reasoning"):  # a ReasoningCounts in the document the merge made, a dict in one read back
            found.setdefault(key, msgspec.to_builtins(c["reasoning"]))
    # Only a benchmark without a cell is counted from its merge: counting all of them again made a
    # watched sweep's page cost grow with every checkpoint before it.
    for m in sweep.models:
        for b in m.result.benchmarks if m.result is not None else []:
            key = (m.service, b.manifest.name)
            if key not in celled and (summary := reasoning_of(b)) is not None:  # `found` holds cells' keys only
                found[key] = summary
    return found
