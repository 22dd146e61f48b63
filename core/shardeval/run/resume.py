"""Deciding whether an output directory can be resumed, and setting old results aside on --fresh.

Resume is the default: same config hash, same shard, same data → append to what is there.
Anything else is refused with the reason, and nothing is deleted: --fresh moves the earlier files
into `superseded/<time>/` inside the shard directory (merge ignores that folder).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from shardeval.config import Config
from shardeval.config.loading import config_for_manifest
from shardeval.config.diff import summary
from shardeval.errors import UsageError, os_error
from shardeval.identity import identity_changes
from shardeval.store.discover import SUPERSEDED_DIR
from shardeval.store.liveness import ShardLease
from shardeval.store.records import HEARTBEAT_FILE, LOCK_FILE, Manifest, ServedModel, read_manifest

log = logging.getLogger("shardeval")
# The running writer's own files (shardeval.store.liveness): never set aside. A moved lock file would
# let a second process lock a new one at the same path.
KEPT_IN_PLACE = {SUPERSEDED_DIR, LOCK_FILE, HEARTBEAT_FILE}


def mismatch(old: Manifest, new: Manifest) -> str | None:
    """Why results written under `old` cannot be continued under `new` (None: they can)."""
    if old.config_hash != new.config_hash:
        return another_config(old, new.config_hash, new.config)
    if (old.shard_idx, old.total_shards) != (new.shard_idx, new.total_shards):
        return f"it holds shard {old.shard_idx}/{old.total_shards}, this run is shard {new.shard_idx}/{new.total_shards}"
    old_b = {b.name: b for b in old.benchmarks}
    versions = f"written by shardeval {old.version}, this is {new.version}"
    for b in new.benchmarks:
        prev = old_b.get(b.name)
        if prev and prev.dataset_fingerprint != b.dataset_fingerprint:
            return f"benchmark {b.name}'s data changed ({prev.dataset_fingerprint} → {b.dataset_fingerprint})"
        if prev and tuple(prev.range) != tuple(b.range):
            return f"benchmark {b.name}'s problem range changed ({list(prev.range)} → {list(b.range)})"
        if prev and prev.prompt_fingerprint != b.prompt_fingerprint:
            change = f"{prev.prompt_fingerprint} → {b.prompt_fingerprint}; {versions}"
            return f"benchmark {b.name}'s prompts are rendered differently ({change})"
        if prev and prev.scorer_fingerprint != b.scorer_fingerprint:
            change = f"{prev.scorer_fingerprint} → {b.scorer_fingerprint}; {versions}"
            return f"benchmark {b.name} is scored differently ({change})"
    return None


def another_config(old: Manifest, new_hash: str, new_config: dict[str, Any]) -> str:
    """Why a directory written under another config hash is another run: what changed, key by
    key, as far as the recorded configs say (shardeval.identity.identity_changes), then the two hashes."""
    found = identity_changes(old.config, new_config) if old.config and new_config else []
    changed = f", changed: {summary(found)}" if found else ""
    return f"it holds another run (config {old.config_hash}, this config is {new_hash}){changed}"


def served_mismatch(old: Manifest, served: dict[str, ServedModel]) -> str | None:
    """Why results written against `old.served` cannot be continued against what the endpoints
    report now (None: they can, or one side could not be read and there is nothing to compare)."""
    for name, now in served.items():
        before = old.served.get(name)
        if before is None or before.identity() is None or now.identity() is None:
            continue
        if before.identity() != now.identity():
            return f"service {name!r} served {before.describe()} when it was written, and now serves {now.describe()}"
    return None


def refuse(out_dir: str, reason: str) -> UsageError:
    return UsageError(
        f"{out_dir} cannot be resumed: {reason}; rerun with the original config and model, choose another -o, "
        f"or pass --fresh to move the old results into {os.path.join(out_dir, SUPERSEDED_DIR)}/"
    )


def prepare_output_dir(out_dir: str, manifest: Manifest, fresh: bool) -> Manifest | None:
    """Make `out_dir` ready for `manifest`: new, resumable, or (with fresh) its old files set aside.

    Returns the manifest being resumed (None for a new or fresh directory): what it says the
    endpoints served is checked once they are up (`served_mismatch`), and carried on until then.
    The directory exists already: the shard made it to take its lease (`make_output_dir`).
    """
    old = read_manifest(out_dir)
    if old is not None and fresh:
        check_set_aside(out_dir)
        set_aside(out_dir)
        return None
    if old is not None and (reason := mismatch(old, manifest)):
        raise refuse(out_dir, reason)
    return old


def check_submission(
    root: str,
    config_hash: str,
    total: int,
    config: Config | None = None,
    *,
    started: str = "nothing submitted (every task would fail after queueing)",
) -> None:
    """Before an orchestrator submits shards into `root` (and before `run` starts any shard):
    refuse, in one line, a root whose shard directories hold another run (another config hash or
    shard count), which every shard would refuse to resume only after starting, while the merge
    after them reported the old run as this one. `config` (this run's Config) names what changed
    key by key. Reads manifests only, never the benchmarks' data (it may live on the nodes
    alone). --fresh sets such results aside instead."""
    if not os.path.isdir(root):
        return
    plain = config_for_manifest(config) if config is not None else {}
    for _, shard in shard_dirs(root):
        old = read_manifest(shard)
        assert old is not None  # shard_dirs lists only directories that hold one
        if old.config_hash != config_hash:
            reason = another_config(old, config_hash, plain)
        elif old.total_shards != total:
            reason = f"it holds shard {old.shard_idx}/{old.total_shards}, this run has {total} shards"
        else:
            continue
        raise UsageError(
            f"{shard} cannot be resumed: {reason}; {started}: "
            f"rerun with the original config, choose another -o, or pass --fresh to move the old results into "
            f"{os.path.join(root, 'shard_*', SUPERSEDED_DIR)}/"
        )


def make_output_dir(out_dir: str) -> None:
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UsageError(f"-o {out_dir}: exists and is not a directory; choose a directory path")
    os.makedirs(out_dir, exist_ok=True)


def shard_dirs(root: str) -> list[tuple[int, str]]:
    """Every `shard_<i>` directory under `root` that holds a manifest, by index: (i, path). Those
    past this run's shard count too: an earlier run with more shards left them, and a merge would
    read them beside this run's."""
    if not os.path.isdir(root):
        return []
    found = []
    for entry in os.listdir(root):
        path = os.path.join(root, entry)
        if entry.startswith("shard_") and entry[6:].isdigit() and os.path.isdir(path) and read_manifest(path) is not None:
            found.append((int(entry[6:]), path))
    return sorted(found)


