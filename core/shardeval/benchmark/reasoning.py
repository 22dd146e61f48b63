"""What of a reply is its answer: the one rule that splits a reasoning model's reply (docs/reasoning.md).

A reasoning model's reply comes in one of two shapes. A server with a reasoning parser (vLLM's
`--reasoning-parser`) sends the thinking in a field of its own (`reasoning`, or the older
`reasoning_content`) and the answer as the content. A server without one sends the thinking
inline, between tags (`<think>…</think>`), before the answer. Every reply is split here, once, in
the shard, and every scorer, extractor and judge sees only the answer; the raw reply is kept.

The rule for inline tags (`split_reply`):

- The answer is the text after the LAST closing tag; everything before it is thinking (a model
  that thinks, answers, and thinks again answered last). A closing tag without an opening one
  counts: a chat template that opens the thinking in the prompt (Qwen3, DeepSeek-R1) leaves only
  the closing tag in the reply.
- An opening tag that is never closed means no answer: the reply ended while the model thought.
- A reply with neither tag is all answer.

When the server sent a reasoning field, that field is the thinking and the content the answer,
tags or not: the server has split it already, and its split stands.

`reply_outcome` names what a cut-off reply is: `truncated_reasoning` when the reply ended inside
the thinking at the length limit (it is scored 0, never from its thinking), `truncated` when the
answer had begun.
"""

from __future__ import annotations

from typing import Literal
from collections.abc import Sequence

import msgspec

__all__ = ["DEFAULT_TAGS", "Outcome", "ReplySplit", "reply_outcome", "split_reply"]

DEFAULT_TAGS: tuple[str, str] = ("<think>", "</think>")

# What a reply that hit its length limit is: cut inside the thinking, or after its answer began.
Outcome = Literal["truncated_reasoning", "truncated"]


class ReplySplit(msgspec.Struct, frozen=True, gc=False):
    """A reply split into what it thought and what it answered.

    `source`: where the thinking came from ("field": the server's reasoning field, "tags": inline
    tags; None: the reply has none). `unfinished`: the reply thought and gave no answer after it
    (it ended inside its thinking, or right at its end): `answer` holds no text.

    Nothing is trimmed: the answer is the text as the model wrote it after its thinking (what
    vLLM's reasoning parsers send as the content), so the inline and the field form of one reply
    give a scorer the same string.
    """

    answer: str
    reasoning: str | None = None
    source: Literal["field", "tags"] | None = None
    unfinished: bool = False

    def shown(self) -> str:
        """The answer as a judge is shown it: without the whitespace before it when the reply
        thought (the separator after the thinking: vLLM's parsers send `</think>`'s `\n\n` as the
        content's start), so a judge reads the same answer whether the model thought or not and
        in whichever form; a reply without thinking is shown as it came. The record keeps the
        answer as written."""
        return self.answer.lstrip() if self.source is not None else self.answer


def split_reply(content: str, reasoning: str | None = None, tags: Sequence[str] | None = DEFAULT_TAGS) -> ReplySplit:
    """Split one reply (see the module's rule). `reasoning`: the server's reasoning field (None: it
    sent none); `tags`: the (opening, closing) pair to split inline thinking on, None or empty for
    a model whose replies are never split inline."""
    if reasoning is not None:
        return ReplySplit(answer=content, reasoning=reasoning, source="field", unfinished=bool(reasoning) and not content.strip())
    if not tags or not content:
        return ReplySplit(answer=content)
    opening, closing = tags[0], tags[1]
    end = content.rfind(closing)
    if end >= 0:
        thought = content[:end]
        start = thought.find(opening)
        if start >= 0 and not thought[:start].strip():  # the usual shape: the reply opens with the tag
            thought = thought[start + len(opening) :]
        answer = content[end + len(closing) :]
        return ReplySplit(answer=answer, reasoning=thought, source="tags", unfinished=not answer.strip())
    start = content.find(opening)
    if start >= 0:  # opened, never closed: no answer; text before the tag stays with the thinking, as above
        thought = content[start + len(opening) :] if not content[:start].strip() else content
        return ReplySplit(answer="", reasoning=thought, source="tags", unfinished=True)
    return ReplySplit(answer=content)


def reply_outcome(split: ReplySplit, finish_reason: str | None) -> Outcome | None:
    """`truncated_reasoning` for a reply cut off at its length limit while it thought (no answer
    text after its thinking), `truncated` for any other reply cut off there; None for a reply that
    ended on its own."""
    if finish_reason != "length":
        return None
    return "truncated_reasoning" if split.unfinished else "truncated"
