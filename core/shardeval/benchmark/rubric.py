"""How a judge is asked and read: the default rubrics (MT-Bench's), the verdict parsers, a Rubric.

A benchmark with `judge: {service: NAME, mode: single|pairwise}` is scored by asking a second
service (the judge) about each answer (the judge step: shardeval.run.judging). Conventions (MT-Bench's):

- single: the judge rates the answer 1..10 and ends with `Rating: [[N]]`; `score` = N / 10 and
  `scores.rating` = N.
- pairwise: the judge compares the model's answer (assistant A) with the problem's reference
  (assistant B) and ends with `[[A]]` (the model's is better), `[[B]]` (the reference is better)
  or `[[C]]` (a tie); `score` = 1, 0 or 0.5, `scores.preference` the same.

The default parsers read a reply as FastChat's MT-Bench judge does (fastchat/llm_judge/common.py),
so a rating means what it means in published MT-Bench numbers: the FIRST `[[N]]` anywhere (no
`Rating:` needed), else the first `[N]`; pairwise `[[A]]` if present, else `[[B]]`, else `[[C]]`.
One difference, on purpose: a rating outside 1..10 is no verdict (FastChat keeps 0 or 11 as a
score), since the rubric asks for 1..10 and a grade outside it is a judge's mistake, not a grade.

Rubric templates are `str.format` templates over {question}, {answer} and {reference}; a
benchmark may bring its own (`Benchmark.judge_rubric`, e.g. a BYO YAML benchmark) and the
config's `judge.rubric` wins over both. A custom verdict pattern is a regex whose group 1 (or
whole match) is the verdict: a number 1..10 (single) or A/B/C (pairwise); its last match counts.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from shardeval.errors import UsageError

SINGLE = (
    "Please act as an impartial judge and evaluate the quality of the response provided by an AI assistant to the "
    "user question displayed below. Consider its correctness, helpfulness, relevance, depth and level of detail. "
    "Begin your evaluation with a short explanation. Be as objective as possible. After your explanation, you must "
    'rate the response on a scale of 1 to 10 by strictly following this format: "Rating: [[5]]".\n\n'
    "[Question]\n{question}\n\n[The Start of Assistant's Answer]\n{answer}\n[The End of Assistant's Answer]"
)
SINGLE_REF = (
    "Please act as an impartial judge and evaluate the quality of the response provided by an AI assistant to the "
    "user question displayed below. Your evaluation should consider correctness above all: compare the assistant's "
    "answer with the reference answer and identify any mistakes. Begin your evaluation with a short explanation. "
    "Be as objective as possible. After your explanation, you must rate the response on a scale of 1 to 10 by "
    'strictly following this format: "Rating: [[5]]".\n\n'
    "[Question]\n{question}\n\n[The Start of Reference Answer]\n{reference}\n[The End of Reference Answer]\n\n"
    "[The Start of Assistant's Answer]\n{answer}\n[The End of Assistant's Answer]"
)
PAIRWISE = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants to "
    "the user question displayed below. Choose the assistant that follows the user's instructions and answers the "
    "question better. Do not let the order or the length of the responses influence you. Begin with a short "
    'explanation, then output your final verdict by strictly following this format: "[[A]]" if assistant A is '
    'better, "[[B]]" if assistant B is better, and "[[C]]" for a tie.\n\n'
    "[User Question]\n{question}\n\n[The Start of Assistant A's Answer]\n{answer}\n[The End of Assistant A's Answer]\n\n"
    "[The Start of Assistant B's Answer]\n{reference}\n[The End of Assistant B's Answer]"
)
# MT-Bench's rating forms, tried in this order, first match of the first form that matches:
# `[[N]]`, then `[N]`; N is digits with at most one dot (`7`, `7.5`, `7.`). ASCII digits only.
RATINGS = (re.compile(r"\[\[([0-9]+\.?[0-9]*)\]\]"), re.compile(r"\[([0-9]+\.?[0-9]*)\]"))
# MT-Bench's pairwise forms, in order of precedence: the first one the reply holds is the verdict.
PREFERENCES = ("A", "B", "C")
# What a rubric must ask the judge to write for the mode's default parser to find a verdict: a
# single rubric some `[[N]]` (not a pairwise `[[A]]`), a pairwise one `[[A]]`/`[[B]]`/`[[C]]`.
ASKS = {"single": re.compile(r"\[\[(?![ABC]\]\])"), "pairwise": re.compile(r"\[\[[ABC]\]\]")}
ASKED = {"single": "`[[N]]` (as in `Rating: [[5]]`)", "pairwise": "`[[A]]`/`[[B]]`/`[[C]]`"}
PAIRWISE_SCORE = {"A": 1.0, "B": 0.0, "C": 0.5}
FIELDS = {"question", "answer", "reference"}
# Bump when a default rubric or parser changes: it joins the scorer fingerprint of judged benchmarks
# (shardeval.identity.rubric_identity).
JUDGING_VERSION = "2"  # 2: the default parsers read replies as FastChat does


@dataclass(frozen=True)
class Rubric:
    """How one benchmark is judged: its mode, template (None: the default for the mode) and pattern."""

    mode: str = "single"
    template: str | None = None
    pattern: str | None = None

    def __post_init__(self) -> None:
        if self.template is not None:
            check_template(self.template, "judge rubric")
        if self.pattern is not None:
            compile_pattern(self.pattern, "judge verdict pattern")
        elif self.template is not None and self.mode in ASKS and not ASKS[self.mode].search(self.template):
            # read with the mode's own parser: a rubric that never asks for that verdict gets none
            raise UsageError(
                f"judge rubric never asks for {ASKED[self.mode]}, the verdict {self.mode} judging reads; "
                f"ask for it in the rubric, or give a `verdict` pattern for what the rubric asks"
            )

    def prompt(self, question: str, answer: str, reference: str | None) -> str:
        """The judge's prompt. Pairwise needs a reference (the other answer); single uses the
        reference-guided rubric when the problem has one."""
        if self.mode == "pairwise" and reference is None:
            raise ValueError("pairwise judging needs the problem's reference answer, and this problem has none")
        template = self.template or (PAIRWISE if self.mode == "pairwise" else SINGLE if reference is None else SINGLE_REF)
        return template.format(question=question, answer=answer, reference=reference if reference is not None else "")

    def verdict(self, reply: str) -> tuple[str, float, dict[str, float]]:
        """(verdict, score, scores) parsed from the judge's reply; ValueError saying why not."""
        if self.mode == "single":
            found = _last(compile_pattern(self.pattern, ""), reply) if self.pattern else first_rating(reply)
            try:
                rating = float(found) if found is not None else None
            except ValueError:
                rating = None
            if rating is not None and not 1 <= rating <= 10:  # MT-Bench would keep it; the rubric asks for 1..10
                raise ValueError(f"the judge's rating {found} is outside 1..10, no verdict: {_tail(reply)}")
            if rating is None:
                expected = f"matching {self.pattern!r}" if self.pattern else "`Rating: [[N]]`"
                raise ValueError(f"no rating 1..10 in the judge's reply (expected {expected}): {_tail(reply)}")
            verdict = f"{rating:g}"
            return verdict, rating / 10, {"rating": rating}
        if self.pattern:
            found = _last(compile_pattern(self.pattern, ""), reply)
            choice = found.strip().strip("[]").upper() if found is not None else None
        else:
            choice = first_preference(reply)
        if choice not in PAIRWISE_SCORE:
            raise ValueError(f"no verdict [[A]], [[B]] or [[C]] in the judge's reply: {_tail(reply)}")
        return choice, PAIRWISE_SCORE[choice], {"preference": PAIRWISE_SCORE[choice]}


