"""The simulator "loads its weights" (`--weights-log PATH`): it reads every file under `--root`
at start-up and records what it read, as one JSON line appended to PATH.

So a test can prove which bytes each simulated server was started on (a checkpoint served before
it was whole shows digests that differ from the finished folder's), and a checkpoint that is gone
or broken fails the start as vLLM fails on weights it cannot load: exit 1, one line, nothing logged.
Stdlib only: it runs before the server (and aiohttp) is loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from shardeval.api.plugin import ShardError

CHUNK = 1 << 20  # bytes read at a time, so a large shard file is never held whole


def load_weights(root: str | None, log_path: str) -> dict[str, object]:
    """Read every regular file under `root` (recursively, in sorted order; a symlink to a file is
    read through it, as a model loader would) and append the line
    `{"root", "at", "pid", "files": {relative path: sha256}}` to `log_path` with one write, so
    several simulators can share the file. `at` is when the reading ended: the weights are loaded.
    Raises ShardError (exit 1, one line naming the folder) when there is nothing to load or a
    `config.json` that no loader could parse; then nothing is appended."""
    if root is None:
        raise ShardError("--weights-log needs --root: the folder of the weights to load")
    if not os.path.isdir(root):
        raise ShardError(f"cannot load the weights at {root}: no such folder")
    try:
        check_config(root)
        files = digest_files(root)
    except OSError as exc:  # a file that went away or cannot be read while loading
        raise ShardError(f"cannot load the weights at {root}: {exc.filename or ''}: {exc.strerror or exc}") from None
    entry = {"root": root, "at": time.time(), "pid": os.getpid(), "files": files}
    line = (json.dumps(entry) + "\n").encode()
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write on an O_APPEND file: lines of several simulators never interleave
        finally:
            os.close(fd)
    except OSError as exc:
        raise ShardError(f"--weights-log {log_path}: cannot append to it: {exc.strerror or exc}") from None
    return entry


def digest_files(root: str) -> dict[str, str]:
    """{path relative to `root`, with `/`: sha256 hex of its bytes} for every regular file below it."""
    found: list[str] = []
    for folder, dirs, names in os.walk(root, onerror=_raise):
        dirs.sort()
        found += [os.path.join(folder, name) for name in names if os.path.isfile(os.path.join(folder, name))]
    out: dict[str, str] = {}
    for path in sorted(found, key=lambda p: os.path.relpath(p, root).replace(os.sep, "/")):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(CHUNK):
                digest.update(block)
        out[os.path.relpath(path, root).replace(os.sep, "/")] = digest.hexdigest()
    return out


def check_config(root: str) -> None:
    """A `config.json` at the top of the folder must be JSON, as every model loader reads it first."""
    path = os.path.join(root, "config.json")
    if not os.path.isfile(path):
        return
    with open(path, "rb") as f:
        raw = f.read()
    try:
        json.loads(raw)
    except ValueError as exc:
        raise ShardError(f"cannot load the weights at {root}: config.json is not valid JSON: {exc}") from None


def _raise(exc: OSError) -> None:
    raise exc
