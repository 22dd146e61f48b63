"""The keys of an `export: [{to: inspect, dir: ...}]` entry and of `export --to inspect -o DIR`."""

from __future__ import annotations

import os

from shardeval.api.exporter import ExportConfig
from shardeval.api.plugin import UsageError
from shardeval.api.records import refuse_inside_shard

from shardeval_inspect.params import EXTRA


class InspectExportConfig(ExportConfig):
    dir: str  # where the .eval logs go: DIR/<benchmark>.eval, a sweep's DIR/<model>/<benchmark>.eval

    def check(self) -> None:
        """Before any merge: Inspect is installed, and DIR is a folder outside every shard directory."""
        import importlib.util

        if importlib.util.find_spec("inspect_ai") is None:
            raise UsageError(f"--to inspect needs Inspect AI, which is not installed: {EXTRA}")
        if not self.dir:
            raise UsageError("--to inspect: -o DIR (dir:) is empty; give the folder the .eval logs go to")
        if os.path.exists(self.dir) and not os.path.isdir(self.dir):
            raise UsageError(f"--to inspect -o {self.dir}: a file, not a folder; give a folder for the .eval logs (made if missing)")
        refuse_inside_shard(self.dir, "--to inspect -o")
