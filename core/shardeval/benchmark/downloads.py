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
