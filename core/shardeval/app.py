"""Where this shardeval runs from: a shiv zipapp (`dist/shardeval.pyz`) or an installed package.

One answer for everything that depends on it: `process.self_command` (how to start this same
shardeval again) and `shardeval plugins install` (pip `--target` into the plugin directory,
pinned to the bundled versions, or plain pip into the running environment). Stdlib only.
"""

from __future__ import annotations

import os
import sys
import zipfile
from functools import lru_cache
from typing import Any, Literal

import shardeval
from shardeval.errors import UsageError

INSTALL_MODE_ENV = "SHARDEVAL_INSTALL_MODE"


def zipapp_path() -> str | None:
    """The zipapp this process runs from, or None for an installed package.

    shiv runs `python shardeval.pyz`, so `sys.argv[0]` is the zip file, and the app's packages
    (shardeval among them) live in one site-packages directory that shiv extracted from it.
    """
    entry = sys.argv[0] if sys.argv else ""
    return os.path.abspath(entry) if entry and os.path.isfile(entry) and zipfile.is_zipfile(entry) else None


@lru_cache(maxsize=1)
def app_site_packages() -> str:
    """The directory holding shardeval's own distribution: in a zipapp, the extracted
    site-packages with every bundled distribution; in a venv, that venv's site-packages."""
    from importlib import metadata

    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(shardeval.__file__)))
    if any(True for _ in metadata.distributions(name="shardeval", path=[package_parent])):
        return os.path.realpath(package_parent)
    # An editable install: the package is in the source tree, the dist-info an installer wrote
    # (with a RECORD, unlike a stray shardeval.egg-info in the source tree) in site-packages.
    for dist in metadata.distributions(name="shardeval"):
        if dist.read_text("RECORD") is not None and (location := dist_location(dist)):
            return location
    return os.path.realpath(package_parent)


def dist_location(dist: Any) -> str | None:
    """The directory holding a distribution's metadata (a site-packages, the plugin dir), or None."""
    try:
        return os.path.realpath(str(dist.locate_file("")))
    except (NotImplementedError, AttributeError, TypeError):
        return None


def install_mode() -> Literal["target", "pip"]:
    """`target`: plugins go into the plugin directory (the zipapp); `pip`: into the running
    environment (the pip-installed package). SHARDEVAL_INSTALL_MODE=target|pip forces one."""
    forced = os.environ.get(INSTALL_MODE_ENV, "").strip().lower()
    if forced in ("target", "pip"):
        return forced  # type: ignore[return-value]
    if forced:
        raise UsageError(f"{INSTALL_MODE_ENV}={forced!r}: expected `target` or `pip` (or unset it)")
    return "target" if zipapp_path() else "pip"
