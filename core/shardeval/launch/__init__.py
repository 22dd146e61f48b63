"""`shardeval run`, from the command line to a shard or an orchestrator.

dispatch: load the config, pick the shard, then run it or hand off; orchestrator: what a
`cluster.type` plugin receives; lifecycle: the phases it fills, run by the core in order; cell: one
cell run in this process (a Ray task); preflight: what is checked once before any shard starts. This
module only sets up the log (for `run`, `rescore` and the Ray entry point): an orchestrator plugin
imports `orchestrator` when it loads, which must not load the runner.
"""

from __future__ import annotations

import logging
import sys

from shardeval.redact import RedactingFilter

log = logging.getLogger("shardeval")


def setup_logging() -> None:
    if log.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("shardeval: %(message)s"))
    handler.addFilter(RedactingFilter())  # no URL credentials in a log line
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
