r"""What the simulator says: a deterministic reply per (prompt, seed), right with a chosen probability.

Everything is derived from one hash of (server seed, request seed, prompt text), so the same
request always gets the same words, and whether an answer is right is a coin with bias
`accuracy` that a test can check against the known truth. Tokens are words (a fake tokenizer).

Log-probabilities (for `echo` + `logprobs` on /v1/completions) are a pure function of a token's
text, never of the seed or the prompt around it, so a test can compute a perplexity exactly, with
one exception: a prompt that is a known question's context followed by a continuation (lm-eval's
multiple-choice requests) gets CHOSEN_LOGPROB or SHUNNED_LOGPROB on the continuation's tokens when
that continuation is the question's reference, so the model picks the right option with
probability `accuracy` (one coin per question and request seed, `Answerer.chooses_right`):

    tokenize(text)      = re.findall(r"\s*\S+|\s+", text): each word with the whitespace before
                          it ("a b\n" -> ["a", " b", "\n"]); the pieces concatenate to the text
    token_logprob(tok)  = -(1 + (h % 1000) / 250), h = int.from_bytes(blake2b(tok UTF-8,
                          digest_size=8).digest(), "big"); so every logprob is in [-4.996, -1]

Reply lengths are `output_tokens` words, or with a tail (`--output-tokens-tail ALPHA`) heavy-tailed
per prompt, as real models write far more on some problems than on others. The length is a pure
function of the prompt text (never of the seed or the server), so every simulated model writes
the same length on the same problem and a test can compute it:

    output_length(text) = min(TAIL_CAP * output_tokens, floor(output_tokens * v ** (-1 / ALPHA))),
                          v = (h + 1) / 2**64, h = int.from_bytes(blake2b(text UTF-8, digest_size=8,
                          person=b"sim-length").digest(), "big")

that is output_tokens × Pareto(ALPHA) (minimum 1, median 2 ** (1 / ALPHA)), capped at TAIL_CAP times.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import re
from dataclasses import dataclass
from collections.abc import Callable

AnswerKey = Callable[[str], "str | None"]
Render = Callable[[str, bool], "str | None"]  # (reference, correct) -> the whole reply, or None
Grade = Callable[[str, str, str], bool]  # (question, reference, answer) -> is the answer right


@dataclass(frozen=True)
class Known:
    """What the simulator knows of one benchmark: its answer key, how it shapes a whole reply (None:
    the generic reply), how it grades an answer (judge mode). A simulator may know several; a
    prompt is answered by the first whose key knows it, in the order given."""

    key: AnswerKey
    render: Render | None = None
    grade: Grade | None = None


def look_up(known: tuple[Known, ...], text: str) -> tuple[str, Known] | None:
    """(reference, the benchmark that knows it) for `text`, or None."""
    for bench in known:
        if (ref := bench.key(text)) is not None:
            return ref, bench
    return None


_TOKEN = re.compile(r"\s*\S+")
_ECHO_TOKEN = re.compile(r"\s*\S+|\s+")

# 64 words (a power of two, so an odd stride visits them all); no digits, so a scorer that takes
# the last number in the text still finds the final answer.
VOCAB: tuple[str, ...] = tuple(
    """
    let us work through this problem step by step and check each part carefully first we
    read the question then note what is given what is asked and how the pieces fit together so
    that every quantity is used once adding or taking away where needed until only the final
    value remains which we report below as the result of our reasoning with care
    """.split()
)
assert len(VOCAB) == 64, len(VOCAB)
TAIL_CAP = 100  # a heavy-tailed reply is at most this many times output_tokens
CONTINUATION_TOKENS = 64  # the longest multiple-choice option (in tokens) the simulator recognises
# The right option's tokens of a known multiple-choice question: CHOSEN when the coin says the
# model is right (every other option keeps token_logprob, so the right one wins), SHUNNED when it
# says wrong (so another option wins). Far enough outside token_logprob's [-4.996, -1] that the
# choice holds under lm-eval's length normalisations too (acc_norm: per character).
CHOSEN_LOGPROB, SHUNNED_LOGPROB = -0.01, -100.0


@dataclass(frozen=True)
class Reply:
    """One completion: `tokens` as streamed (a leading space on all but the first)."""

    tokens: list[str]
    finish_reason: str  # "stop" | "length"
    # Reasoning mode (shardeval_sim.reasoning): the first `thinking` tokens are thinking, the rest
    # the answer; `thought`: the reply had a thinking phase (it may have been cut to nothing).
    thinking: int = 0
    thought: bool = False

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def image_key(text: str, digests: list[str]) -> str:
    """What the answer key is asked for a prompt: its text (stripped), and for a prompt with images
    the sha256 of each image's bytes, in order, after a blank line: `text\n\n[images sha256:… sha256:…]`.
    The request side (the server, from the decoded image parts) and the index side (a benchmark's
    Problem.images) build it alike, so an image benchmark is known by its pictures, not only its words."""
    text = text.strip()
    return text if not digests else f"{text}\n\n[images {' '.join('sha256:' + d for d in digests)}]"


def count_tokens(text: str) -> int:
    """The fake tokenizer's count: whitespace-separated words."""
    return len(text.split())


