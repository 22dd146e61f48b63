"""A shard's images.jsonl: one small embedded copy of every distinct image it sent, per benchmark.

The merge may run where the images are not (another node, generated images never written), yet
report.html should show a reader what the model saw. So the shard that read the bytes keeps a
thumbnail of each (shardeval.benchmark.images.thumbnail: 96 px, at most 8 KiB), once per digest:
a rerun appends only images the file does not have yet.
"""

from __future__ import annotations

import logging
import os
from typing import BinaryIO

import msgspec

from shardeval.benchmark.images import ImageStore, thumbnail
from shardeval.store.records import IMAGES_FILE, ImageThumbnail
from shardeval.store.regular import append_line, open_append, open_regular

log = logging.getLogger("shardeval.run.thumbnails")


def written_digests(path: str) -> set[str]:
    """The digests an images.jsonl already holds (torn or foreign lines are passed over)."""
    seen: set[str] = set()
    try:
        f = open_regular(path)
    except FileNotFoundError:
        return seen
    decoder = msgspec.json.Decoder(ImageThumbnail)
    with f:
        for line in f:
            try:
                seen.add(decoder.decode(line).sha256)
            except msgspec.DecodeError:
                continue
    return seen


class ThumbnailLog:
    """Appends the thumbnails of images the store encoded since the last call, each digest once."""

    def __init__(self, bench_dir: str, store: ImageStore) -> None:
        self.path = os.path.join(bench_dir, IMAGES_FILE)
        self.store = store
        self.seen = written_digests(self.path)
        self.file: BinaryIO = open_append(self.path, buffering=0)
        store.want_thumbnails = True
        store.take_thumbnails()  # another benchmark's, if any: not this file's

    def write_new(self) -> None:
        """Raises OSError when the line cannot be written (the caller stops the shard, as for a record)."""
        for ref, data in self.store.take_thumbnails():
            if ref.sha256 in self.seen:
                continue
            small = thumbnail(data)
            line = ImageThumbnail(
                sha256=ref.sha256,
                name=ref.name,
                bytes=ref.bytes,
                width=ref.width,
                height=ref.height,
                mime=ref.mime,
                thumbnail=small[0] if small else None,
                thumb_width=small[1] if small else 0,
                thumb_height=small[2] if small else 0,
            )
            append_line(self.file, msgspec.json.encode(line) + b"\n")
            self.seen.add(ref.sha256)

    def close(self) -> None:
        self.store.want_thumbnails = False
        self.store.take_thumbnails()
        self.file.close()
