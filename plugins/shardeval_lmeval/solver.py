"""The `lm_eval` solver: sends a document's planned lm-eval request bodies through shardeval's
client (retries, adaptive concurrency, the response cache, errors kept apart) and reads each
answer as lm-eval reads it. Never streamed, as lm-eval's API models never stream.

A document's requests go out together; each Instance is sent `repeats` times (lm-eval clones it).
Any failed request makes the document an error record (its kind kept): a partial answer is
never scored. The record's response is lm-eval's answers as JSON (shardeval_lmeval.benchmark).

A reasoning model's reply is split here, per generated answer, so lm-eval's filters and
process_results (and the saved answers lm-eval's own files are made from) see only the answer:

- with `think_end_token` (lm-eval's option; local-chat-completions only), by lm-eval's own rule,
  its parse_generations built with that token: the content after the last token, its leading
  whitespace stripped; a reply without the token is all answer, as lm-eval scores it;
- without it, by shardeval's rule (shardeval.benchmark.reasoning, the service's reasoning_tags).

Either way a server's reasoning field is the thinking and the content the answer, as lm-eval (which
reads only the content) has it. The thinking goes to the record's `reasoning` (the completion's
reasoning field, so the core keeps it and never splits the answers' JSON again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import msgspec

from shardeval.api.benchmark import DEFAULT_TAGS, Problem, split_reply
from shardeval.api.plugin import UsageError
from shardeval.api.solver import Attempt, check_logprobs, combine_completions, Completion, ServiceHandle, Solver, SolverConfig

from shardeval_lmeval.benchmark import encode_response
from shardeval_lmeval.wire import build_model, read_generation, read_loglikelihood

CHAT = "local-chat-completions"
# One request's answer as lm-eval's model returns it: generated text, a (log-likelihood, is_greedy)
# pair, or a rolling request's summed log-likelihood.
Answer = str | tuple[float, bool] | float


def prompt_tokens(body: dict[str, Any]) -> int | None:
    """How many tokens a loglikelihood body's prompt holds (lm-eval sends [[ids]] or [ids]); None for text."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
        prompt = prompt[0] if len(prompt) == 1 else None
    return len(prompt) if isinstance(prompt, list) else None


def check_echo(body: dict[str, Any], ctxlen: int, token_logprobs: list[Any], top_logprobs: list[Any]) -> None:
    """Raise ValueError unless an echo answer covers what lm-eval reads from it.

    lm-eval sums token_logprobs[ctxlen:-1]: the prompt's tokens, then the one generated token it
    asks for (max_tokens 1) is dropped. A list of another length shifts or shortens that slice and
    lm-eval would score it silently (2 entries for 8 tokens: an empty sum, log-likelihood 0.0), so
    the length must be the prompt's tokens plus one, the continuation's span must hold a token,
    and each of its values (and its top_logprobs, which decide is_greedy) must be a finite number <= 0.
    """
    n = prompt_tokens(body)
    have = len(token_logprobs)
    if n is not None and have != n + 1:
        raise ValueError(f"the echo holds {have} token logprob(s) for a prompt of {n} token(s) and 1 generated; expected {n + 1}")
    end = have - 1
    if ctxlen >= end:
        raise ValueError(f"the echo holds {have} token logprob(s): none for the continuation after context token {ctxlen}")
    if len(top_logprobs) != have:
        raise ValueError(f"the echo holds {have} token logprob(s) but {len(top_logprobs)} top_logprobs")
    check_logprobs(token_logprobs, range(ctxlen, end))
    for i in range(ctxlen, end):
        top = top_logprobs[i]
        if not isinstance(top, dict) or not top:
            raise ValueError(f"the echo's top_logprobs for token {i} is {top!r}, not the most likely tokens with their logprobs")
        check_logprobs(list(top.values()), range(len(top)))


