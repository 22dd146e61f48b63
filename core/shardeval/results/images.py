"""The thumbnails a page shows: read back from the shards' images.jsonl, only the digests asked for.

Each shard keeps one small embedded copy of every distinct image it sent
(shardeval.run.thumbnails); a run of a million images holds a million of them, and a page shows a
few dozen. So the reader passes over each line by its digest alone and decodes whole only the
lines asked for: memory holds the asked thumbnails, never the file. Lines that are torn, not JSON,
or absurdly long are passed over, as every reader of shard files does; a shard without the file
has no thumbnails, which is no error (text benchmarks, shards from before images).
"""

from __future__ import annotations

import os
from typing import BinaryIO
from collections.abc import Iterable, Iterator

import msgspec

from shardeval.results.merge import MergeResult
from shardeval.store.records import IMAGES_FILE, ImageThumbnail
from shardeval.store.regular import open_regular

# A thumbnail is at most 8 KiB (about 11,000 characters as base64) and a name is a path or a URL:
# a longer line is no line a shard writes, and is skipped without being held whole.
MAX_LINE = 256 * 1024


class _Digest(msgspec.Struct):
    """What deciding whether a line is wanted needs; the thumbnail's text is skipped unread."""

    sha256: str


def shard_dirs(source: MergeResult | Iterable[str | os.PathLike[str]]) -> list[str]:
    """The shard directories of a merge (in its order), or the given ones."""
    if isinstance(source, MergeResult):
        return [shard.abspath for shard in source.run.shards]
    return [os.fspath(path) for path in source]


def read_thumbnails(
    source: MergeResult | Iterable[str | os.PathLike[str]], benchmark: str, digests: Iterable[str]
) -> dict[str, ImageThumbnail]:
    """{digest: its images.jsonl line} for the asked `digests` found in `benchmark`'s folder of the
    shards of `source` (a MergeResult, or shard directories). A line that has a thumbnail is
    preferred to one that has none (a shard may have failed to make one another made); the first
    such line stands. Digests found nowhere are absent from the answer."""
    wanted = set(digests)
    found: dict[str, ImageThumbnail] = {}
    if not wanted:
        return found
    peek = msgspec.json.Decoder(_Digest).decode
    whole = msgspec.json.Decoder(ImageThumbnail).decode
    for shard in shard_dirs(source):
        for line in _lines(os.path.join(shard, benchmark, IMAGES_FILE)):
            try:
                digest = peek(line).sha256
                if digest not in wanted:
                    continue
                thumb = whole(line)
            except (ValueError, RecursionError):  # not JSON, not a thumbnail line, not UTF-8
                continue
            if digest not in found or (found[digest].thumbnail is None and thumb.thumbnail is not None):
                found[digest] = thumb
            if thumb.thumbnail is not None:
                wanted.discard(digest)  # nothing better can come
                if not wanted:
                    return found
    return found


def _lines(path: str) -> Iterator[bytes]:
    """The whole lines of the file at `path`, none longer than MAX_LINE (a torn last line is not
    one); nothing when there is no file or it cannot be read: thumbnails only decorate a page."""
    try:
        with open_regular(path) as f:
            yield from _bounded_lines(f)
    except OSError:  # FileNotFoundError (no images in that shard), a FIFO, a directory, an I/O error
        return


def _bounded_lines(f: BinaryIO) -> Iterator[bytes]:
    while line := f.readline(MAX_LINE):
        if line[-1:] == b"\n":
            yield line
        elif len(line) < MAX_LINE:
            return  # a torn last line: an interrupted write
        else:  # over MAX_LINE: read past the rest of it, a bounded piece at a time
            while (rest := f.readline(MAX_LINE)) and rest[-1:] != b"\n":
                pass