def split_words(text: str) -> list[str]:
    """Generated text as the simulator streams it: each word with the whitespace before it."""
    return _TOKEN.findall(text) or [text]


def tokenize(text: str) -> list[str]:
    """The fake tokenizer's tokens of a prompt: words with their leading whitespace, plus any
    trailing whitespace as a token of its own, so that they concatenate to `text` exactly."""
    return _ECHO_TOKEN.findall(text)


def token_logprob(token: str) -> float:
    """The simulated model's log-probability of `token`: -(1 + (blake2b-64(token) mod 1000) / 250)."""
    h = int.from_bytes(hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
    return -(1.0 + (h % 1000) / 250.0)


def output_length(text: str, output_tokens: int, tail: float | None, person: bytes = b"sim-length") -> int:
    """Words in the reply to `text`: `output_tokens`, or with a tail alpha output_tokens × Pareto(alpha),
    capped at TAIL_CAP × output_tokens (see the module doc). `person` keys the hash, so the thinking's
    length (shardeval_sim.reasoning) is drawn apart from the answer's."""
    if tail is None:
        return output_tokens
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8, person=person).digest(), "big")
    scale = ((h + 1) / 2.0**64) ** (-1.0 / tail)
    return int(min(TAIL_CAP * output_tokens, output_tokens * scale))


def cut(tokens: list[str], max_tokens: int | None) -> Reply:
    """A reply of `tokens`, cut at `max_tokens` with finish_reason `length` as vLLM cuts one."""
    if max_tokens is not None and max_tokens < len(tokens):
        return Reply(tokens=tokens[:max_tokens], finish_reason="length")
    return Reply(tokens=tokens, finish_reason="stop")


def wrong_answer(reference: str) -> str:
    """A plausible wrong answer: the number plus one, else the text with an `x` appended."""
    plain = reference.strip().replace(",", "")
    with contextlib.suppress(ValueError):
        return str(int(plain) + 1)
    with contextlib.suppress(ValueError):
        if math.isfinite(value := float(plain)):
            return repr(value + 1)
    return reference.strip() + "x"


@dataclass(frozen=True)
class Answerer:
    """Turns prompt text into a Reply; `known` maps a prompt to its reference (see `look_up`)."""

    known: tuple[Known, ...]
    accuracy: float
    output_tokens: int
    seed: int
    tail: float | None = None  # Pareto shape of the reply lengths (None: always output_tokens)

    def reference(self, text: str) -> tuple[str, Known] | None:
        """(the gold answer for `text`, the benchmark that knows it); for a completions prompt that
        starts with a system prompt or few-shot turns, also try what follows each blank line."""
        if not self.known:
            return None
        parts = text.split("\n\n", 8)
        tails = ("\n\n".join(parts[k:]) for k in range(len(parts)))  # the whole text, then up to 8 tails
        return next((found for tail in tails if (found := look_up(self.known, tail)) is not None), None)

    def continuation(self, text: str) -> tuple[int, bool] | None:
        """For a log-likelihood request (a prompt that is a known question's context followed by a
        continuation, as lm-eval scores a multiple-choice option): (where the continuation starts,
        whether it is the question's reference), or None when no context of `text` is known. The
        split is tried from the last token back, over the last CONTINUATION_TOKENS tokens."""
        if not self.known:
            return None
        starts = [m.start() for m in _ECHO_TOKEN.finditer(text)][1:]  # a continuation follows some context
        for start in reversed(starts[-CONTINUATION_TOKENS:]):
            found = self.reference(text[:start])
            if found is not None:
                return start, text[start:].strip() == found[0].strip()
        return None

    def chooses_right(self, context: str, request_seed: int | None) -> bool:
        """The coin (bias `accuracy`) of a multiple-choice question as its context is asked: the same
        coin for every option of the question, so exactly one option wins."""
        digest = hashlib.blake2b(
            f"{self.seed}\x1f{request_seed}\x1fchoice\x1f{context}".encode("utf-8", "surrogatepass"), digest_size=8
        ).digest()
        return int.from_bytes(digest, "big") / 2.0**64 < self.accuracy

    def reply(self, text: str, request_seed: int | None, max_tokens: int | None) -> Reply:
        return cut(self.compose(text, request_seed)[0], max_tokens)

    def compose(self, text: str, request_seed: int | None) -> tuple[list[str], Callable[[], str]]:
        """(the whole reply's tokens, a function giving the right answer as the benchmark's scorer
        reads it): the second is what a reasoning reply's thinking works out
        (shardeval_sim.reasoning), so a scorer that wrongly reads the thinking scores a cut-off or
        wrong reply right. A function, so a reply without thinking costs nothing more."""
        digest = hashlib.blake2b(f"{self.seed}\x1f{request_seed}\x1f{text}".encode("utf-8", "surrogatepass"), digest_size=32).digest()
        coin = int.from_bytes(digest[:8], "big") / 2.0**64
        found = self.reference(text)
        ref, render = (found[0], found[1].render) if found is not None else (None, None)
        if ref is None:
            answer, correct = str(int.from_bytes(digest[8:12], "big") % 1000), None
        elif coin < self.accuracy:
            answer, correct = ref.strip(), True
        else:
            answer, correct = wrong_answer(ref), False
        rendered = render(ref, correct) if render is not None and ref is not None and correct is not None else None

        def planted() -> str:
            right = render(ref, True) if rendered is not None and render is not None and ref is not None else None
            return right if right is not None else f"so the answer is #### {ref.strip() if ref is not None else answer}"

        if rendered is not None:  # the benchmark shapes the whole reply (code, a letter, ...)
            return _TOKEN.findall(rendered) or [rendered], planted
        tail = ["####", *(answer.split() or ["0"])]
        start, stride = digest[12], digest[13] | 1
        words = [
            VOCAB[(start + i * stride) & 63] for i in range(max(0, output_length(text, self.output_tokens, self.tail) - len(tail)))
        ] + tail
        return [words[0]] + [" " + w for w in words[1:]], planted


