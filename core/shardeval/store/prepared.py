"""A run prepared once, where the network is: <out>/prepared/preparation.json (docs/offline.md).

`shardeval prepare` (or a cluster launch, on the submitting host) fetches what the run's shards
would fetch from outside (data files from URLs, images, a plugin's own needs such as a task's
datasets and tokenizer) into the preparation's cache, and writes what it planned: per benchmark
the canonical problem list's size and fingerprints. Every file is listed with its size and sha256,
so a shard on a node without internet verifies what it will read and plans nothing differently.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass

import msgspec

from shardeval.errors import UsageError
from shardeval.store.atomic import atomic_write
from shardeval.store.records import pretty_json
from shardeval.store.regular import read_regular

PREPARED_DIR = "prepared"
PREPARATION_FILE = "preparation.json"
PREPARED_ENV = "SHARDEVAL_PREPARED"  # set in a prepared shard: the preparation's folder (plugins read theirs there)
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
HOW = "run `shardeval prepare CONFIG -o OUT` where the network is (a login node), then the shards with the same -o OUT"


class PreparedFile(msgspec.Struct, kw_only=True, frozen=True):
    path: str  # relative to the cache folder
    bytes: int
    sha256: str


class PreparedBenchmark(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What one benchmark of the run was planned as: a shard's own plan must be this one."""

    name: str
    n_problems: int
    dataset_fingerprint: str
    prompt_fingerprint: str | None = None
    plan: str | None = None  # a plugin's own plan hash (lm-eval's request bodies), when it has one


class Preparation(msgspec.Struct, kw_only=True, omit_defaults=True):
    version: str
    prepared_at: float
    host: str
    cache_dir: str  # where the fetched files are (absolute): <out>/prepared/cache or prepare.cache_dir
    config_hash: str  # the run's identity when it was prepared
    # The cache's path relative to the run's root when it lies inside it (the default one,
    # prepared/cache): read_preparation then finds it under the root it was found at, so a node
    # that mounts the run elsewhere (a container's /results) reads it there, not at cache_dir.
    cache_in_root: str | None = None
    benchmarks: list[PreparedBenchmark] = []
    files: list[PreparedFile] = []

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)


def preparation_dir(root: str) -> str:
    return os.path.join(root, PREPARED_DIR)


def _read_as_written(root: str) -> tuple[bytes, Preparation] | None:
    path = os.path.join(preparation_dir(root), PREPARATION_FILE)
    try:
        text = read_regular(path)
        return text, msgspec.json.decode(text, type=Preparation)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def read_preparation(root: str) -> Preparation | None:
    """The preparation of the run at `root`, None when there is none (or it cannot be read); a
    cache inside the run (cache_in_root) is the one under `root`, wherever the run was prepared."""
    read = _read_as_written(root)
    if read is None:
        return None
    found = read[1]
    if found.cache_in_root is not None:
        found.cache_dir = os.path.join(os.path.abspath(root), found.cache_in_root)
    return found


def write_preparation(root: str, preparation: Preparation) -> str:
    path = os.path.join(preparation_dir(root), PREPARATION_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, pretty_json(preparation))
    return path


def list_files(cache_dir: str) -> list[PreparedFile]:
    """Every regular file under the cache folder with its size and sha256 (lock files left out)."""
    found = []
    for folder, dirs, names in os.walk(cache_dir):
        dirs.sort()
        for name in sorted(names):
            if name.endswith(".lock"):
                continue
            full = os.path.join(folder, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            found.append(PreparedFile(path=os.path.relpath(full, cache_dir), bytes=os.path.getsize(full), sha256=file_sha256(full)))
    return found


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def verify(preparation: Preparation) -> str | None:
    """Why the prepared files cannot be trusted here (missing, resized or changed), or None."""
    for f in preparation.files:
        path = os.path.join(preparation.cache_dir, f.path)
        try:
            size = os.path.getsize(path)
        except OSError:
            return f"{path} is missing"
        if size != f.bytes or file_sha256(path) != f.sha256:
            return f"{path} is not the file prepared ({f.bytes} bytes, sha256 {f.sha256[:12]}…)"
    return None


def new_preparation(version: str, host: str, cache_dir: str, config_hash: str, root: str | None = None) -> Preparation:
    """A preparation of the run at `root` (when given, a cache inside it is recorded relative to it)."""
    cache_dir = os.path.abspath(cache_dir)
    inside = os.path.relpath(cache_dir, os.path.abspath(root)) if root is not None else None
    return Preparation(
        version=version,
        prepared_at=time.time(),
        host=host,
        cache_dir=cache_dir,
        config_hash=config_hash,
        cache_in_root=inside if inside is not None and inside != os.pardir and not inside.startswith(os.pardir + os.sep) else None,
    )


@dataclass(frozen=True)
class PortablePreparation:
    """A run's preparation as a copy of its root elsewhere holds it (portable_preparation)."""

    index: bytes  # preparation.json as the copy reads it
    index_path: str  # its path under the root: prepared/preparation.json
    files: list[tuple[str, str, str]]  # every prepared file: (its path under the root, its path here, its sha256)
    size: int  # the files' bytes together


def portable_preparation(root: str) -> PortablePreparation | None:
    """The preparation of the run at `root`, for an orchestrator that copies it where its nodes read
    the run (a Kubernetes claim the submitting host does not see): the cache goes under
    prepared/cache of the copy wherever it lies here (`prepare.cache_dir` included), and the index
    says so (cache_in_root), so a shard verifies the copy as it would the original. The index's
    bytes depend on the preparation alone (not on where this root is), so an orchestrator can tell
    a copy that holds this very preparation by comparing them. Every file is verified first (one
    line, exit 2, when one changed). None: the run is not prepared."""
    read = _read_as_written(root)
    found = read_preparation(root)
    if read is None or found is None:
        return None
    if (why := verify(found)) is not None:
        raise UsageError(f"the run's preparation ({preparation_dir(root)}) cannot be copied to the nodes: {why}; {HOW} again")
    text, written = read
    inside = os.path.join(PREPARED_DIR, "cache")
    if written.cache_in_root != inside:  # a cache outside the root (prepare.cache_dir): the copy holds it inside
        text = pretty_json(msgspec.structs.replace(written, cache_in_root=inside))
    files = [(os.path.join(inside, f.path), os.path.join(found.cache_dir, f.path), f.sha256) for f in found.files]
    return PortablePreparation(text, os.path.join(PREPARED_DIR, PREPARATION_FILE), files, found.bytes)


def planned_otherwise(preparation: Preparation, name: str, n_problems: int, fingerprint: str, prompt_fingerprint: str | None) -> str | None:
    """Why a shard's plan of benchmark `name` is not the prepared one (None: it is)."""
    prepared = next((b for b in preparation.benchmarks if b.name == name), None)
    if prepared is None:
        return f"benchmark {name} is not in the run's preparation; {HOW} again"
    if (n_problems, fingerprint, prompt_fingerprint) != (prepared.n_problems, prepared.dataset_fingerprint, prepared.prompt_fingerprint):
        return (
            f"benchmark {name}: this shard plans {n_problems} problems (data {fingerprint}), the preparation "
            f"{prepared.n_problems} (data {prepared.dataset_fingerprint}): the config or its data changed since; {HOW} again"
        )
    return None
