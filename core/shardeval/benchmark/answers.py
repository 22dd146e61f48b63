"""Answer extraction and normalisation shared by the built-in scorers."""

from __future__ import annotations

import re

_FINAL = re.compile(r"####\s*(.+?)\s*$", re.MULTILINE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_answer(text: str) -> str | None:
    """The text after the last `####` marker (GSM8K's convention), or None when there is none."""
    matches = _FINAL.findall(text)
    return matches[-1] if matches else None


def normalize(text: str) -> str:
    """Case, surrounding whitespace, a trailing period, `$` and thousands separators do not count."""
    text = " ".join(text.strip().lower().split())
    text = text.rstrip(".").strip()
    if _NUMBER.fullmatch(text.replace("$", "")):
        text = text.replace("$", "").replace(",", "")
    return text


def as_number(text: str | None) -> float | None:
    """The first number in `text` as a float (`$` and thousands commas ignored), or None."""
    match = _NUMBER.search(text.replace("$", "")) if text is not None else None
    return float(match.group().replace(",", "")) if match else None


# --- numeric answers (GSM8K and the BYO `numeric` scorer) --------------------------------------

# A number as models write it: optional sign (not when glued to a word, so "3-4" is 3 and 4),
# thousands groups or plain digits, optional decimals. "$" and "%" around it are ignored.
NUMBER_RE = re.compile(r"(?:(?<![\w.])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d)")
_MARKER = re.compile(r"####")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_FRAC = re.compile(r"\\d?frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(\d+)\s*\}")
NUMERIC_METHODS = ("####", "answer is", "boxed", "last number")


def _clean(text: str) -> str:
    """Unicode minus and dashes to '-', `$`, `%` and LaTeX `\\$ \\%` dropped (they never change the value)."""
    return text.replace("\u2212", "-").replace("\\$", "").replace("\\%", "").replace("$", "").replace("%", "")


def first_number(text: str | None) -> str | None:
    """The first number in `text`, as written minus `$`, `%` and thousands commas ("1,234.50" -> "1234.50")."""
    match = NUMBER_RE.search(_clean(text)) if text else None
    return match.group().replace(",", "") if match else None


def last_number(text: str | None) -> str | None:
    """The last number in `text` (same form as `first_number`)."""
    matches = NUMBER_RE.findall(_clean(text)) if text else None
    return matches[-1].replace(",", "") if matches else None


def extract_numeric(text: str) -> tuple[str | None, str | None]:
    """(the final numeric answer, how it was found) from a model reply, or (None, None).

    Order (the first kind that yields a number wins; within a kind, the LAST occurrence):
    1. `#### N` (GSM8K's own marker); 2. "The answer is N" / "answer: N" (the chain-of-thought
    convention, "final answer is" included); 3. `\\boxed{N}` (a simple `\\frac{a}{b}` inside is
    evaluated); 4. the last number anywhere in the text.
    """
    for marker, method in ((_MARKER, "####"), (_ANSWER_IS, "answer is")):
        for match in reversed(list(marker.finditer(text))):
            rest = text[match.end() :].split("\n", 1)[0]  # the rest of that line, up to the next marker
            nxt = marker.search(rest)
            if (n := first_number(rest[: nxt.start()] if nxt else rest)) is not None:
                return n, method
    for match in reversed(_BOXED.findall(text)):
        if frac := _FRAC.search(match):
            value = float(frac.group(1)) / float(frac.group(2))
            return (str(int(value)) if value.is_integer() else repr(value)), "boxed"
        if (n := first_number(match)) is not None:
            return n, "boxed"
    n = last_number(text)
    return (n, "last number") if n is not None else (None, None)


def numbers_equal(a: str | None, b: str | None) -> bool:
    """Numeric equality of two answers ("3.50" == "3.5", "1,000" == "1000"); False if either is not a number."""
    a, b = first_number(a), first_number(b)
    if a is None or b is None:
        return False
    x, y = float(a), float(b)  # first_number's digits always parse
    return abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))


# --- multiple-choice letters (the BYO `choice` scorer) -----------------------------------------

_CHOICE_PATTERNS = (
    r"(?i:answer)\s*(?:is|:)\s*:?\s*\(?([{L}])\)?(?![\w])",  # "The answer is (B)", "Answer: B"
    r"####\s*\(?([{L}])\)?(?![\w])",  # "#### B"
    r"\\boxed\s*\{\s*\(?([{L}])\)?\s*\}",  # "\boxed{B}"
    r"^\s*\(?([{L}])\)?\s*[.):]?\s*$",  # a reply that is only the letter
    r"(?<![\w])\(([{L}])\)",  # "(B)" anywhere
    r"(?<![\w'])([{L}])(?![\w'])",  # a lone capital letter anywhere
)


def extract_choice(text: str, n_choices: int) -> str | None:
    """The chosen letter (A, B, …) for `n_choices` options, or None.

    Order: "answer is X" / "answer: X", then `#### X`, then `\\boxed{X}`, then a reply that is just
    the letter, then "(X)", then a lone capital letter; the last match of the first kind found wins.
    """
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: max(1, min(n_choices, 26))]
    for pattern in _CHOICE_PATTERNS:
        if matches := re.findall(pattern.replace("{L}", letters), text, re.MULTILINE):
            return matches[-1].upper()
    return None


_PUNCT = re.compile(r"[^\w\s]")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalize_text(text: str) -> str:
    """`normalize`, then (for non-numbers) punctuation and the articles a/an/the dropped, as in
    SQuAD/TriviaQA's answer matching: "The Indian Ocean." == "indian ocean"."""
    text = normalize(text)
    if _NUMBER.fullmatch(text):
        return text
    return " ".join(_ARTICLES.sub(" ", _PUNCT.sub(" ", text)).split())