class LmEvalSolver(Solver):
    def __init__(self, config: SolverConfig, service: ServiceHandle) -> None:
        if config.generation.reasoning is not None:  # the bodies are lm-eval's: a setting here would reach no request
            raise UsageError(
                "benchmark lm_eval: solver.generation.reasoning does not reach lm-eval's requests (they carry "
                "the task's gen_kwargs, as under lm_eval); ask as lm-eval asks: params.gen_kwargs, e.g. "
                "{reasoning_effort: high} or {chat_template_kwargs: {enable_thinking: false}}, and "
                "params.think_end_token to strip inline thinking as lm-eval does (docs/lm-eval.md)"
            )
        self.service = service
        tags = getattr(getattr(service.client, "config", None), "reasoning_tags", DEFAULT_TAGS)
        self.tags: tuple[str, str] | None = (tags[0], tags[1]) if tags else None
        self._models: dict[tuple[str, str | None], Any] = {}

    def _reader(self, name: str, think_end_token: str | None) -> Any:
        """lm-eval's API model `name`, to read answers with (no tokenizer: reading needs none; the
        chat model's parse_generations is a method, it reads the model's think_end_token)."""
        key = (name, think_end_token)
        if key not in self._models:
            args = {"model": self.service.endpoint.model, "tokenizer_backend": "none"}
            if think_end_token is not None:
                args["think_end_token"] = think_end_token
            self._models[key] = build_model(name, args)
        return self._models[key]

    async def solve(self, problem: Problem, seed: int) -> Attempt:
        plan = problem.metadata["lm_eval"]
        model = plan["model"]
        chat = model == CHAT
        sends = [(r, wire) for r in plan["requests"] for wire in r["wire"] for _ in range(r["repeats"])]
        parts = await asyncio.gather(*(self._send(wire["body"], chat) for _, wire in sends))
        request = {k: v for k, v in plan["requests"][0]["wire"][0]["body"].items() if k not in ("prompt", "messages")}
        request["lm_eval"] = {
            "task": plan["task"],
            "doc_id": plan["doc_id"],
            "model": model,
            "requests": sum(len(r["wire"]) * r["repeats"] for r in plan["requests"]),
        }
        messages = [{"role": "user", "content": problem.user_text()}]
        failed = next((i for i, c in enumerate(parts) if c.status != "ok"), None)
        if failed is not None:
            return Attempt(
                completion=combine_completions(parts, "", failure=(f"request {failed + 1} of {len(parts)}", parts[failed])),
                messages=messages,
                request=request,
            )
        thoughts: list[str | None] = []
        try:
            resps = self._answers(plan["requests"], iter(parts), model, plan.get("think_end_token"), thoughts)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            c = parts[0]
            bad = msgspec.structs.replace(c, status="error", error_kind="protocol", error=f"lm-eval cannot read the answer: {exc}")
            return Attempt(completion=combine_completions(parts, "", failure=("the answers", bad)), messages=messages, request=request)
        text = encode_response(resps)
        shown = "\n".join(str(x) for r in resps for x in r)
        completion = self._with_thinking(combine_completions(parts, text), parts, thoughts, plan.get("think_end_token"))
        return Attempt(completion=completion, messages=[*messages, {"role": "assistant", "content": shown}], request=request)

    async def _send(self, body: dict[str, Any], chat: bool) -> Completion:
        full = {"model": self.service.endpoint.model, **body}
        protocol = "chat_completions" if chat else "completions"
        return await self.service.client.request(full, self.service.slots, stream=False, protocol=protocol)

    def _answers(
        self,
        requests: list[dict[str, Any]],
        parts: Iterator[Completion],
        model: str,
        think_end_token: str | None,
        thoughts: list[str | None],
    ) -> list[list[Answer]]:
        """lm-eval's answer per request and repeat: a rolling one sums its windows, as lm-eval does.
        Each generated answer's thinking (None: it had none) is appended to `thoughts`."""
        reader = self._reader(model, think_end_token)
        out = []
        for r in requests:
            answers: list[Answer] = []
            for _ in range(r["repeats"]):
                if r["type"] == "generate_until":
                    answer, thought = self._read(reader, next(parts), model == CHAT, think_end_token)
                    answers.append(answer)
                    thoughts.append(thought)
                    continue
                lls: list[tuple[float, bool]] = []
                for wire in r["wire"]:
                    c = next(parts)
                    if c.prompt_logprobs is None or c.top_logprobs is None:
                        raise ValueError(
                            "the response has no logprobs with top_logprobs; the server must support `echo` "
                            "with `logprobs` on /v1/completions, as vLLM does"
                        )
                    check_echo(wire["body"], wire["ctxlen"], c.prompt_logprobs, c.top_logprobs)
                    lls.append(read_loglikelihood(reader, c.prompt_logprobs, c.top_logprobs, [wire["body"]["prompt"]], wire["ctxlen"]))
                answers.append(lls[0] if r["type"] == "loglikelihood" else sum(ll for ll, _ in lls))
            out.append(answers)
        return out

    def _read(self, reader: Any, c: Completion, chat: bool, think_end_token: str | None) -> tuple[str, str | None]:
        """One generated reply as (the answer lm-eval scores, its thinking or None)."""
        if think_end_token is None:  # shardeval's rule: the answer after the last closing tag; unclosed: no answer
            split = split_reply(c.text, c.reasoning, self.tags)
            return read_generation(reader, split.answer, chat), split.reasoning
        # lm-eval's rule, by lm-eval itself: the content after the last think_end_token, lstripped
        answer = read_generation(reader, c.text, chat)
        if c.reasoning is not None:
            return answer, c.reasoning
        end = c.text.rfind(think_end_token)
        if end < 0:  # no token: lm-eval scores all of it, so none of it is thinking
            return answer, None
        thought = c.text[:end]
        opening = self.tags[0] if self.tags else DEFAULT_TAGS[0]
        if thought.lstrip().startswith(opening):
            thought = thought.lstrip()[len(opening) :]
        return answer, thought

    def _with_thinking(self, c: Completion, parts: list[Completion], thoughts: list[str | None], think_end_token: str | None) -> Completion:
        """The document's completion with its generated answers' thinking and thinking tokens. Its
        text is the answers' JSON, which the core would split again by the service's tags: when a
        tag is in it (an answer that kept one), the thinking is set ("" for none), so it is not."""
        kept = [(i, t) for i, t in enumerate(thoughts) if t is not None]
        if len(kept) == 1:
            reasoning: str | None = kept[0][1]
        elif kept:
            reasoning = "\n\n".join(f"[answer {i + 1} of {len(thoughts)}]\n{t}" for i, t in kept)
        else:
            tags = [*(self.tags or ()), *((think_end_token,) if think_end_token else ())]
            reasoning = "" if any(tag in c.text for tag in tags) else None
        counted = [p.reasoning_tokens for p in parts if p.reasoning_tokens is not None]
        fields: dict[str, Any] = {"reasoning": reasoning}
        if counted:
            fields["reasoning_tokens"] = sum(counted)
            fields["reasoning_tokens_from"] = next(p.reasoning_tokens_from for p in parts if p.reasoning_tokens is not None)
        return msgspec.structs.replace(c, **fields)
