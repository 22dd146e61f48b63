"""`benchmarks[].params` of `inspect`: which Inspect task, its arguments, and Inspect's per-sample limits.

The names are Inspect's own (`inspect eval TASK -T key=value --message-limit N ...`), so a command line
a team already has reads across. `repeats` (the benchmark's, not a param) is Inspect's `--epochs`.
"""

from __future__ import annotations

import json
from typing import Any

from shardeval.api.benchmark import ParamsStruct
from shardeval.api.plugin import Count, UsageError

EXTRA = "pip install 'shardeval[inspect]' (the one file: shardeval plugins install 'inspect-ai>=0.3.285,<0.3.300' 'openai>=1.40')"
SANDBOXES = ("docker", "local")


class InspectParams(ParamsStruct):
    task: str  # `path/to/tasks.py@my_task`, `path/to/tasks.py` (its one task), or a registered name
    task_args: dict[str, Any] = {}  # as `inspect eval -T key=value`
    message_limit: Count | None = None
    token_limit: Count | None = None
    time_limit: Count | None = None  # seconds of wall clock per sample
    working_limit: Count | None = None  # seconds of working time per sample (waits on rate limits excluded)
    sandbox: str | None = None  # as `inspect eval --sandbox`: `docker`, `local` or `docker:compose.yaml`; None: the task's
    fail_on_error: bool = False  # Inspect's default is to stop a run at its first sample error; shardeval records it

    def identity(self) -> str:
        """What changes the task's answers or scores, as stable JSON (joins the dataset fingerprint)."""
        return json.dumps({name: getattr(self, name) for name in self.__struct_fields__}, sort_keys=True, default=str)

    def limits(self) -> dict[str, Any]:
        """The limits as `inspect_ai.eval` takes them (unset ones left to the task)."""
        keys = ("message_limit", "token_limit", "time_limit", "working_limit")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


def require_inspect() -> str:
    """inspect_ai's version; a one-line error naming the extra when it is not installed."""
    from importlib import import_module
    from importlib.metadata import version

    try:
        import_module("inspect_ai")
    except ImportError:
        raise UsageError(f"benchmark inspect: Inspect AI is not installed; {EXTRA}") from None
    return version("inspect_ai")