def set_aside_shards(root: str) -> list[tuple[int, str]]:
    """--fresh on an orchestrator's driver, once for the run (a retried or requeued task must then
    resume, not start over again): take every shard directory's lease first, so a shard still
    being written (by hand, by an earlier job) refuses in one line naming its writer and nothing
    moves; then move each one's results aside, logging where: every `shard_<i>` (shard_dirs), so
    the shards an earlier run had beyond this run's count go too. Returns (shard index, where they went)."""
    shards = shard_dirs(root)
    leases: list[ShardLease] = []
    try:
        for _, path in shards:
            lease = ShardLease(path)
            lease.acquire()
            leases.append(lease)
        for _, path in shards:  # every one can be moved, before any is
            check_set_aside(path)
        moved = [(i, set_aside(path)) for i, path in shards]
        for i, where in moved:
            log.info("--fresh: earlier results of shard_%d moved to %s", i, where)
        return moved
    except OSError as exc:
        raise os_error(exc, "move aside the earlier results in", alternative="give this run another -o") from None
    finally:
        for lease in leases:
            lease.release()


def check_set_aside(out_dir: str) -> None:
    """--fresh, before anything moves: that `out_dir`'s results can be moved into its
    superseded/ (a superseded that is not a directory, a directory that cannot be written),
    one line, exit 2; nothing is left behind."""
    import tempfile

    target = os.path.join(out_dir, SUPERSEDED_DIR)
    if os.path.lexists(target) and not os.path.isdir(target):
        raise UsageError(
            f"--fresh: cannot move the earlier results of {out_dir} aside: {target} is not a directory; "
            "remove or rename it, or give this run another -o"
        )
    try:
        os.rmdir(tempfile.mkdtemp(dir=target if os.path.isdir(target) else out_dir, prefix=".fresh-"))
    except OSError as exc:
        raise os_error(exc, "move the earlier results aside in", alternative="give this run another -o") from None


def set_aside(out_dir: str) -> str:
    """Move everything in `out_dir` (but earlier superseded runs and the writer's lock and
    heartbeat) into superseded/<UTC time>/."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = os.path.join(out_dir, SUPERSEDED_DIR, stamp)
    n = 1
    while os.path.exists(target):
        n += 1
        target = os.path.join(out_dir, SUPERSEDED_DIR, f"{stamp}-{n}")
    os.makedirs(target)
    for entry in os.listdir(out_dir):
        if entry not in KEPT_IN_PLACE:
            os.replace(os.path.join(out_dir, entry), os.path.join(target, entry))
    return target
