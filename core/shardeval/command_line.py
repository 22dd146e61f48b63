"""What every shardeval command line shares, so a plugin's own entry point (`python -m
shardeval_ray`) takes the same evaluation options and fails the same way as `shardeval run`.

`evaluation_options` is the config argument and the quick-mode flags, `override_option` the `-O`
flag, `run_cli` the one-line errors. click, shardeval.errors and shardeval.closed_output only: `--version` imports this.
"""

from __future__ import annotations

import sys
from typing import TypeVar
from collections.abc import Callable

import click

from shardeval.closed_output import outlive_readers
from shardeval.errors import ShardError, UsageError

F = TypeVar("F", bound=Callable[..., object])

_EVALUATION_OPTIONS = (  # in the order --help lists them
    click.argument("config_path", required=False, metavar="[CONFIG.yaml]"),
    click.option("--bench", help="Quick mode: benchmark name or path/to/file.jsonl."),
    click.option("--model-url", help="Quick mode: OpenAI-compatible base URL (…/v1) or full endpoint URL."),
    click.option("--model-id", help="Quick mode: the served model name."),
    click.option("--api-key-env", help="Name of the environment variable holding the API key (never the key)."),
    click.option("-n", "--repeats", type=int, help="Times each problem is asked."),
    click.option("--max-problems", type=int, help="Evaluate only the first N problems."),
    click.option("--max-concurrent", type=int, help="Requests in flight per shard."),
    click.option(
        "--reasoning-effort",
        type=click.Choice(["low", "medium", "high"]),
        help="Reasoning models: how hard to think (reasoning.effort; docs/reasoning.md).",
    ),
    click.option(
        "--no-thinking", is_flag=True, default=None, help="Reasoning models: ask the server not to think (reasoning.enable: false)."
    ),
)


def evaluation_options(command: F) -> F:
    """`[CONFIG.yaml]` and the quick-mode flags of `shardeval run`: config_path, then bench,
    model_url, model_id, api_key_env, repeats, max_problems, max_concurrent, reasoning_effort, no_thinking as keyword arguments
    (None when not given), the shape `load_config(config_path, overrides, quick)` takes."""
    for decorator in reversed(_EVALUATION_OPTIONS):
        command = decorator(command)
    return command


override_option = click.option("-O", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help="Override a config value.")
"""`-O KEY.PATH=VALUE`, repeatable: the `overrides` argument, a tuple of strings for load_config."""


# click >= 8.2 raises this (a UsageError) for a group run bare, to show its help; older click has none
_HELP_AS_ERROR = getattr(click.exceptions, "NoArgsIsHelpError", ())


def run_cli(command: click.Command, argv: list[str] | None, prog_name: str) -> None:
    """Run a click command the shardeval way: user mistakes become one line and exit 2, an
    infrastructure failure one line and exit 1, Ctrl-C exit 130, never a traceback for any of them;
    a reader of its output that goes away (`| tee` killed by the same Ctrl-C, `| head`) ends none of it."""
    outlive_readers()
    try:
        command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except (UsageError, ShardError) as exc:
        from shardeval.redact import redact_urls  # not at the top: it loads logging, which --version need not

        click.echo(f"shardeval: error: {redact_urls(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("shardeval: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:  # a bad flag or value: click's own words (which name the range or choices), one line
        if isinstance(exc, _HELP_AS_ERROR):  # a group run with no command: its help, as click shows it
            exc.show()
            sys.exit(exc.exit_code)
        where = exc.ctx.command_path if exc.ctx is not None else prog_name
        message = " ".join(exc.format_message().split())
        click.echo(f"shardeval: error: {message} (see '{where} --help')", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
