"""Quoting what users wrote (ids, categories, benchmark, model and service names, paths) into the
text reports: report.md, sweep.md, compare's Markdown, and status's plain-text table.

A name is data, never layout: a `|` in a category must not add a column to report.md's table, a
line break must not end a row or start a heading, a backtick must not open a code span, `<script>`
must not become HTML where the Markdown is rendered. `md_text` is the one function every Markdown
table cell and heading uses; `plain_text` does the same for text tables read in a terminal.
"""

from __future__ import annotations

import re

# Characters that mean something inline in (GitHub-flavoured) Markdown, escaped with a backslash
# (CommonMark: any ASCII punctuation may be). `|` ends a table cell even inside a code span in GFM,
# so it is escaped everywhere; `#` everywhere (a heading's trailing ` #` is its closing sequence);
# `_` only where it could open or close emphasis (a word's edge: `gsm8k_cot` stays as it is).
_MD_PUNCT = re.compile(r"[\\`*\[\]<>&|~#]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
# Line breaks and other controls, shown as what they are: C0 and DEL as their Control Pictures
# (U+2400..), the others that some reader may break a line on as \uXXXX.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\x80-\x9f\u2028\u2029]")


def _picture(match: re.Match[str]) -> str:
    c = ord(match.group())
    if c < 0x20:
        return chr(0x2400 + c)
    return "\u2421" if c == 0x7F else f"\\u{c:04x}"


def plain_text(value: object) -> str:
    """`value` as one line of a terminal table: line breaks, tabs and other controls shown as symbols
    (a newline as ␊), so a name cannot end a row or move the cursor."""
    return _CONTROL.sub(_picture, str(value))


def md_text(value: object) -> str:
    """`value` as inert Markdown on one line, for a table cell or a heading: it renders as the text
    itself (controls as symbols, as plain_text), never as a column, a line, markup or HTML."""
    return _MD_PUNCT.sub(lambda m: "\\" + m.group(), plain_text(value))
