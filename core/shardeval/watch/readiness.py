"""When a checkpoint is whole: what the folder holds now, and whether its `ready` rule holds.

A trainer writes a checkpoint over seconds to minutes, often copies it (slowly, byte by byte),
sometimes under a temporary name it renames at the end. Evaluating it early would serve half a
model. The rule (`sweep.checkpoints.ready`, shardeval.config.schema.ReadyConfig) says when it is
whole: the file the trainer writes last is there (`marker`), and/or nothing in the folder changed
for `quiet_s`. "Changed" is the newest of every file's and folder's mtime and ctime: a copy that
keeps the source's mtimes (`cp -p`, `rsync -a`) still moves the ctime, which no one can set.

The snapshot's fingerprint (every file's name, size and mtime) is the checkpoint's identity on
disk: the same name with other bytes (a checkpoint rewritten in place) has another fingerprint.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from dataclasses import dataclass

from shardeval.config.schema import ReadyConfig


@dataclass(frozen=True)
class Snapshot:
    """A checkpoint folder as it is now."""

    exists: bool
    files: int = 0
    newest_change: float = 0.0  # the latest mtime or ctime of anything in it
    fingerprint: str = ""  # sha256 of (path, size, mtime_ns) of every file, sorted
    marker: bool = False  # the rule's marker file is there


def snapshot(path: str, marker: str | None) -> Snapshot:
    """Walk the folder once (a file path is a checkpoint of one file); a folder that vanishes
    while it is walked is reported as gone."""
    if not os.path.exists(path):
        return Snapshot(exists=False)
    entries: list[tuple[str, int, int]] = []
    newest = 0.0
    try:
        if os.path.isdir(path):
            for folder, dirs, names in os.walk(path, onerror=_raise):
                dirs.sort()
                info = os.stat(folder)
                newest = max(newest, info.st_mtime, info.st_ctime)
                for name in sorted(names):
                    full = os.path.join(folder, name)
                    info = os.stat(full, follow_symlinks=True)
                    newest = max(newest, info.st_mtime, info.st_ctime)
                    entries.append((os.path.relpath(full, path), info.st_size, info.st_mtime_ns))
        else:
            info = os.stat(path)
            newest = max(info.st_mtime, info.st_ctime)
            entries.append((os.path.basename(path), info.st_size, info.st_mtime_ns))
    except FileNotFoundError:  # deleted (or renamed) while we looked: not whole, maybe gone
        return Snapshot(exists=os.path.exists(path))
    digest = hashlib.sha256()
    for name, size, mtime in sorted(entries):
        digest.update(f"{name}\0{size}\0{mtime}\n".encode())
    has_marker = marker is not None and os.path.exists(os.path.join(path, marker))
    return Snapshot(True, len(entries), newest, digest.hexdigest()[:16], has_marker)


def _raise(exc: OSError) -> None:
    raise exc


def is_temporary(path: str, rule: ReadyConfig) -> bool:
    """A name the trainer writes under before it renames the checkpoint (`.step5`, `step5.tmp`)."""
    name = os.path.basename(os.path.normpath(path))
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in rule.ignore)


def waiting_for(snap: Snapshot, rule: ReadyConfig, now: float) -> str | None:
    """What the checkpoint still waits for, in words for status; None once the rule holds."""
    if not snap.exists:
        return "the folder is gone"
    if snap.files == 0:
        return "no file in it yet"
    if rule.marker is not None and not snap.marker:
        return f"no {rule.marker} yet"
    quiet = rule.quiet()
    if quiet is not None and (age := now - snap.newest_change) < quiet:
        return f"changed {max(age, 0.0):.0f} s ago (ready after {quiet:g} s without a change)"
    return None
