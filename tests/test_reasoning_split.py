"""shardeval's reasoning split (`split_reply`) against lighteval's and lmms-eval's own released code
on a shared fixture of edge cases (tests/fixtures/reasoning_split_cases.json), and the split's
invariants as properties (issue 39; docs/reasoning.md, "The rule, and how it compares").

The references are the functions as PyPI ships them, never copied here: scripts/setup/reasoning_refs.sh
(run by scripts/test.sh) downloads the two wheels, pinned by version and sha256, into
`$SHARDEVAL_CI_CACHE/reasoning-refs`, and this test loads the ONE module each function lives in
straight out of its wheel with `zipimport`, without installing the package or running its
`__init__`:

- lighteval 0.13.0, `lighteval/utils/utils.py`, `remove_reasoning_tags`. The package's
  `__init__` reads its installed metadata (`importlib.metadata.version`) and the rest of the package
  pulls torch, transformers and friends, so the package is not imported; the module alone needs
  only numpy (a shardeval dependency) and pytablewriter (in the test extras, through lm-eval).
- lmms-eval 0.7.3, `lmms_eval/api/reasoning.py`, `strip_reasoning_tags`: the module imports only
  `typing` (its package `__init__`s are empty, but skipping them costs nothing).

Each reference is called as its tool calls it with the `<think>` pair, shardeval's default tags.
For every case the test asserts both sets: a reference the case does not name in `differs` must
give shardeval's answer exactly, and one it names must differ exactly as recorded, so a change on
either side fails here. Without the wheels the test skips, naming the setup script; under CI
(`$CI` set) it fails instead, since scripts/test.sh has run the script.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import zipimport
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardeval.benchmark.reasoning import DEFAULT_TAGS, split_reply

REPO = Path(__file__).resolve().parent.parent
FIXTURE = json.loads((REPO / "tests" / "fixtures" / "reasoning_split_cases.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = FIXTURE["cases"]
REFS: dict[str, dict[str, str]] = FIXTURE["references"]
SETUP = "bash scripts/setup/reasoning_refs.sh"
CACHE = Path(os.environ.get("SHARDEVAL_CI_CACHE", "/var/cache/shardeval-ci")) / "reasoning-refs"
OPEN, CLOSE = DEFAULT_TAGS


def text(value: str | list) -> str:
    """A fixture string: a string, or strings and [string, times] pairs joined in order."""
    if isinstance(value, str):
        return value
    return "".join(part if isinstance(part, str) else part[0] * part[1] for part in value)


@cache
def reference(name: str) -> Callable[[str], str]:
    """The reference's function, loaded from its module in the cached wheel, called with <think>."""
    ref = REFS[name]
    wheel = CACHE / ref["wheel"]
    if not wheel.is_file():
        message = f"{ref['wheel']} is not in {CACHE}: run `{SETUP}`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert digest == ref["sha256"], f"{wheel}: sha256 {digest}, pinned {ref['sha256']}: run `{SETUP}`"
    package_dir, _, filename = ref["module"].rpartition("/")
    spec = zipimport.zipimporter(f"{wheel}/{package_dir}/").find_spec(filename.removesuffix(".py"))
    assert spec is not None and spec.loader is not None, f"{ref['module']} is not in {wheel}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, ref["function"])
    if name == "lighteval":  # list[tuple[str, str]], its CLI's default reasoning_tags
        return lambda content: function(content, [(OPEN, CLOSE)])
    return lambda content: function(content, [[OPEN, CLOSE]])  # lmms-eval: List[List[str]]


def compare(name: str) -> tuple[Counter, list[str]]:
    """(how many cases fall in each class: equal, trims, differs; the mismatches with the fixture)."""
    function = reference(name)
    counts: Counter = Counter()
    wrong = []
    for case in CASES:
        content = text(case["content"])
        answer = split_reply(content).answer
        got = function(content)
        recorded = case.get("differs", {}).get(name)
        if recorded is None:
            counts["equal"] += 1
            if got != answer:
                wrong.append(f"{case['name']}: recorded equal; shardeval {answer[:80]!r}, {name} {got[:80]!r}")
        elif recorded["because"] == "trims":
            counts["trims"] += 1
            if not (got != answer and got == answer.strip()):
                wrong.append(f"{case['name']}: recorded trims; shardeval {answer[:80]!r}, {name} {got[:80]!r}")
        else:
            counts["differs"] += 1
            want = text(recorded["gives"])
            if got != want or got.strip() == answer.strip():
                wrong.append(
                    f"{case['name']}: recorded {recorded['because']} giving {want[:80]!r}; shardeval {answer[:80]!r}, {name} {got[:80]!r}"
                )
    return counts, wrong


def test_fixture_shape() -> None:
    names = [case["name"] for case in CASES]
    assert len(CASES) >= 30
    assert len(set(names)) == len(names)
    for case in CASES:
        assert set(case) <= {"name", "content", "why", "differs"} and case["why"], case["name"]
        for name, recorded in case.get("differs", {}).items():
            assert name in REFS, case["name"]
            assert recorded["because"] in FIXTURE["arguments"], case["name"]
            assert ("gives" in recorded) == (recorded["because"] != "trims"), case["name"]
    assert FIXTURE["tags"] == list(DEFAULT_TAGS)


