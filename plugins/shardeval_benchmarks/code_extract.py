"""From a model's reply to a runnable program: fenced-code extraction and Codex-style truncation.

Pure functions (no I/O), shared by code benchmarks. Chat replies wrap code in Markdown fences,
often with prose around them and sometimes several blocks; completion replies continue the prompt
and run on past the function, so they are cut at the first line that starts something new.
"""

from __future__ import annotations

import re
from typing import NamedTuple

PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3"})
# The Codex paper's stop sequences (Chen et al. 2021), plus a closing fence from chat-tuned models.
STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n```")
EXTRACTED_MAX_CHARS = 4096
_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*([^\s`]*)[^`\n]*$")
_FUTURE = re.compile(r"^from[ \t]+__future__[ \t]+import[^\n]*\n?", re.M)


class Block(NamedTuple):
    """One fenced code block: its info-string tag (lowercase, "" for a bare fence) and its code."""

    tag: str
    code: str


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced block in document order; an unclosed last fence (a cut-off reply) runs to the end.

    The opening fence's indentation is removed from the block's lines, so a block nested in a
    Markdown list still parses as top-level code.
    """
    blocks: list[Block] = []
    lines = iter(text.splitlines(keepends=True))
    for line in lines:
        opening = _FENCE.match(line.rstrip("\r\n"))
        if not opening:
            continue
        indent, fence, tag = opening.group(1), opening.group(2), opening.group(3).lower()
        body: list[str] = []
        for line in lines:  # the same iterator: the block's lines, then its closing fence
            stripped = line.strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                break
            body.append(line[len(indent) :] if indent and line.startswith(indent) else line)
        blocks.append(Block(tag, "".join(body)))
    return blocks


def defines(code: str, name: str) -> bool:
    """Whether `code` defines a top-level function `name` (plain or async)."""
    return re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", code, re.M) is not None


def extract_chat_code(reply: str, entry_point: str) -> str:
    """The code of a chat reply, in this order of preference: the first Python (or untagged) block
    that defines the entry point; the first block of any tag that does; the first Python block;
    the first block; the reply itself (a model that answered with bare code)."""
    blocks = fenced_blocks(reply)
    python = [b for b in blocks if b.tag in PYTHON_TAGS]
    for candidates in (python, blocks):
        for block in candidates:
            if defines(block.code, entry_point):
                return block.code
    return (python or blocks or [Block("", reply)])[0].code


def truncate_completion(completion: str, stops: tuple[str, ...] = STOP_SEQUENCES) -> str:
    """The completion up to the first stop sequence, as the Codex evaluation does."""
    cuts = [at for stop in stops if (at := completion.find(stop)) >= 0]
    return completion[: min(cuts, default=len(completion))]


def as_function_body(code: str) -> str:
    """A body-only reply made to follow a function header: unindented code is indented by 4."""
    lines = code.split("\n")
    first = next((line for line in lines if line.strip()), "")
    if first and not first[0].isspace():
        lines = [("    " + line) if line.strip() else line for line in lines]
    return "\n".join(lines)


def chat_program(prompt: str, reply: str, entry_point: str) -> tuple[str, str]:
    """(program without the tests, the code taken from the reply) for a chat-style reply.

    A reply that defines the entry point runs after the prompt, so the prompt's imports and helper
    functions exist and the reply's definition replaces the stub; a reply that does not is taken
    as the body the prompt's function is missing.
    """
    code = extract_chat_code(reply, entry_point)
    if defines(code, entry_point):
        futures = "".join(m.group(0).rstrip("\n") + "\n" for m in _FUTURE.finditer(code))
        return futures + prompt + "\n" + _FUTURE.sub("", code), code
    return prompt + as_function_body(code), code


def completion_program(prompt: str, completion: str) -> tuple[str, str]:
    """(program without the tests, the completion as used) for a completion-style reply."""
    body = truncate_completion(completion)
    return prompt + body, body


def with_tests(program: str, test: str, entry_point: str) -> str:
    """The program followed by the benchmark's `check` function and its call."""
    return f"{program.rstrip()}\n\n\n{test.strip()}\n\n\ncheck({entry_point})\n"


def clip(text: str, limit: int = EXTRACTED_MAX_CHARS) -> str:
    """`text` cut to `limit` characters for a record, saying so when it was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n# ... [{len(text) - limit} more characters not kept]\n"