# Judge mode: a prompt that asks for the MT-Bench verdict forms is answered as a judge would.
_SINGLE_ASK = "Rating: [["
_PAIRWISE_ASK = "[[A]]"
_SECTIONS = (("[Question]\n", "[User Question]\n"), ("[The Start of Assistant's Answer]\n", "[The Start of Assistant A's Answer]\n"))


def _between(text: str, starts: tuple[str, ...], end: str = "\n[") -> str | None:
    for start in starts:
        i = text.find(start)
        if i >= 0:
            j = text.find(end, i + len(start))
            return text[i + len(start) : j if j >= 0 else len(text)].strip()
    return None


@dataclass(frozen=True)
class Judger:
    """Answers judge prompts (shardeval.run.judging's default rubrics, or any prompt asking for
    `Rating: [[N]]` or `[[A]]`/`[[B]]`/`[[C]]`) with a verdict drawn from the prompt and seed.

    With probability `quality` the verdict is the right one, when the judger can tell: the question
    is one of a known benchmark's and its `grade` says whether the answer is right; then a
    right answer gets a rating of 8..10 (pairwise against the reference: [[C]], a tie) and a
    wrong one 1..3 ([[B]], the reference is better). Otherwise the verdict is uniform over 1..10
    (or A, B, C). Unparseable replies (`garbage`) are the server's per-attempt draw, not this."""

    known: tuple[Known, ...]
    quality: float
    seed: int

    @staticmethod
    def mode(text: str) -> str | None:
        """single / pairwise when `text` is a judge prompt, else None."""
        if _SINGLE_ASK in text:
            return "single"
        return "pairwise" if _PAIRWISE_ASK in text and "[[B]]" in text else None

    def correct(self, text: str) -> bool | None:
        question, answer = _between(text, _SECTIONS[0], "\n\n["), _between(text, _SECTIONS[1])
        if question is None or answer is None:
            return None
        found = look_up(self.known, question)
        if found is None or found[1].grade is None:
            return None
        return found[1].grade(question, found[0], answer)

    def verdict(self, text: str, request_seed: int | None) -> str:
        mode = self.mode(text)
        digest = hashlib.blake2b(
            f"judge\x1f{self.seed}\x1f{request_seed}\x1f{text}".encode("utf-8", "surrogatepass"), digest_size=16
        ).digest()
        coin, draw = int.from_bytes(digest[:8], "big") / 2.0**64, int.from_bytes(digest[8:], "big")
        right = self.correct(text) if coin < self.quality else None
        if mode == "pairwise":
            choice = "ABC"[draw % 3] if right is None else ("C" if right else "B")
            return f"Comparing both answers with the question, my verdict is [[{choice}]]"
        rating = 1 + draw % 10 if right is None else (8 + draw % 3 if right else 1 + draw % 3)
        return f"The answer was checked against the question step by step.\n\nRating: [[{rating}]]"

    def reply(self, text: str, request_seed: int | None, max_tokens: int | None, garbage: bool) -> Reply:
        return cut(self.compose(text, request_seed, garbage)[0], max_tokens)

    def compose(self, text: str, request_seed: int | None, garbage: bool) -> tuple[list[str], Callable[[], str]]:
        """(the reply's tokens, a function giving its verdict): a reasoning judge's thinking reaches
        the verdict even when the reply then gives none (garbage), so a parser reading the
        thinking is caught."""
        verdict = functools.partial(self.verdict, text, request_seed)
        said = "I cannot judge this answer without more context." if garbage else verdict()
        return _TOKEN.findall(said), verdict
