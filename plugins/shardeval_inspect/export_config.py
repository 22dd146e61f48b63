"""The keys of an `export: [{to: inspect, dir: ...}]` entry and of `export --to inspect -o DIR`."""

from __future__ import annotations

from shardeval.api import ExportConfig, UsageError

from shardeval_inspect.params import EXTRA


class InspectExportConfig(ExportConfig):
    dir: str  # where the .eval logs go: DIR/<benchmark>.eval, a sweep's DIR/<model>/<benchmark>.eval

    def check(self) -> None:
        """Before any merge: Inspect is installed."""
        import importlib.util

        if importlib.util.find_spec("inspect_ai") is None:
            raise UsageError(f"--to inspect needs Inspect AI, which is not installed: {EXTRA}")
