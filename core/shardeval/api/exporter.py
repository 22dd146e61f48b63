"""shardeval.api.exporter: what an export target needs: a merged run or sweep as tracker runs
(MLflow, W&B, Inspect logs). The names and what each is for are listed once in
shardeval/api/roles.py (docs/plugins.md shows them); a name loads its core module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.roles import serve

if TYPE_CHECKING:  # made from shardeval/api/roles.py by scripts/dev/api_roles_rewrite.py --blocks
    from shardeval.config import ExportConfig as ExportConfig
    from shardeval.results.trackers import TrackerExport as TrackerExport, TrackerRun as TrackerRun
else:  # type checkers read the imports above; at run time each name is imported on first use
    __getattr__, __dir__, __all__ = serve("exporter")
