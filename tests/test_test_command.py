"""The test command's own rules (scripts/test.sh, tests/conftest.py): what runs together, what is quick."""

from __future__ import annotations

from pathlib import Path

from conftest import SERIAL, SHARED, SLOW, group_of

TESTS = Path(__file__).resolve().parent


def test_every_file_a_shared_group_names_exists_and_is_named_once() -> None:
    names = [name for group in SHARED.values() for name in group] + list(SERIAL)
    assert len(names) == len(set(names)), names
    assert [name for name in names if not (TESTS / name).is_file()] == []


def test_every_slow_file_exists() -> None:
    assert [name for name in SLOW if not (TESTS / name).is_file()] == []


def test_a_shared_group_is_one_scope_for_the_workers_and_any_other_file_its_own() -> None:
    assert group_of("tests/test_docker.py::test_a") == group_of("tests/test_compose.py::test_b[x]") == "docker"
    assert group_of("tests/test_records.py::test_round_trip") == "test_records.py"
