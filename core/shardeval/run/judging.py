"""LLM-as-judge: the default rubrics, the verdict parsers, and the judge step of a shard.

A benchmark with `judge: {service: NAME, mode: single|pairwise}` is scored by asking a second
service (the judge) about each answer. Conventions (MT-Bench's):

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

A judge that cannot be asked (a transport error after its retries) or whose reply holds no
verdict makes the record an error of kind `judge` (never a score); the record keeps the model's
answer, and a rerun asks the judge again for it, not the model (docs/judges.md).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardeval.errors import UsageError

if TYPE_CHECKING:
    from shardeval.benchmark import Benchmark

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
    "explanation, then output your final verdict by strictly following this format: \"[[A]]\" if assistant A is "
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
# Bump when a default rubric or parser changes: it joins the scorer fingerprint of judged benchmarks.
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
            raise UsageError(f"judge rubric never asks for {ASKED[self.mode]}, the verdict {self.mode} judging reads; "
                             f"ask for it in the rubric, or give a `verdict` pattern for what the rubric asks")

    def identity(self) -> dict[str, Any]:
        """What changes verdicts: it joins the benchmark's scorer fingerprint."""
        return {"judging": JUDGING_VERSION, "mode": self.mode, "template": self.template, "pattern": self.pattern}

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


def metrics_when_judged(benchmark: Benchmark) -> tuple[str, ...]:
    """A judged benchmark's metrics when the config names none: its own when it says how it is
    judged (a `judge_rubric`), else `mean` (a judge's graded scores are not right/wrong)."""
    return tuple(benchmark.metrics) if benchmark.judge_rubric is not None else ("mean",)


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
        raise UsageError(f"{where} cannot be filled with text ({type(exc).__name__}: {exc}); "
                         "write the fields plainly, e.g. {answer}, and {{ }} for literal braces") from None


