"""A mistake on the command line is one line and exit 2, for every command (present and future).

click printed its usage errors as four lines (usage, a hint, a blank, the error); run_cli now
prints click's own message, which names the flag, the value and the allowed range or choices, on
one line with the command's --help. The commands are walked from the CLI itself, so a command
added later is held to it without a new test.
"""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from conftest import shardeval_cmd
from shardeval.cli import cli


def command_paths(cmd: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group under `cmd`, as the words that call it."""
    found = [path] if path else []
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            found += command_paths(cmd.get_command(ctx, name), (*path, name))
    return found


def assert_one_line(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("shardeval: error: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert all(n in r.stderr for n in needles), r.stderr


@pytest.mark.parametrize("path", command_paths(cli), ids=" ".join)
def test_an_unknown_option_is_one_line_for_every_command(path: tuple[str, ...]) -> None:
    assert_one_line(shardeval_cmd(*path, "--no-such-flag"), "No such option '--no-such-flag'", f"see 'shardeval {' '.join(path)} --help'")


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["merge", "RUN", "--confidence", "2"], ["'--confidence': 2.0 is not in the range 0.5<=x<=0.999"]),
        (["status", "RUN", "--serve", "--interval", "0"], ["'--interval': 0.0 is not in the range"]),
        (["status", "RUN", "--serve", "--port", "70000"], ["'--port': 70000 is not in the range 0<=x<=65535"]),
        (["export", "RUN", "-o", "x.csv", "--format", "xml"], ["--format xml", "parquet, csv or jsonl"]),
        (["merge"], ["Missing argument 'RUN_DIR'", "see 'shardeval merge --help'"]),
        (["exprt"], ["No such command 'exprt'", "Did you mean 'export'?", "see 'shardeval --help'"]),
        (["run", "--fres"], ["No such option '--fres'", "--fresh"]),
    ],
)
def test_a_bad_value_names_the_flag_the_value_and_what_is_allowed(tmp_path, argv: list[str], needles: list[str]) -> None:
    (tmp_path / "RUN").mkdir()
    r = shardeval_cmd(*argv, cwd=str(tmp_path))
    assert_one_line(r, *needles)


def test_the_ray_entry_point_too() -> None:
    r = subprocess.run([sys.executable, "-m", "shardeval_ray", "--shards", "x"], capture_output=True, text=True, timeout=60)
    assert_one_line(r, "'--shards': 'x' is not a valid integer", "see 'python -m shardeval_ray --help'")


def test_bare_shardeval_still_shows_its_help() -> None:
    r = shardeval_cmd()
    assert "Usage: shardeval [OPTIONS] COMMAND" in r.stdout + r.stderr and "merge" in r.stdout + r.stderr
    assert "shardeval: error" not in r.stderr
