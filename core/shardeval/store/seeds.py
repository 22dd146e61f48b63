"""Per-request seeds: a function of (run seed, benchmark, problem id, repeat), never of the shard.

That is what makes a run split into any number of shards byte-identical to the unsplit run on a
deterministic server.
"""

from __future__ import annotations

import hashlib


def request_seed(run_seed: int, benchmark: str, problem_id: str, repeat: int) -> int:
    """A stable 31-bit seed (servers commonly reject seeds >= 2**31)."""
    digest = hashlib.blake2b(f"{run_seed}\x1f{benchmark}\x1f{problem_id}\x1f{repeat}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF
