"""What a benchmark may give the simulator so it answers that benchmark's problems well.

Core's `Benchmark` declares only what a run reads. These two hooks are the simulator's own, so
they live here: a benchmark defines them as plain methods when the defaults do not fit (a
benchmark plugin need not import this one: plugins are independent of each other), and the
simulator reads them through the functions below, which supply the defaults.
"""

from __future__ import annotations

from typing import Any, Protocol

from shardeval_sim.answers import AnswerKey, Render, image_key


class SimulatedBenchmark(Protocol):
    """The optional hooks, with the signatures the simulator calls (every one may be left out)."""

    def answer_key(self) -> AnswerKey:
        """Map a prompt text to its reference answer, for the simulator's `--accuracy`. Without
        it the simulator indexes every problem's text; a benchmark that can solve its own prompts
        (like `arith`) defines it to use no memory."""
        ...

    def simulated_reply(self, reference: str, correct: bool) -> str | None:
        """The whole reply, right or wrong, for a problem with this reference. Without it (or
        when it returns None) the simulator's generic reply: filler words, then `#### <answer>`
        with a wrong answer derived from the reference. Code and multiple-choice benchmarks
        define it so simulated answers go through their real extraction and scoring."""
        ...

    def simulated_reference(self, problem: Any) -> str:
        """What the default answer key hands `simulated_reply` for `problem` (default: its
        reference), for a reply that needs more than the reference, such as a multiple-choice
        item's option texts. Only the simulator sees it; scoring uses the problem's reference."""
        ...


def answer_key(benchmark: Any) -> AnswerKey:
    """The benchmark's own `answer_key()`, else an index of every problem: by its text, and for a
    problem with images by its text without `<image>` markers plus the images' digests (`image_key`,
    which the server builds alike from a request), so image benchmarks, built-in or brought as
    rows, are answered at the configured accuracy too. Building it draws or reads every image once."""
    own = getattr(benchmark, "answer_key", None)
    if own is not None:
        return own()
    from shardeval.api.benchmark import IMAGE_MARKER

    reference = getattr(benchmark, "simulated_reference", None) or (lambda p: p.reference)
    key: dict[str, str] = {}
    for p in benchmark.problems(range(benchmark.size())):
        if p.reference is None:
            continue
        if p.images:
            key[image_key(p.user_text().replace(IMAGE_MARKER, ""), [ref.sha256 for ref in p.images])] = reference(p)
        else:
            key[p.user_text().strip()] = reference(p)
    return lambda text: key.get(text.strip())


def reply_renderer(benchmark: Any) -> Render | None:
    """The benchmark's own `simulated_reply`, else None (the simulator's generic reply)."""
    return getattr(benchmark, "simulated_reply", None)
