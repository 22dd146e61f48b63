"""The `lm_eval` solver: sends a document's planned lm-eval request bodies through shardeval's
client (retries, adaptive concurrency, the response cache, errors kept apart) and reads each
answer as lm-eval reads it. Never streamed, as lm-eval's API models never stream.

A document's requests go out together; each Instance is sent `repeats` times (lm-eval clones it).
Any failed request makes the document an error record (its kind kept): a partial answer is
never scored. The record's response is lm-eval's answers as JSON (shardeval_lmeval.benchmark).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from shardeval.api import Attempt, combine_completions, Problem, ServiceHandle, SolverConfig

from shardeval_lmeval.benchmark import encode_response
from shardeval_lmeval.wire import build_model, read_generation, read_loglikelihood

CHAT = "local-chat-completions"


class LmEvalSolver:
    def __init__(self, config: SolverConfig, service: ServiceHandle) -> None:
        self.service = service
        self._models: dict[str, Any] = {}

    def _reader(self, name: str) -> Any:
        """lm-eval's API model `name`, to read answers with (no tokenizer: reading needs none; the
        chat model's parse_generations is a method, it reads the model's think_end_token)."""
        if name not in self._models:
            self._models[name] = build_model(name, {"model": self.service.endpoint.model, "tokenizer_backend": "none"})
        return self._models[name]

    async def solve(self, problem: Problem, seed: int) -> Attempt:
        plan = problem.metadata["lm_eval"]
        model = plan["model"]
        chat = model == CHAT
        sends = [(r, wire) for r in plan["requests"] for wire in r["wire"] for _ in range(r["repeats"])]
        parts = await asyncio.gather(*(self._send(wire["body"], chat) for _, wire in sends))
        request = {k: v for k, v in plan["requests"][0]["wire"][0]["body"].items() if k not in ("prompt", "messages")}
        request["lm_eval"] = {"task": plan["task"], "doc_id": plan["doc_id"], "model": model,
                              "requests": sum(len(r["wire"]) * r["repeats"] for r in plan["requests"])}
        messages = [{"role": "user", "content": problem.user_text()}]
        failed = next((i for i, c in enumerate(parts) if c.status != "ok"), None)
        if failed is not None:
            return Attempt(completion=combine_completions(parts, "", failure=(f"request {failed + 1} of {len(parts)}", parts[failed])),
                           messages=messages, request=request)
        try:
            resps = self._answers(plan["requests"], iter(parts), model)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            c = parts[0]
            bad = msgspec.structs.replace(c, status="error", error_kind="protocol", error=f"lm-eval cannot read the answer: {exc}")
            return Attempt(completion=combine_completions(parts, "", failure=("the answers", bad)), messages=messages, request=request)
        text = encode_response(resps)
        shown = "\n".join(str(x) for r in resps for x in r)
        return Attempt(completion=combine_completions(parts, text), messages=[*messages, {"role": "assistant", "content": shown}],
                       request=request)

    async def _send(self, body: dict[str, Any], chat: bool) -> Any:
        full = {"model": self.service.endpoint.model, **body}
        protocol = "chat_completions" if chat else "completions"
        return await self.service.client.request(full, self.service.slots, stream=False, protocol=protocol)

    def _answers(self, requests: list[dict[str, Any]], parts: Any, model: str) -> list[list[Any]]:
        """lm-eval's answer per request and repeat: a rolling one sums its windows, as lm-eval does."""
        reader = self._reader(model)
        out = []
        for r in requests:
            answers = []
            for _ in range(r["repeats"]):
                if r["type"] == "generate_until":
                    answers.append(read_generation(reader, next(parts).text, model == CHAT))
                    continue
                lls = []
                for wire in r["wire"]:
                    c = next(parts)
                    if c.prompt_logprobs is None or c.top_logprobs is None:
                        raise ValueError("the response has no logprobs with top_logprobs; the server must support `echo` "
                                         "with `logprobs` on /v1/completions, as vLLM does")
                    lls.append(read_loglikelihood(reader, c.prompt_logprobs, c.top_logprobs, [wire["body"]["prompt"]], wire["ctxlen"]))
                answers.append(lls[0] if r["type"] == "loglikelihood" else sum(ll for ll, _ in lls))
            out.append(answers)
        return out
