r"""The simulator as a reasoning model served by vLLM (`--reasoning-form`), so shardeval's reasoning
support is tested offline.

A reply thinks, then answers. Its tokens are the thinking's, then the answer's: the answer is the
very reply the simulator gives without reasoning, with `\n\n` before its first token (vLLM's
reasoning parsers send what follows `</think>` untrimmed, and models write `</think>\n\n`). How
the thinking reaches the client is the form:

    field              delta.reasoning / message.reasoning, the answer in content (vLLM >= 0.10
                       with --reasoning-parser)
    reasoning_content  the same under the older field name
    inline             no parser: content is `<think>` + thinking + `</think>` + `\n\n` + answer

Token accounting, the same in every form so one max_tokens cuts each alike: the thinking is
`reasoning_tokens` tokens; the tags cost nothing of their own (`<think>` rides on the first
thinking token, `</think>\n\n` on the answer's first), so a stream carries exactly as many
thinking chunks as usage's `completion_tokens_details.reasoning_tokens` says, and a client
counting chunks agrees with the server.

What a request asks is honoured as vLLM does: `max_tokens` counts thinking and answer (cut inside
the thinking: no content, no closing tag); `chat_template_kwargs.enable_thinking: false` thinks
not at all; `reasoning_effort` low / medium / high scales the thinking ×0.25 / ×1 / ×4;
`thinking_token_budget` ends the thinking (closed) at that many tokens, and the answer follows.

The thinking plants the right answer (Answerer.compose: `so the answer is #### 42`, or the
benchmark's own right reply, a code block or "The answer is (B)") after a couple of words, then
fills up with words that hold no digit and no "answer"; so a scorer that wrongly reads the
thinking scores a cut-off or wrong reply right. A thinking is never shorter than what it plants
(only max_tokens or a budget cut it). Its words come from a hash apart from the answer's, so
the answer is the same, to the byte, in every form and without reasoning; its length is a pure
function of the prompt (`answers.output_length` keyed `sim-think`), heavy-tailed with
`--reasoning-tokens-tail`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from shardeval_sim.answers import VOCAB, Reply, output_length, split_words

OPEN, CLOSE, SEPARATOR = "<think>", "</think>", "\n\n"
EFFORT_SCALE = {"low": 0.25, "medium": 1.0, "high": 4.0}
_LEAD = 2  # words of thinking before the planted answer


class ReasoningRequestError(ValueError):
    """A request field about thinking that vLLM would refuse (HTTP 400, naming `param`)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Ask:
    """What one request asks of the thinking."""

    enabled: bool = True
    scale: float = 1.0
    budget: int | None = None


def parse_ask(body: dict[str, Any]) -> Ask:
    """The thinking a chat body asks for, checked as vLLM checks it."""
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ReasoningRequestError(f"chat_template_kwargs must be an object, got {kwargs!r}", "chat_template_kwargs")
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in EFFORT_SCALE:
        raise ReasoningRequestError(f"reasoning_effort must be one of low, medium, high, got {effort!r}", "reasoning_effort")
    budget = body.get("thinking_token_budget")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 0):
        raise ReasoningRequestError(f"thinking_token_budget must be an integer >= 0, got {budget!r}", "thinking_token_budget")
    # A chat template disables thinking only for a literal false (`enable_thinking is false`).
    return Ask(enabled=(kwargs or {}).get("enable_thinking") is not False, scale=EFFORT_SCALE[effort or "medium"], budget=budget)


@dataclass(frozen=True)
class Thinker:
    """Puts the thinking in front of an answer (see the module doc)."""

    tokens: int  # mean thinking length (the fixed length without a tail)
    tail: float | None  # Pareto shape of per-prompt thinking lengths (None: fixed)
    seed: int

    def length(self, text: str, ask: Ask, planted: int) -> int:
        """Thinking tokens for `text`: the per-prompt length × effort, never shorter than what it
        plants (`planted` tokens after the lead), then capped by the request's budget."""
        n = max(1, round(output_length(text, self.tokens, self.tail, person=b"sim-think") * ask.scale), _LEAD + planted)
        return n if ask.budget is None else min(n, ask.budget)

    def thoughts(self, text: str, request_seed: int | None, planted: list[str], n: int) -> list[str]:
        """`n` thinking tokens: two words, the planted answer, then words with no digit in them."""
        digest = hashlib.blake2b(
            f"think\x1f{self.seed}\x1f{request_seed}\x1f{text}".encode("utf-8", "surrogatepass"), digest_size=16
        ).digest()
        start, stride = digest[0], digest[1] | 1
        words = [VOCAB[(start + i * stride) & 63] for i in range(max(_LEAD, n - len(planted)))]
        head = [words[0]] + [" " + w for w in words[1:_LEAD]]
        return (head + planted + [" " + w for w in words[_LEAD:]])[:n]

    def reply(
        self, text: str, request_seed: int | None, answer: list[str], plant: Callable[[], str], ask: Ask, max_tokens: int | None
    ) -> Reply:
        """The reply to one chat request: thinking then `answer` (its tokens as given without
        reasoning), cut at `max_tokens` as vLLM cuts it."""
        if not ask.enabled:  # the chat template closed the thinking in the prompt: the plain answer
            tokens, thinking, thought = answer, 0, False
        else:
            planted = [" " + t.lstrip(" ") if i == 0 else t for i, t in enumerate(split_words(plant()))]
            thinking = self.length(text, ask, len(planted))
            body = self.thoughts(text, request_seed, planted, thinking)
            tokens = body + ([SEPARATOR + answer[0], *answer[1:]] if answer else [])
            thought = True
        if max_tokens is not None and max_tokens < len(tokens):
            return Reply(tokens=tokens[:max_tokens], finish_reason="length", thinking=min(thinking, max_tokens), thought=thought)
        return Reply(tokens=tokens, finish_reason="stop", thinking=thinking, thought=thought)


def inline_tokens(reply: Reply) -> list[str]:
    """The reply's tokens as a server without a reasoning parser streams them: `<think>` on the
    first, `</think>` on the answer's first (none when the reply was cut while thinking)."""
    if not reply.thought or not reply.tokens:
        return reply.tokens
    tokens = list(reply.tokens)
    if reply.thinking < len(tokens):
        tokens[reply.thinking] = CLOSE + tokens[reply.thinking]
    tokens[0] = OPEN + tokens[0]
    return tokens
