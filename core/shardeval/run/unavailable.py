"""A cell whose model cannot be served at all: every pair it would ask ends in an error naming why.

Issue 42: a checkpoint the trainer deleted before its evaluation (shardeval.config.sweep's
`Sweep.gone`) is reported, not retried forever. Its shard (ShardRun with `unavailable`) starts no
service and asks nothing; each pair without an ok record gets an error record of kind
`checkpoint_gone` with the reason as its text, so the merge says ERRORS naming the kind, the shard
ends `finished_with_errors` (exit 3) as one whose pairs all failed does, and a rerun once the
checkpoint is back asks those pairs as any error pairs are asked again. Records only: no request
was made, so no trajectory is written.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from shardeval.run.completion import Completion
from shardeval.store.records import RESULTS_FILE, ResultRecord, encode_line
from shardeval.store.regular import append_line, open_append

CHECKPOINT_GONE = "checkpoint_gone"  # the error kind of a pair whose checkpoint was deleted before it was asked


def gone_completion(reason: str) -> Completion:
    """What each pair of a deleted checkpoint got: an error of kind CHECKPOINT_GONE naming `reason`,
    with no attempt made (nothing was sent)."""
    return Completion(status="error", error_kind=CHECKPOINT_GONE, error=reason, started_at=time.time())


def append_records(bench_dir: str, records: Iterable[ResultRecord], count: Callable[[ResultRecord], None]) -> int:
    """Append each record to the benchmark's results file, one line each as the runner writes them,
    and `count` it once it is on disk; returns how many. Raises OSError when one cannot be written
    (the shard fails, as for any write)."""
    written = 0
    os.makedirs(bench_dir, exist_ok=True)
    with open_append(os.path.join(bench_dir, RESULTS_FILE), buffering=0) as results:
        for record in records:
            append_line(results, encode_line(record))
            count(record)
            written += 1
    return written
