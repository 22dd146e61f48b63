"""Every guarantee names tests that exist (issue 41, points 5 and acceptance: "no guarantee is lost").

docs/guarantees.md lists under each guarantee the tests that hold it, one per line:
`- tests/FILE.py::test_name[params] (a note)`. A renamed or removed test would leave a guarantee
naming nothing; this reads every such line and finds the file and the function.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from conftest import REPO

GUARANTEES = Path(REPO) / "docs" / "guarantees.md"
REFERENCE = re.compile(r"^- (tests/[\w/]+\.py)::(\w+)")


@cache
def functions(path: str) -> frozenset[str]:
    tree = ast.parse((Path(REPO) / path).read_text(encoding="utf-8"))
    return frozenset(n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def references() -> list[tuple[int, str, str]]:
    return [
        (number, m.group(1), m.group(2))
        for number, line in enumerate(GUARANTEES.read_text().splitlines(), 1)
        if (m := REFERENCE.match(line))
    ]


def test_every_test_a_guarantee_names_exists() -> None:
    found = references()
    assert len(found) > 400  # the page's lists are read, not skipped
    missing = [
        f"docs/guarantees.md:{n}: {path}::{name}"
        for n, path, name in found
        if not (Path(REPO) / path).is_file() or name not in functions(path)
    ]
    assert not missing, "\n".join(missing)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_changelog_links_every_section_of_the_page_by_its_anchor() -> None:
    """docs/changelog.md keeps which work brought which section; the page is ordered by subject."""
    headings = {slug(line.lstrip("#")) for line in GUARANTEES.read_text().splitlines() if line.startswith("### ")}
    linked = re.findall(r"\]\(guarantees\.md#([\w-]+)\)", (GUARANTEES.parent / "changelog.md").read_text())
    assert sorted(linked) == sorted(headings)


def test_each_guarantee_has_its_own_name() -> None:
    """Issue 41, point 5: each guarantee once. A name such as `I3` used by two sections (as the
    inputs' and Inspect's once were) makes a reference ambiguous: every bold name is unique."""
    names = re.findall(r"^\*\*([A-Z]+\d+[a-z]?)\.", GUARANTEES.read_text(), flags=re.MULTILINE)
    assert len(names) > 200
    assert sorted(n for n in set(names) if names.count(n) > 1) == []
