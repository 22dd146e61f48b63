"""Where shardeval keeps what it fetches or builds once per node: data files, images from URLs."""

from __future__ import annotations

import os

DOWNLOADS_ENV = "SHARDEVAL_CACHE_DIR"  # the download cache's variable, under the name users already set


def downloads_dir() -> str:
    """The download cache: what shardeval fetches or builds once per node and reuses (data files
    from a URL, package data of a zip-imported package).
    `$SHARDEVAL_CACHE_DIR`, else platformdirs' user cache dir for shardeval. Not the response
    cache (`cache.dir`, shardeval.run.response_cache), which holds model answers."""
    from platformdirs import user_cache_dir

    return os.environ.get(DOWNLOADS_ENV) or user_cache_dir("shardeval")


PREPARED_ENV = "SHARDEVAL_PREPARED"  # a prepared shard's preparation cache (shardeval.store.prepared)
# what a fetch that failed says to a node without internet (docs/offline.md)
PREPARE_HINT = "prepare the run where the network is (`shardeval prepare CONFIG -o OUT`, docs/offline.md)"
PREPARING_ENV = "SHARDEVAL_PREPARING"  # set while `shardeval prepare` builds the benchmarks (fetch what a shard reads)


def preparing() -> bool:
    """Whether `shardeval prepare` is building the benchmarks now: what a shard would read from an
    installed package or the hub is then kept in the download cache (the preparation) too."""
    return os.environ.get(PREPARING_ENV) == "1"


def prepared() -> bool:
    """Whether this process is a prepared shard (its download cache is the preparation's)."""
    return bool(os.environ.get(PREPARED_ENV))


class PrepareContext:
    """What `Benchmark.prepare` is given (`shardeval prepare`, on a host with the network): a
    folder per key for what the benchmark needs later offline (a task's datasets, a tokenizer, a
    plan), kept under the preparation's cache and checksummed with it."""

    def __init__(self, cache_dir: str) -> None:
        self.cache_dir = cache_dir

    def folder(self, key: str) -> str:
        """The folder for `key` (made if missing): the same key finds it again in a shard (`prepared_folder`)."""
        path = os.path.join(self.cache_dir, "plugins", key)
        os.makedirs(path, exist_ok=True)
        return path


def prepared_folder(key: str) -> str | None:
    """In a prepared shard, the folder `PrepareContext.folder(key)` made; None when the run was not
    prepared (or nothing was kept under that key): the benchmark then fetches as it always did."""
    cache = os.environ.get(PREPARED_ENV)
    path = os.path.join(cache, "plugins", key) if cache else None
    return path if path is not None and os.path.isdir(path) else None
