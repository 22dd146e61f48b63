"""User-facing failures: one line, exit code 2, never a traceback.

Anything a user can fix (a config key, an environment variable, a path) raises `UsageError`;
the CLI prints its message as a single line and exits 2. Infrastructure failures during a run are
recorded per request instead and never reach here.
"""

from __future__ import annotations


class UsageError(Exception):
    """A mistake in the user's input: the message names the thing, the value and the fix."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()) if "\n" not in message else message.replace("\n", " "))


class ShardError(Exception):
    """A shard could not run to completion for a reason outside the user's input (exit 1)."""

    exit_code = 1
