"""Shard math and shard detection: which slice of a benchmark this process evaluates.

Pure functions over the standard library, so they run (and are tested) anywhere. A problem is
identified by its index in the benchmark's canonical order; shard i of S over N problems gets a
contiguous range in which the first N mod S shards hold one extra problem. All repeats of a problem
live in its shard, so per-request seeds never depend on the shard.

Detection reads, in order: the `--shard I/N` flag, NEL_SHARD_IDX/NEL_TOTAL_SHARDS (NeMo
Evaluator's names), a SLURM array task, a Kubernetes Indexed Job completion index, and torchrun's
RANK/WORLD_SIZE. A bad value is a one-line `UsageError` naming the variable, its value and the fix.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from collections.abc import Mapping

from shardeval.errors import UsageError

_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class ShardSpec:
    """The selected shard and the variables it came from (printed once, so a log says why)."""

    idx: int
    total: int
    source: str

    def describe(self) -> str:
        return f"shard {self.idx}/{self.total} (from {self.source})"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def shard_range(n: int, idx: int, total: int) -> tuple[int, int]:
    """[start, end) of shard idx of total over n problems; the first n % total shards get one more."""
    if not _is_int(n) or n < 0:
        raise UsageError(f"n={n!r} is not a problem count: it must be an integer >= 0")
    if not _is_int(total) or total < 1:
        raise UsageError(f"total={total!r} is not a shard count: it must be an integer >= 1")
    if not _is_int(idx) or not 0 <= idx < total:
        raise UsageError(f"idx={idx!r} is out of range for total={total}: use 0..{total - 1}")
    q, r = divmod(n, total)
    return idx * q + min(idx, r), (idx + 1) * q + min(idx + 1, r)


def shard_indices(n: int, idx: int, total: int, shuffle_seed: int | None = None) -> range | list[int]:
    """The problem indices of one shard, ascending.

    With a seed, problems are permuted (random.Random(seed).shuffle) before splitting, so long and
    short problems spread evenly over shards; the same seed gives the same split on every node.
    """
    start, end = shard_range(n, idx, total)
    if shuffle_seed is None:
        return range(start, end)
    if not _is_int(shuffle_seed):
        raise UsageError(f"shuffle_seed={shuffle_seed!r} is not an integer: use an integer or leave it unset")
    order = list(range(n))
    random.Random(shuffle_seed).shuffle(order)
    return sorted(order[start:end])


# --- detection ---------------------------------------------------------------------------------


def _integer(name: str, raw: str, fix: str) -> int:
    """Parse an integer variable strictly: '1.5', 'abc', '' and '1_000' are errors, not guesses."""
    text = raw.strip()
    if not _INTEGER.fullmatch(text):
        raise UsageError(f"{name}={raw!r} is not an integer: {fix}")
    return int(text)


def _total(name: str, raw: str) -> int:
    total = _integer(name, raw, f"set it to the number of shards, e.g. {name}=4")
    if total < 1:
        raise UsageError(f"{name}={raw} is invalid: the number of shards must be >= 1, e.g. {name}=4")
    return total


def _index(name: str, raw: str, total: int, total_label: str) -> ShardSpec:
    """The shard that `name=raw` selects out of `total` (which `total_label` names)."""
    idx = _integer(name, raw, f"set it to the 0-based shard index, 0..{total - 1}")
    if not 0 <= idx < total:
        raise UsageError(f"{name}={raw} is out of range for {total_label}: use 0..{total - 1}")
    return ShardSpec(idx, total, f"{name}={raw}, {total_label}")


def _from_flag(flag: str) -> ShardSpec:
    left, sep, right = flag.partition("/")
    if not (sep and _INTEGER.fullmatch(left.strip()) and _INTEGER.fullmatch(right.strip())):
        raise UsageError(f"--shard {flag!r} is not I/N: give the 0-based shard index and the number of shards, e.g. --shard 0/4")
    idx, total = int(left), int(right)
    if total < 1:
        raise UsageError(f"--shard {flag} is invalid: the number of shards N must be >= 1, e.g. --shard 0/4")
    if not 0 <= idx < total:
        raise UsageError(f"--shard {flag} is out of range: the shard index must be 0..{total - 1}")
    return ShardSpec(idx, total, f"--shard {idx}/{total}")


def _from_index(env: Mapping[str, str], name: str, config_total: int | None) -> ShardSpec:
    """A source that gives only an index: the shard count is NEL_TOTAL_SHARDS, else cluster.shards."""
    raw = env[name]
    if "NEL_TOTAL_SHARDS" in env:
        raw_total = env["NEL_TOTAL_SHARDS"]
        return _index(name, raw, _total("NEL_TOTAL_SHARDS", raw_total), f"NEL_TOTAL_SHARDS={raw_total}")
    if config_total is None:
        raise UsageError(f"{name}={raw} is set but the number of shards is not: set NEL_TOTAL_SHARDS or cluster.shards in the config")
    if not _is_int(config_total) or config_total < 1:
        raise UsageError(f"cluster.shards={config_total!r} is invalid: the number of shards must be >= 1")
    return _index(name, raw, config_total, f"cluster.shards={config_total}")


def _from_slurm(env: Mapping[str, str]) -> ShardSpec:
    """Map an array task to 0..COUNT-1, so --array=1-16 and --array=0-30:2 both work."""
    raw_id = env["SLURM_ARRAY_TASK_ID"]
    task_id = _integer("SLURM_ARRAY_TASK_ID", raw_id, "run inside a SLURM array job or set NEL_SHARD_IDX")
    if "SLURM_ARRAY_TASK_COUNT" not in env:
        raise UsageError(
            f"SLURM_ARRAY_TASK_ID={raw_id} is set but SLURM_ARRAY_TASK_COUNT is not: "
            "set NEL_SHARD_IDX and NEL_TOTAL_SHARDS, or pass --shard I/N"
        )
    raw_count = env["SLURM_ARRAY_TASK_COUNT"]
    count = _total("SLURM_ARRAY_TASK_COUNT", raw_count)
    raw_min, raw_step = env.get("SLURM_ARRAY_TASK_MIN", "0"), env.get("SLURM_ARRAY_TASK_STEP", "1")
    low = _integer("SLURM_ARRAY_TASK_MIN", raw_min, "it should be the array's first task id")
    step = _integer("SLURM_ARRAY_TASK_STEP", raw_step, "it should be the array's step")
    if step < 1:
        raise UsageError(f"SLURM_ARRAY_TASK_STEP={raw_step} is invalid: the array step must be >= 1")
    offset = task_id - low
    label = f"SLURM_ARRAY_TASK_ID={raw_id}, SLURM_ARRAY_TASK_MIN={raw_min}, SLURM_ARRAY_TASK_STEP={raw_step}"
    if offset % step or not 0 <= offset // step < count:
        raise UsageError(
            f"{label} does not map to a shard 0..{count - 1} of SLURM_ARRAY_TASK_COUNT={raw_count}: "
            f"submit an evenly spaced array such as --array=0-{count - 1}"
        )
    return ShardSpec(offset // step, count, f"{label}, SLURM_ARRAY_TASK_COUNT={raw_count}")


def detect_shard(flag: str | None, env: Mapping[str, str], config_total: int | None = None) -> ShardSpec | None:
    """Which shard this process runs, or None when nothing selects one (the orchestrator takes over).

    `config_total` is `cluster.shards`: the count for sources that give only an index. A variable
    that is present counts as set, even when empty (an empty value is an error, not "unset").
    """
    if flag is not None:
        return _from_flag(flag)
    if "NEL_SHARD_IDX" in env:
        return _from_index(env, "NEL_SHARD_IDX", config_total)
    if "SLURM_ARRAY_TASK_ID" in env:
        return _from_slurm(env)
    if "JOB_COMPLETION_INDEX" in env:
        return _from_index(env, "JOB_COMPLETION_INDEX", config_total)
    if "RANK" in env and "WORLD_SIZE" in env:  # torchrun
        raw_size = env["WORLD_SIZE"]
        return _index("RANK", env["RANK"], _total("WORLD_SIZE", raw_size), f"WORLD_SIZE={raw_size}")
    if "NEL_TOTAL_SHARDS" in env:
        raw = env["NEL_TOTAL_SHARDS"]
        raise UsageError(
            f"NEL_TOTAL_SHARDS={raw} is set but NEL_SHARD_IDX is not: set NEL_SHARD_IDX to this shard's "
            "0-based index, or unset NEL_TOTAL_SHARDS to run the whole evaluation"
        )
    return None
