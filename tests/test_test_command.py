"""The test command's own rules (scripts/test.sh, tests/conftest.py): what runs together, what is quick."""

from __future__ import annotations

from pathlib import Path

from conftest import SERIAL, SHARED

TESTS = Path(__file__).resolve().parent


def test_every_file_a_shared_group_names_exists_and_is_named_once() -> None:
    names = [name for group in SHARED.values() for name in group] + list(SERIAL)
    assert len(names) == len(set(names)), names
    assert [name for name in names if not (TESTS / name).is_file()] == []
