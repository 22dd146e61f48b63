"""shardeval.api.records: the files a run writes, read back, and a command's own outputs (numbers
written as every output writes them). The names and what each is for are listed once in
shardeval/api/roles.py (docs/plugins.md shows them); a name loads its core module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.roles import serve

if TYPE_CHECKING:  # made from shardeval/api/roles.py by scripts/dev/api_roles_rewrite.py --blocks
    from shardeval.store.records import (
        ResultRecord as ResultRecord,
        TrajectoryRecord as TrajectoryRecord,
        ImageInfo as ImageInfo,
        ImageThumbnail as ImageThumbnail,
        SweepPlan as SweepPlan,
        RESULTS_FILE as RESULTS_FILE,
        TRAJECTORIES_FILE as TRAJECTORIES_FILE,
        read_manifest as read_manifest,
    )
    from shardeval.results.merge import MergeResult as MergeResult, merge_run as merge_run
    from shardeval.results.gate_report import scores_digest as scores_digest
    from shardeval.results.export import load_run as load_run
    from shardeval.store.regular import open_regular as open_regular, read_regular as read_regular
    from shardeval.store.atomic import atomic_write as atomic_write, check_output as check_output
    from shardeval.store.discover import refuse_inside_shard as refuse_inside_shard, read_plan as read_plan, model_roots as model_roots
    from shardeval.results.quoting import md_text as md_text
    from shardeval.numbers import percent as percent, finite_number as finite_number
    from shardeval.results.report import fmt as fmt, fmt_p as fmt_p
else:  # type checkers read the imports above; at run time each name is imported on first use
    __getattr__, __dir__, __all__ = serve("records")