def test_setup_script_pins_the_fixtures_wheels() -> None:
    script = (REPO / "scripts" / "setup" / "reasoning_refs.sh").read_text()
    for ref in REFS.values():
        assert f'"{ref["pin"]} {ref["wheel"]} {ref["sha256"]}"' in script, ref["pin"]


@pytest.mark.parametrize("name", sorted(REFS))
def test_agrees_and_differs_as_recorded(name: str) -> None:
    _, wrong = compare(name)
    assert not wrong, f"{len(wrong)} case(s) against {name} no longer as recorded:\n" + "\n".join(wrong)


def test_docs_state_the_comparison() -> None:
    """docs/reasoning.md states each reference's version and counts, and argues every difference."""
    docs = (REPO / "docs" / "reasoning.md").read_text(encoding="utf-8")
    section = docs.split("## The rule, and how it compares", 1)[1].split("\n## ", 1)[0]
    n = len(CASES)
    for name, ref in REFS.items():
        counts, _ = compare(name)
        version = ref["pin"].split("==")[1]
        line = next((l for l in section.splitlines() if version in l and f"`{ref['function']}`" in l), None)
        assert line is not None, f"no line names {name} {version} and `{ref['function']}`"
        assert f"equal on {counts['equal']} of {n} cases" in line, line
        if counts["trims"]:
            assert f"{counts['equal'] + counts['trims']} of {n} up to whitespace" in line, line
    used = {d["because"] for case in CASES for d in case.get("differs", {}).values()}
    for key in used:
        assert f"`{key}`" in section, f"docs/reasoning.md does not argue `{key}`"


# Properties of split_reply, whatever the reference tools do.

PIECES = st.sampled_from([OPEN, CLOSE, "<THINK>", "think", "<", ">", "/", "\n", " ", "\r\n", "42", "é"])
TAGGED = st.lists(st.one_of(PIECES, st.text(max_size=6)), max_size=12).map("".join)
UNTAGGED = st.text().filter(lambda s: OPEN not in s and CLOSE not in s)
NO_TAG_TEXT = st.lists(st.one_of(PIECES, st.text(max_size=6)), max_size=8).map("".join).filter(lambda s: OPEN not in s and CLOSE not in s)


@settings(max_examples=500, deadline=None)
@given(TAGGED)
def test_answer_never_holds_a_closing_tag_and_is_a_suffix(content: str) -> None:
    split = split_reply(content)
    assert CLOSE not in split.answer
    assert content.endswith(split.answer)
    assert split.unfinished == (split.source == "tags" and not split.answer.strip())


@settings(max_examples=300, deadline=None)
@given(UNTAGGED)
def test_a_reply_without_tags_is_all_answer(content: str) -> None:
    split = split_reply(content)
    assert split.answer == content and split.reasoning is None and split.source is None
    assert not split.unfinished


@settings(max_examples=300, deadline=None)
@given(st.text(" \n\t\r", max_size=3), NO_TAG_TEXT, NO_TAG_TEXT)
def test_one_pair_reconstructs_the_reply(lead: str, thinking: str, answer: str) -> None:
    """One opening and one closing tag: whitespace before the opening tag, the thinking, the tags
    and the answer are the reply, piece for piece."""
    content = lead + OPEN + thinking + CLOSE + answer
    split = split_reply(content)
    assert (split.reasoning, split.answer) == (thinking, answer)
    assert lead + OPEN + split.reasoning + CLOSE + split.answer == content


@settings(max_examples=300, deadline=None)
@given(NO_TAG_TEXT.filter(lambda s: s.strip()), NO_TAG_TEXT, NO_TAG_TEXT)
def test_text_before_the_opening_tag_stays_in_the_thinking(preamble: str, thinking: str, answer: str) -> None:
    content = preamble + OPEN + thinking + CLOSE + answer
    split = split_reply(content)
    assert split.answer == answer
    assert split.reasoning + CLOSE + split.answer == content


@settings(max_examples=300, deadline=None)
@given(NO_TAG_TEXT, NO_TAG_TEXT)
def test_an_unclosed_block_has_no_answer(before: str, thinking: str) -> None:
    split = split_reply(before + OPEN + thinking)
    kept = thinking if not before.strip() else before + OPEN + thinking  # a preamble stays with the thinking
    assert (split.answer, split.reasoning, split.unfinished) == ("", kept, True)


@settings(max_examples=200, deadline=None)
@given(TAGGED, st.text(max_size=20))
def test_a_reasoning_field_wins_over_tags(content: str, reasoning: str) -> None:
    split = split_reply(content, reasoning=reasoning)
    assert (split.answer, split.reasoning, split.source) == (content, reasoning, "field")


@pytest.mark.parametrize("content", ["The answer is 42. <think>but wait", "Let me think.<think>6 x 7 is 42</think>42"])
def test_text_before_the_opening_tag_is_kept_with_the_thinking_closed_or_not(content):
    """A preamble before <think> is not the answer, but it is the model's: the split loses none of it."""
    split = split_reply(content)
    assert split.reasoning.startswith(content.split("<think>")[0])
    assert split.answer == ("" if "</think>" not in content else "42")