def compile_pattern(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise UsageError(f"{where} {pattern!r} is not a valid regular expression: {exc}") from None


def rubric_for(config: Any, benchmark: Benchmark) -> Rubric:
    """The rubric of a judged benchmark: the config's `judge` keys win over the benchmark's own
    (`judge_rubric`: a Rubric a BYO benchmark declares), which win over the defaults."""
    own: Rubric | None = benchmark.judge_rubric
    where = "the benchmark's judge section"
    mode = config.mode or (own.mode if own else "single")
    template = config.rubric if config.rubric is not None else (own.template if own else None)
    pattern = config.verdict if config.verdict is not None else (own.pattern if own else None)
    if own is not None and mode != own.mode:
        inherited = (("rubric", config.rubric, own.template), ("verdict pattern", config.verdict, own.pattern))
        kept = [what for what, mine, theirs in inherited if mine is None and theirs is not None]
        if kept:  # written for the other mode: every verdict would be a judge error
            raise UsageError(
                f"{where}: {mode} judging with the benchmark's own {' and '.join(kept)}, written for {own.mode} judging, "
                f"would make every verdict a judge error; judge it {own.mode}, or give a {mode} "
                f"{' and '.join(kept)} (judge.{'rubric' if 'rubric' in kept else 'verdict'})"
            )
    try:
        return Rubric(mode=mode, template=template, pattern=pattern)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class Verdict:
    """The judge step's outcome for one answer: the record's `judge` and either a score or why not."""

    record: Any  # shardeval.store.records.JudgeRecord
    score: float | None = None
    scores: dict[str, float] | None = None
    error: str | None = None  # set: the record is an error of kind `judge`


def apply_verdict(record: Any, verdict: Verdict, extra: dict[str, float] | None = None) -> None:
    """Make `record` (a ResultRecord whose answer the judge saw) what the verdict says: scored by
    it, or an error of kind `judge` that keeps the answer. The one rule of a run and a rescore."""
    record.judge = verdict.record
    if verdict.error is not None:  # never a score: a rerun asks the judge again, not the model
        record.status, record.error_kind, record.error = "error", "judge", verdict.error
        record.score, record.extracted, record.scores = None, None, {}
        return
    record.status, record.error_kind, record.error = "ok", None, None
    record.score, record.extracted, record.scores = verdict.score, verdict.record.verdict, {**(verdict.scores or {}), **(extra or {})}


@dataclass(frozen=True)
class Judge:
    """A benchmark's judge as a shard uses it: its service (its own client and window) and rubric."""

    service: str
    rubric: Rubric
    handle: Any  # shardeval.run.solver.ServiceHandle: the judge's endpoint, client and slots
    params: dict[str, Any]  # generation parameters of the judge's requests

    async def grade(self, problem: Any, answer: str, seed: int) -> Verdict:
        """Ask the judge about `answer`; a transport error or a reply with no verdict is an error."""
        from shardeval.store.records import JudgeRecord

        endpoint = self.handle.endpoint
        served = getattr(self.handle.served, "model", None) or endpoint.model
        record = JudgeRecord(service=self.service, model=served, mode=self.rubric.mode)
        try:
            prompt = self.rubric.prompt(problem.user_text(), answer, problem.reference)
        except (ValueError, KeyError, IndexError) as exc:
            return Verdict(record, error=f"cannot write the judge's prompt: {exc}")
        turns = ({"messages": [{"role": "user", "content": prompt}]} if endpoint.protocol == "chat_completions"
                 else {"prompt": prompt})
        body = {"model": endpoint.model, **turns, "seed": seed, "temperature": 0.0, **self.params}
        c = await self.handle.client.request(body, self.handle.slots, cache_if=self._parses)
        record.reply, record.attempts, record.latency_s, record.cached = c.text, c.attempts, c.latency_s, c.cached
        record.prompt_tokens, record.completion_tokens = c.prompt_tokens, c.completion_tokens
        if c.status != "ok":
            record.error_kind = c.error_kind
            return Verdict(record, error=f"judge {self.service!r} could not be asked: {c.error_kind}: {c.error}")
        try:
            record.verdict, score, scores = self.rubric.verdict(c.text)
        except ValueError as exc:
            return Verdict(record, error=f"judge {self.service!r}: {exc}")
        return Verdict(record, score=score, scores=scores)

    def _parses(self, c: Any) -> bool:
        try:
            self.rubric.verdict(c.text)
        except ValueError:
            return False
        return True


class JudgeServices:
    """The judge services one `shardeval rescore` asks, each started (or reached) once for all the
    shards and benchmarks it judges: a managed vLLM judge loads its model once, not once per
    benchmark of every shard. They live on one event loop, which `run` enters for each judged
    benchmark; leaving the `with` stops them. A shard run starts its judges as any service."""

    def __init__(self) -> None:
        self._loop: Any = None
        self._stack: Any = None
        self._endpoints: dict[tuple[str, bytes], Any] = {}  # (name, its config) -> Endpoint
        self._served: dict[tuple[str, bytes], Any] = {}  # what the endpoint said it serves
        self._clients: dict[tuple[str, bytes, int], Any] = {}  # one per window size asked for

    def __enter__(self) -> "JudgeServices":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is None:
            return
        try:
            self._loop.run_until_complete(self._close())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
        finally:
            self._loop.close()
            self._loop = None

    async def _close(self) -> None:
        """Cancel what an interrupted benchmark left pending (as asyncio.run does), then stop the judges."""
        import asyncio

        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await self._stack.aclose()

    def run(self, coro: Any) -> Any:
        """Run `coro` to its end on the judges' loop."""
        import asyncio
        from contextlib import AsyncExitStack

        if self._loop is None:
            self._loop, self._stack = asyncio.new_event_loop(), AsyncExitStack()
        return self._loop.run_until_complete(coro)

    async def judge(self, name: str, config: Any, rubric: Rubric, params: dict[str, Any], max_concurrent: int, ctx: Any) -> Judge:
        """A judge for one benchmark: its own rubric and window of `max_concurrent` requests, on the
        service `name` as `config` declares it, started with `ctx` (where its log goes) the first time."""
        import msgspec

        from shardeval import plugins
        from shardeval.run.adaptive import make_slots
        from shardeval.run.client import Client
        from shardeval.run.provenance import read_served
        from shardeval.run.solver import ServiceHandle

        key = (name, msgspec.json.encode(config))
        if key not in self._endpoints:
            factory = plugins.registry().get("services", config.type, f"services.{name}.type").factory
            self._endpoints[key] = await self._stack.enter_async_context(factory(name, config, ctx))
        endpoint = self._endpoints[key]
        if (client := self._clients.get((*key, max_concurrent))) is None:
            client = self._clients[(*key, max_concurrent)] = await self._stack.enter_async_context(Client(endpoint, config, max_concurrent))
        if key not in self._served:
            self._served[key] = await read_served(client, endpoint.base_url, endpoint.model, name)
        served = self._served[key]
        return Judge(name, rubric, ServiceHandle(endpoint, client, make_slots(max_concurrent, config.adaptive), served), params)
