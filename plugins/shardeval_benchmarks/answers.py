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
    if text is None:
        return None
    match = _NUMBER.search(text.replace("$", ""))
    if not match:
        return None
    try:
        return float(match.group().replace(",", ""))
    except ValueError:
        return None