def first_rating(reply: str) -> str | None:
    """The rating MT-Bench reads: the first `[[N]]`, else the first `[N]`; None: neither."""
    for form in RATINGS:
        if (found := form.search(reply)) is not None:
            return found.group(1)
    return None


def first_preference(reply: str) -> str | None:
    """The pairwise verdict MT-Bench reads: `[[A]]` if the reply holds it, else `[[B]]`, else `[[C]]`."""
    return next((choice for choice in PREFERENCES if f"[[{choice}]]" in reply), None)


def _last(pattern: re.Pattern[str], text: str) -> str | None:
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    return matches[-1].group(1 if pattern.groups else 0)


def _tail(reply: str) -> str:
    text = " ".join(reply.split())
    return repr(text if len(text) <= 80 else "…" + text[-79:])


def check_template(template: str, where: str) -> None:
    """A rubric may use only {question}, {answer} and {reference}: one line naming the culprit."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise UsageError(f"{where} is not a valid template ({exc}); write {{{{ and }}}} for literal braces") from None
    unknown = sorted(names - FIELDS)
    if unknown:
        raise UsageError(f"{where} uses {{{unknown[0]}}}; a rubric may use {{question}}, {{answer}} and {{reference}}")
    try:  # a conversion or format spec ({answer!x}, {answer:d}) fails only when filled: fill it now, with text
        template.format(**{name: "text" for name in FIELDS})
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise UsageError(
            f"{where} cannot be filled with text ({type(exc).__name__}: {exc}); "
            "write the fields plainly, e.g. {answer}, and {{ }} for literal braces"
        ) from None


def compile_pattern(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise UsageError(f"{where} {pattern!r} is not a valid regular expression: {exc}") from None
