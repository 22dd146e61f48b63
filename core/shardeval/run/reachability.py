"""Fail fast on an endpoint that is unreachable from the start.

Without this, a shard pointed at a dead endpoint (a wrong URL, a server that never came up) asks
every one of its pairs, each through all its retry attempts, records them all as `connection`
errors and ends `complete` with exit 0: a SLURM array burns its allocation and looks fine. The
rule: when the first N requests of this run to a service all end as `connection` errors, and none
got any answer, the endpoint is judged unreachable and the shard stops as failed. N is the
service's `unreachable_after` (default 8, 0: never), capped at the number of pairs the shard asks,
so a small shard is judged on all of its requests. Any other outcome (an answer, an HTTP error
status, a timeout waiting for a reply) proves the endpoint reachable, and from then on connection
errors are only records, as before. A stream the server cut is a `connection` error too: a server
that cuts every stream from the start is as useless as a dead one, and the reason quotes the last
error, which says which it was.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Reachability:
    """The first outcomes of one service's requests in this run, until it proves reachable."""

    url: str
    limit: int  # trip after this many connection errors in a row from the start; 0: never
    failures: int = 0
    reachable: bool = False

    def observe(self, status: str, error_kind: str | None, error: str | None) -> str | None:
        """Count one finished request; return the failure reason when the endpoint is judged
        unreachable (exactly once), else None."""
        if self.reachable or self.limit <= 0 or self.failures >= self.limit or error_kind == "internal":
            return None  # an `internal` error asked nothing of the endpoint: it says nothing either way
        if status == "ok" or error_kind != "connection":
            self.reachable = True
            return None
        self.failures += 1
        if self.failures < self.limit:
            return None
        return (
            f"{self.url} is unreachable: the first {self.failures} request(s) all failed to connect, after every retry "
            f"(last: {error or 'no detail'}); check the URL and that the server is up, then rerun the shard "
            "(`unreachable_after: 0` on the service turns this check off)"
        )
