"""The pages' JavaScript: Vega, Vega-Lite and vega-embed, pinned in vega.lock.json, shipped as
package data (vendor/*.js) so a page draws its charts with nothing installed at run time and
nothing fetched at view time.

`fetch` runs at build time (build/build.sh, scripts/setup/vega.sh): it downloads each package's
tarball from the npm registry, checks it against the lock's integrity hash, and takes the one
browser build (a UMD script defining the global `vega`, `vegaLite` or `vegaEmbed`) into vendor/.
`javascript()` runs at page time and only reads those files. Standard library only: it runs
before any dependency is installed.

    python plugins/shardeval_pages/vendor.py fetch    # or: python -m shardeval_pages.vendor fetch
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = "vega.lock.json"
VENDOR = "vendor"
PACKAGE = "shardeval_pages"
REGISTRY = "https://registry.npmjs.org/"
FETCH_COMMAND = "python plugins/shardeval_pages/vendor.py fetch"
# The one line a page's writer prints when the files are not there (a source tree never fetched).
MISSING = f"the charts' JavaScript is not in {PACKAGE}/{VENDOR}/: run `{FETCH_COMMAND}` in the source tree"


class BundleMissing(Exception):
    """A vendored file is not there (a source checkout that never ran the fetch)."""


class IntegrityMismatch(Exception):
    """A tarball is not the one the lock pins: refused, nothing written."""


@dataclass(frozen=True)
class Pinned:
    """One lock entry: which tarball, its registry integrity, and the file taken from it."""

    name: str
    version: str
    tarball: str
    integrity: str  # "sha512-<base64>", as the registry's dist.integrity
    file: str  # the browser build's path inside the tarball

    @property
    def vendored(self) -> str:
        """Its name under vendor/."""
        return self.file.rsplit("/", 1)[-1]


def pinned(lock_text: str) -> list[Pinned]:
    """The lock's packages, in load order."""
    entries = json.loads(lock_text)["packages"]
    return [Pinned(**{key: entry[key] for key in ("name", "version", "tarball", "integrity", "file")}) for entry in entries]


@lru_cache(maxsize=1)
def javascript() -> str:
    """The three scripts, in load order, as one text for a page's single inline <script>.

    Read from the installed package's data (a checkout, a wheel, the one file's extracted
    site-packages alike); read once per process, as every page of a merge inlines the same text.
    """
    package = resources.files(PACKAGE)
    parts = []
    for entry in pinned(package.joinpath(LOCK).read_text(encoding="utf-8")):
        try:
            parts.append(package.joinpath(VENDOR).joinpath(entry.vendored).read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError):
            raise BundleMissing(MISSING) from None
    # Each file may end in a `//` comment (its source map): a line break keeps the next one code.
    return "\n".join(parts)


# What follows is the build-time fetch; its imports (urllib, tarfile: about 15 ms) wait for it.


def integrity_of(data: bytes) -> str:
    import base64
    import hashlib

    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def default_cache() -> Path:
    return Path(os.environ.get("SHARDEVAL_CI_CACHE") or "/var/cache/shardeval-ci") / "npm"


def tarball(entry: Pinned, cache: Path) -> bytes:
    """The entry's tarball, checked: from the cache when it holds the right one, else downloaded
    (and then cached, so a second build is offline)."""
    cached = cache / entry.tarball.rsplit("/", 1)[-1]
    try:
        data = cached.read_bytes()
        if integrity_of(data) == entry.integrity:
            return data
    except OSError:
        pass
    if not entry.tarball.startswith(REGISTRY):
        raise IntegrityMismatch(f"{entry.name} {entry.version}: tarball {entry.tarball} is not on {REGISTRY}")
    import urllib.request

    with urllib.request.urlopen(entry.tarball, timeout=120) as response:
        data = response.read()
    got = integrity_of(data)
    if got != entry.integrity:
        raise IntegrityMismatch(f"{entry.name} {entry.version}: downloaded {got}, lock says {entry.integrity}; refused")
    try:
        write_atomic(cached, data)
    except OSError:  # a cache that cannot be written costs the next build a download, never this one
        pass
    return data


def member(data: bytes, entry: Pinned) -> bytes:
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        try:
            info = archive.getmember(entry.file)
        except KeyError:
            raise BundleMissing(f"{entry.name} {entry.version}: the tarball has no {entry.file}") from None
        handle = archive.extractfile(info) if info.isfile() else None
        if handle is None:
            raise BundleMissing(f"{entry.name} {entry.version}: {entry.file} in the tarball is not a file")
        return handle.read()


def write_atomic(path: Path, data: bytes) -> None:
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def fetch(root: Path = HERE, cache: Path | None = None) -> list[str]:
    """Bring root/vendor/ in line with root/vega.lock.json; returns one line per package.

    Idempotent: each file is compared with what its checked tarball holds and written only when
    it differs; tarballs come from `cache` when there (offline), else from the registry.
    """
    cache = cache or default_cache()
    lines = []
    for entry in pinned((root / LOCK).read_text(encoding="utf-8")):
        content = member(tarball(entry, cache), entry)
        target = root / VENDOR / entry.vendored
        try:
            same = target.read_bytes() == content
        except OSError:
            same = False
        if not same:
            write_atomic(target, content)
        lines.append(f"{entry.name} {entry.version}: {VENDOR}/{entry.vendored} {'up to date' if same else 'written'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Vendor the pages' JavaScript pinned in vega.lock.json.")
    parser.add_argument("command", choices=["fetch"])
    parser.add_argument(
        "--cache", type=Path, default=None, help="where tarballs are kept (default ${SHARDEVAL_CI_CACHE:-/var/cache/shardeval-ci}/npm)"
    )
    args = parser.parse_args(argv)
    try:
        for line in fetch(cache=args.cache):
            print(f"vendor: {line}", file=sys.stderr)
    except (IntegrityMismatch, BundleMissing, OSError) as error:
        print(f"vendor: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
