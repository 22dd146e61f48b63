"""First run on a node: unpack this target's share of the zipapp's payload, exactly once.

Stored at the root of dist/shardeval.pyz as `_shardeval_extract.py`; imported by the entry
preamble only when the extracted folder is missing. The payload (`payload.zip`, stored
uncompressed inside the outer archive) holds site-packages/ for every target plus variants/GROUP/
for files only some targets have; shardeval-build.json says which targets each group serves.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PAYLOAD = "payload.zip"
SITE = "site-packages/"
VARIANTS = "variants/"


def destination(name: str, info: dict, target: str) -> str | None:
    """Where this payload member goes on this node (relative to the extraction folder), or None.

    site-packages/ goes everywhere; variants/GROUP/ (extensions, grafted libraries, files that
    differ by target) only to the targets in that group; a .pyc only to the Python it is for.
    """
    if name.endswith("/"):
        return None
    if name.startswith(VARIANTS):
        folder, _, rel = name[len(VARIANTS) :].partition("/")
        if target not in info["variants"].get(folder, ()):
            return None
        name = SITE + rel
    elif not name.startswith(SITE):
        return None
    if name.endswith(".pyc") and not name.endswith(f".cpython-{target.partition('-')[0][2:]}.pyc"):
        return None
    return name


class _Window(io.RawIOBase):
    """A read-only view of bytes [start, start+size) of a file: the stored payload, in place."""

    def __init__(self, path: str, start: int, size: int) -> None:
        self._f = open(path, "rb")
        self._start, self._size, self._pos = start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, min(self._size, base + offset))
        return self._pos

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self._size - self._pos)
        if want <= 0:
            return 0
        self._f.seek(self._start + self._pos)
        got = self._f.readinto(memoryview(buffer)[:want])
        self._pos += got
        return got

    def close(self) -> None:
        self._f.close()
        super().close()


def open_payload(archive: str) -> zipfile.ZipFile:
    """The inner zip, read in place from the outer file (it is stored, so its bytes are there)."""
    with zipfile.ZipFile(archive) as outer:
        info = outer.getinfo(PAYLOAD)
        with open(archive, "rb") as f:  # the local header's name/extra lengths locate the data
            f.seek(info.header_offset + 26)
            name_len, extra_len = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
        start = info.header_offset + 30 + name_len + extra_len
    return zipfile.ZipFile(io.BufferedReader(_Window(archive, start, info.file_size), 1 << 20))


def _write_share(archive: str, share: list, into: Path) -> None:
    with open_payload(archive) as payload:
        for member, rel in share:
            dest = into / rel
            with payload.open(member) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            if mode := (member.external_attr >> 16) & 0o777:
                os.chmod(dest, mode)


def extract(archive: str, target_dir: str, info: dict, target: str) -> None:
    """Extract this target's members to `target_dir`, once per node, however many tasks start.

    One task holds an exclusive lock and extracts into a private temporary folder, which is renamed
    into place when complete; the others wait on the lock and then find the folder there.
    A crash leaves only a temporary folder behind, never a half-filled target.
    """
    import fcntl

    final = Path(target_dir)
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.exists():
            return
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
        with open_payload(archive) as payload:
            todo = [(m, rel) for m in payload.infolist() if (rel := destination(m.filename, info, target))]
        for folder in sorted({os.path.dirname(rel) for _, rel in todo}):
            os.makedirs(tmp / folder, exist_ok=True)
        # Inflating is most of the work and zlib releases the GIL: split the members, largest
        # first, over a few threads, each with its own handle on the payload.
        todo.sort(key=lambda item: -item[0].file_size)
        workers = max(1, min(4, os.cpu_count() or 1))
        with ThreadPoolExecutor(workers) as pool:
            for done in [pool.submit(_write_share, archive, todo[i::workers], tmp) for i in range(workers)]:
                done.result()
        os.chmod(tmp, 0o755)
        os.rename(tmp, final)
