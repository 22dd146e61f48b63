"""Images a problem shows the model: who they are (the sha256 of their bytes), how they are checked
before any request, and how a shard reads and encodes each one once.

A `Problem` names its images by `ImageRef`: where the bytes come from and what they are (digest,
size, pixels, type), never the bytes themselves, so problems stay small and a shard builds them
lazily. The bytes are read when a request needs them, through the shard's `ImageStore`: a bounded
LRU of encoded data URLs keyed by digest, so every repeat of a problem (asked back to back, see
shardeval.run.runner.pending_work) reuses one encoding and memory stays flat however many images
a benchmark has. Pillow is imported only here and only when an image is met.

Sources: an absolute file path; an `http(s)://` URL (its bytes kept in the download cache); a
`data:` URL; or `gen:<generator>:<spec>`, an image a benchmark draws (`register_generator`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import threading
from collections import OrderedDict
from typing import Any
from collections.abc import Callable
from urllib.parse import quote, unquote_to_bytes

import msgspec

from shardeval.benchmark.downloads import PREPARE_HINT, downloads_dir
from shardeval.errors import UsageError
from shardeval.store.records import ImageInfo
from shardeval.store.regular import FileTooLarge, read_regular

IMAGE_MARKER = "<image>"
DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024
PREFLIGHT_MAX_BYTES = 256 * 1024 * 1024  # no server takes more; a bigger file is not read into memory
THUMBNAIL_SIDE = 96  # px, the longest side of a report's thumbnail
THUMBNAIL_MAX_BYTES = 8 * 1024


class ImageRef(msgspec.Struct, frozen=True, kw_only=True):
    """One image of a problem: what its bytes are, and `name`, how the data named it (a path as
    written in the row, a URL, a generator's spec), for messages and pages. Where this process reads
    the bytes (an absolute path, which differs between nodes) is not part of it, so fingerprints
    over problems hold the digest and never a mount point: `describe` tells the store (`locate`)."""

    name: str
    sha256: str
    bytes: int
    width: int
    height: int
    mime: str

    def info(self) -> ImageInfo:
        return ImageInfo(sha256=self.sha256, bytes=self.bytes, width=self.width, height=self.height)

    def placeholder(self) -> str:
        """How a trajectory or a log shows the image: its digest, never its bytes."""
        return f"[image sha256:{self.sha256[:12]} {self.width}x{self.height} {self.bytes} B]"


class ImageUnavailable(Exception):
    """An image that could not be read when a request needed it (an http(s) fetch that failed, a
    file changed since the problem was built): the answer is an error of kind `image`, never scored."""


# --- Pillow ------------------------------------------------------------------------------------


def pillow() -> Any:
    """PIL.Image, or one line saying how to install it."""
    try:
        from PIL import Image
    except ImportError:
        raise UsageError("this benchmark has images, which need Pillow: pip install 'shardeval[images]' (or pip install pillow)") from None
    return Image


def describe(data: bytes, source: str, name: str) -> ImageRef:
    """The ImageRef of `data`, decoded in full as vLLM decodes it (a truncated file fails here,
    not at the server), read from `source` (remembered, so the shard's store can read it again).
    Raises ValueError naming what is wrong."""
    Image = pillow()
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            fmt, (width, height) = im.format, im.size
    except Exception as exc:  # Pillow raises many kinds (UnidentifiedImageError, OSError, SyntaxError, ...)
        why = re.sub(r" at 0x[0-9a-fA-F]+", "", str(exc))  # a Python object's address says nothing to a user
        raise ValueError(f"cannot decode it as an image ({type(exc).__name__}: {why})") from None
    mime = Image.MIME.get(fmt or "", "application/octet-stream")
    ref = ImageRef(name=name, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), width=width, height=height, mime=mime)
    STORE.locate(ref, source)
    return ref


def thumbnail(data: bytes) -> tuple[str, int, int] | None:
    """A small embedded copy for a page: (data URL, width, height), longest side THUMBNAIL_SIDE px,
    at most THUMBNAIL_MAX_BYTES; None when it cannot be made that small."""
    Image = pillow()
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            small = im.convert("RGB")
    except Exception:
        return None
    small.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
    for quality in (70, 40):
        out = io.BytesIO()
        try:
            small.save(out, format="WEBP", quality=quality)
            mime = "image/webp"
        except (KeyError, OSError):  # a Pillow built without WebP
            out = io.BytesIO()
            small.save(out, format="JPEG", quality=quality)
            mime = "image/jpeg"
        if out.tell() <= THUMBNAIL_MAX_BYTES:
            return f"data:{mime};base64,{base64.b64encode(out.getvalue()).decode()}", small.width, small.height
    return None


# --- sources -----------------------------------------------------------------------------------

_GENERATORS: dict[str, Callable[[str], bytes]] = {}


def register_generator(name: str, draw: Callable[[str], bytes]) -> None:
    """Let `gen:<name>:<spec>` sources be drawn again by `draw(spec)` when the store needs their
    bytes (a benchmark that makes its images registers itself when built)."""
    _GENERATORS[name] = draw


def read_source(source: str, max_bytes: int | None = None) -> bytes:
    """The bytes of `source`. Raises OSError or ValueError naming why they cannot be had. A file is
    read as a data file is (shardeval.store.regular): a regular file only, never waited on (a FIFO
    hung the preflight), and never more than `max_bytes` (default PREFLIGHT_MAX_BYTES: a symlink
    to /dev/zero passed a size check and was read until memory ran out)."""
    if source.startswith("gen:"):
        name, _, spec = source[4:].partition(":")
        if name not in _GENERATORS:
            raise ValueError(f"no generator {name!r} is registered in this process")
        return _GENERATORS[name](spec)
    if source.startswith("data:"):
        return decode_data_url(source)
    if source.startswith(("http://", "https://")):
        return _fetch(source, max_bytes)
    try:
        return read_regular(source, PREFLIGHT_MAX_BYTES if max_bytes is None else max_bytes)
    except FileTooLarge as exc:
        raise ValueError(f"more than {exc.max_bytes} bytes, over max_image_bytes") from None


def decode_data_url(url: str) -> bytes:
    head, sep, payload = url.partition(",")
    if not sep:
        raise ValueError("a data: URL needs a comma before its payload")
    if head.endswith(";base64"):
        try:
            return base64.b64decode(payload, validate=True)
        except ValueError as exc:
            raise ValueError(f"bad base64 in the data: URL ({exc})") from None
    return unquote_to_bytes(payload)


def _cache_path(url: str) -> str:
    return os.path.join(downloads_dir(), "images", hashlib.sha256(url.encode()).hexdigest())


class DownloadFailed(OSError):
    """An http(s) image that could not be fetched: its message says why and what to do (on a node
    without internet, prepare the run), so it is not told to fix a path."""


def _fetch(url: str, max_bytes: int | None) -> bytes:
    """An http(s) image: the download cache's copy, else fetched now (and kept)."""
    path = _cache_path(url)
    try:
        return read_regular(path, max_bytes or DEFAULT_MAX_IMAGE_BYTES)
    except FileNotFoundError:
        pass
    except FileTooLarge:
        raise ValueError(f"over max_image_bytes ({max_bytes})") from None
    import urllib.error
    import urllib.request

    from shardeval.store.atomic import atomic_write

    request = urllib.request.Request(url, headers={"User-Agent": "shardeval"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            data = response.read((max_bytes or DEFAULT_MAX_IMAGE_BYTES) + 1)
    except urllib.error.HTTPError as exc:
        raise DownloadFailed(f"download failed: HTTP {exc.code} {exc.reason}; check the URL") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise DownloadFailed(f"download failed: {reason}; check the network, or on a node without internet {PREPARE_HINT}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise ValueError(f"over max_image_bytes ({max_bytes})")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, [data])
    return data


def resolve_path(path: str, base_dir: str | None) -> str:
    """A row's image path made absolute: relative paths are the data file's (else the working directory's)."""
    if path.startswith(("http://", "https://", "data:", "gen:")):
        return path
    path = os.path.expanduser(path)
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(base_dir or os.getcwd(), path))


# --- prompts -----------------------------------------------------------------------------------


def check_markers(text: str, n_images: int, where: str) -> None:
    """One line when a prompt's `<image>` markers do not pair up with its images."""
    try:
        split_prompt(text, n_images)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None


def split_prompt(text: str, n_images: int) -> list[str | int]:
    """`text` as the parts of one chat turn, in order: text pieces and image positions. Images go
    where `<image>` markers stand; with no marker they all come first (the usual VLM order). Raises
    ValueError when markers and images do not pair up."""
    pieces = text.split(IMAGE_MARKER)
    markers = len(pieces) - 1
    if markers == 0:
        return [*range(n_images), *([text] if text else [])]
    if markers != n_images:
        raise ValueError(
            f"the prompt has {markers} {IMAGE_MARKER} marker(s) for {n_images} image(s); "
            f"give one marker per image, or none (the images then come first)"
        )
    parts: list[str | int] = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append(piece)
        if i < n_images:
            parts.append(i)
    return parts


def check_count(n: int, limit: int | None, where: str) -> None:
    if limit is not None and n > limit:
        raise UsageError(
            f"{where}: {n} images, more than the service's limit_mm_per_prompt image {limit}; "
            "raise limit_mm_per_prompt (and vLLM's --limit-mm-per-prompt) or give the row fewer images"
        )


def image_limit(limit_mm_per_prompt: dict[str, Any] | None) -> int | None:
    """The images one prompt may carry under a service's `limit_mm_per_prompt` (None: no limit declared)."""
    value = (limit_mm_per_prompt or {}).get("image")
    if isinstance(value, dict):
        value = value.get("count")
    return value if isinstance(value, int) else None


class CheckedFiles:
    """What this node already read, decoded and digested, so a rerun, or another shard on the node,
    checks an image file with one stat instead of a full read and decode: `images/checked/` in the
    download cache, a file per folder of images, one line per image file, trusted while the file's size, mtime and inode are
    the ones it was checked at (as make and rsync trust them). Lines are appended whole (one write
    each, O_APPEND), so shards sharing a node never tear one; a torn or foreign line is passed over."""

    class Entry(msgspec.Struct, array_like=True):
        path: str
        size: int
        mtime_ns: int
        inode: int
        sha256: str
        bytes: int
        width: int
        height: int
        mime: str

    def __init__(self) -> None:
        self._known: dict[str, dict[str, CheckedFiles.Entry]] = {}  # folder -> its files checked
        self._lock = threading.Lock()

    def path(self, folder: str) -> str:
        """One record per folder of images, so a process loads only the folders it reads."""
        return os.path.join(downloads_dir(), "images", "checked", hashlib.sha256(folder.encode()).hexdigest()[:32] + ".jsonl")

    def _load(self, folder: str) -> dict[str, CheckedFiles.Entry]:
        known = self._known.get(folder)
        if known is None:
            known = self._known[folder] = {}
            decoder = msgspec.json.Decoder(CheckedFiles.Entry)
            try:
                with open(self.path(folder), "rb") as f:
                    for line in f:
                        try:
                            entry = decoder.decode(line)
                        except msgspec.DecodeError:
                            continue
                        known[entry.path] = entry
            except OSError:
                pass
        return known

    def get(self, source: str, name: str) -> ImageRef | None:
        """The ref of a file checked before and unchanged since (None: read it)."""
        if source.startswith(("http://", "https://", "data:", "gen:")):
            return None
        try:
            st = os.stat(source)
        except OSError:
            return None  # the read that follows says why, in its one line
        with self._lock:
            entry = self._load(os.path.dirname(source)).get(source)
        if entry is None or (entry.size, entry.mtime_ns, entry.inode) != (st.st_size, st.st_mtime_ns, st.st_ino):
            return None
        ref = ImageRef(name=name, sha256=entry.sha256, bytes=entry.bytes, width=entry.width, height=entry.height, mime=entry.mime)
        STORE.locate(ref, source)
        return ref

    def put(self, source: str, ref: ImageRef) -> None:
        """Remember a file just checked; a cache that cannot be written is only slower, never an error."""
        if source.startswith(("http://", "https://", "data:", "gen:")):
            return
        try:
            st = os.stat(source)
            entry = CheckedFiles.Entry(
                source, st.st_size, st.st_mtime_ns, st.st_ino, ref.sha256, ref.bytes, ref.width, ref.height, ref.mime
            )
            record = self.path(os.path.dirname(source))
            os.makedirs(os.path.dirname(record), exist_ok=True)
            fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, msgspec.json.encode(entry) + b"\n")
            finally:
                os.close(fd)
        except OSError:
            return
        with self._lock:
            self._load(os.path.dirname(source))[source] = entry


CHECKED = CheckedFiles()


def _embedded(value: Any) -> bool:
    """An image held in the row, as Hugging Face's Image feature stores it: {"bytes": ..., "path": ...}."""
    return isinstance(value, dict) and (
        isinstance(value.get("bytes"), (bytes, bytearray)) or (value.get("bytes") is None and isinstance(value.get("path"), str))
    )


# --- the shard's store -------------------------------------------------------------------------


class ImageStore:
    """Each image read and base64-encoded once per process: an LRU of data URLs keyed by digest,
    bounded in entries and bytes. `fresh(ref, data)` hands it bytes a benchmark just made, so a
    generated image is not drawn twice. Counters say what it did (`stats`); thread-safe."""

    def __init__(self, max_entries: int = 256, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._urls: OrderedDict[str, str] = OrderedDict()
        self._fresh: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._sources: dict[str, str] = {}  # sha256 -> where this process reads it
        self._verified: OrderedDict[tuple[str, int, int, int], None] = OrderedDict()
        self._lock = threading.Lock()
        self.encodes = self.hits = self.reads = 0
        self._thumbnails: dict[str, tuple[ImageRef, bytes]] = {}  # made since the runner last took them
        self.want_thumbnails = False

    def locate(self, ref: ImageRef, source: str) -> None:
        """Where this process reads `ref`'s bytes (one entry per distinct image: a short string)."""
        with self._lock:
            self._sources[ref.sha256] = source

    def source_of(self, ref: ImageRef) -> str:
        """Where this process reads `ref`; an image never described here (a problem decoded from
        elsewhere) is read by its name."""
        with self._lock:
            return self._sources.get(ref.sha256, ref.name)

    def fresh(self, ref: ImageRef, data: bytes) -> None:
        with self._lock:
            self._fresh[ref.sha256] = data
            self._fresh.move_to_end(ref.sha256)
            while len(self._fresh) > 16:
                self._fresh.popitem(last=False)

    def data_url(self, ref: ImageRef) -> str:
        with self._lock:
            url = self._urls.get(ref.sha256)
            if url is not None:
                self._urls.move_to_end(ref.sha256)
                self.hits += 1
                return url
            data = self._fresh.pop(ref.sha256, None)
        if data is None:
            data = self._read(ref)
        else:
            self._keep_for_thumbnail(ref, data)
        url = f"data:{ref.mime};base64,{base64.b64encode(data).decode('ascii')}"
        with self._lock:
            self.encodes += 1
            if ref.sha256 not in self._urls:
                self._urls[ref.sha256] = url
                self._size += len(url)
            while self._urls and (len(self._urls) > self.max_entries or self._size > self.max_bytes):
                _, old = self._urls.popitem(last=False)
                self._size -= len(old)
        return url

    def file_url(self, ref: ImageRef, media_root: str | None) -> str | None:
        """`file://` + the path when the server may read it itself (vLLM's --allowed-local-media-path,
        which resolves symlinks and wants the file strictly below it); None otherwise."""
        source = self.source_of(ref)
        if not media_root or source.startswith(("http://", "https://", "data:", "gen:")):
            return None
        real, root = os.path.realpath(source), os.path.realpath(media_root)
        if os.path.commonpath([real, root]) != root or real == root:
            return None
        self._check_unchanged(ref, real)
        return "file://" + quote(real)

    def _check_unchanged(self, ref: ImageRef, real: str) -> None:
        """A file the server reads itself is still the one the problem names (else an `image` error):
        read once, then trusted while its size, mtime and inode stay the same."""
        try:
            st = os.stat(real)
        except OSError as exc:
            raise ImageUnavailable(f"image {ref.name}: {exc.strerror or exc}") from None
        stamp = (ref.sha256, st.st_size, st.st_mtime_ns, st.st_ino)
        with self._lock:
            if stamp in self._verified:
                self.hits += 1
                return
        self._read(ref)
        with self._lock:
            self._verified[stamp] = None
            while len(self._verified) > 4 * self.max_entries:
                self._verified.popitem(last=False)

    def _read(self, ref: ImageRef) -> bytes:
        try:
            data = read_source(self.source_of(ref))
        except (OSError, ValueError) as exc:
            raise ImageUnavailable(f"image {ref.name}: {getattr(exc, 'strerror', None) or exc}") from None
        with self._lock:
            self.reads += 1
        if hashlib.sha256(data).hexdigest() != ref.sha256:
            raise ImageUnavailable(
                f"image {ref.name} changed since the problem was built "
                f"(sha256 {ref.sha256[:12]}…, now {hashlib.sha256(data).hexdigest()[:12]}…); rerun the shard"
            )
        self._keep_for_thumbnail(ref, data)
        return data

    def _keep_for_thumbnail(self, ref: ImageRef, data: bytes) -> None:
        if self.want_thumbnails:
            with self._lock:
                self._thumbnails.setdefault(ref.sha256, (ref, data))

    def take_thumbnails(self) -> list[tuple[ImageRef, bytes]]:
        """The images encoded since the last call, once each, for the shard's images.jsonl."""
        with self._lock:
            out, self._thumbnails = list(self._thumbnails.values()), {}
        return out

    def stats(self) -> dict[str, int]:
        return {"encodes": self.encodes, "hits": self.hits, "reads": self.reads}


STORE = ImageStore()


def offer_image_bytes(ref: ImageRef, data: bytes) -> None:
    """Bytes a benchmark just made for `ref` (drawing it to learn its digest): the shard's store
    encodes them when a request first needs the image, instead of drawing it again."""
    STORE.fresh(ref, data)


# --- images named by data rows (the bring-your-own benchmarks) ---------------------------------


class RowImages:
    """The images a rows benchmark's rows name in one field: a list of paths (relative to the data
    file), http(s) URLs or data: URLs, or images held in the row itself as Hugging Face stores them
    in Parquet (`{"bytes": ..., "path": ...}`, one or a list). Each is read, decoded and digested
    once per process, when the benchmark's preflight checks them all, so a bad one is one line
    before any request. An image held in a row is read again from the row when a request needs it."""

    def __init__(
        self,
        field: str,
        base_dir: str | None,
        where: str,
        row_at: Callable[[int], dict[str, Any]] | None = None,
        images_root: str | None = None,
    ) -> None:
        self.field, self.base_dir, self.where = field, base_dir, where
        # The folders a row's file may lie in (symlinks resolved): the data file's, and images_root
        # when the benchmark names one; a path anywhere else is refused (see `_inside`).
        self.images_root = images_root
        self._roots = [os.path.realpath(d) for d in (base_dir, images_root) if d]
        self._refs: dict[str, ImageRef] = {}  # source -> its ref (a file named by many rows is read once)
        self._digest: str | None = None
        self._row_at = row_at
        self._generator = f"rows{id(self):x}"  # in-row images are drawn again from their row
        register_generator(self._generator, self._from_row)

    def names(self, row: dict[str, Any], idx: int) -> list[Any]:
        value = row.get(self.field)
        if value is None:
            return []
        if isinstance(value, (str, dict)):
            value = [value]
        if not isinstance(value, list) or not all((isinstance(v, str) and v) or _embedded(v) for v in value):
            raise UsageError(
                f"{self.where}: row {idx}: {self.field} must be a list of image paths or URLs "
                f"(or images as {{bytes, path}}), got {value!r:.80}"
            )
        return value

    def of_row(self, row: dict[str, Any], idx: int, row_id: str) -> list[ImageRef]:
        return [self._ref(entry, idx, row_id, k) for k, entry in enumerate(self.names(row, idx))]

    def _ref(self, entry: Any, idx: int, row_id: str, k: int) -> ImageRef:
        if isinstance(entry, dict) and isinstance(entry.get("bytes"), (bytes, bytearray)):
            source, name, data = f"gen:{self._generator}:{idx}:{k}", str(entry.get("path") or f"row {idx} image {k}"), entry["bytes"]
        else:
            name = entry if isinstance(entry, str) else str(entry["path"])
            source, data = resolve_path(name, self.base_dir), None
            if not source.startswith(("http://", "https://", "data:", "gen:")):
                self._inside(source, name, idx, row_id, k)
        ref = self._refs.get(source)
        if ref is None and data is None:
            ref = CHECKED.get(source, name)
        if ref is None:
            try:
                ref = describe(bytes(data) if data is not None else read_source(source, PREFLIGHT_MAX_BYTES), source, name)
                if data is None:
                    CHECKED.put(source, ref)
            except DownloadFailed as exc:
                raise UsageError(f"{self.where}: row {idx} (id {row_id}): {self.field}[{k}] {name!r}: {exc}") from None
            except OSError as exc:
                why = f"{exc.strerror or exc}" + (f" ({source})" if source != name else "")
                raise UsageError(
                    f"{self.where}: row {idx} (id {row_id}): {self.field}[{k}] {name!r}: cannot read it: {why}; "
                    "fix the path (relative paths start at the data file's folder)"
                ) from None
            except ValueError as exc:
                raise UsageError(
                    f"{self.where}: row {idx} (id {row_id}): {self.field}[{k}] {name!r}: {exc}; "
                    "replace it with an image file (PNG, JPEG, WebP, GIF, ...)"
                ) from None
            self._refs[source] = ref
        return ref

    def _inside(self, source: str, name: str, idx: int, row_id: str, k: int) -> None:
        """A row names files in its dataset only: below the data file's folder or `images_root`,
        symlinks resolved (as vLLM's allowed_local_media_path bounds what a request may name). A
        row naming ../secret/private.png or /etc/… was read, sent to the model and thumbnailed."""
        real = os.path.realpath(source)
        if any(os.path.commonpath([real, root]) == root for root in self._roots):
            return
        folders = " or ".join(self._roots) or "none: the rows are not a local file"
        raise UsageError(
            f"{self.where}: row {idx} (id {row_id}): {self.field}[{k}] {name!r} is {real}, outside the "
            f"dataset (the folders a row may name files in: {folders}; symlinks are followed); move the image "
            f"below the data file's folder, or set images_root to the folder that holds it"
        )

    def _from_row(self, spec: str) -> bytes:
        idx, k = map(int, spec.split(":"))
        if self._row_at is None:
            raise ValueError("the rows are not at hand to read the image from")
        return bytes(self.names(self._row_at(idx), idx)[k]["bytes"])

    def check_all(self, problems: Any) -> None:
        """Build every problem (which reads, decodes and digests every image of every row, and
        checks its prompt's markers); the digest of all images, in row order, joins the dataset
        fingerprint (an image replaced under its name is other data)."""
        digest = hashlib.sha256()
        for p in problems:
            for ref in p.images or []:
                digest.update(ref.sha256.encode() + b"\n")
            digest.update(b"\n")
        self._digest = digest.hexdigest()

    def fingerprint(self, rows_fingerprint: str, problems: Callable[[], Any]) -> str:
        """The dataset fingerprint with the images' bytes in it (checking them all first, if the
        preflight has not: `problems()` yields every problem)."""
        if self._digest is None:
            self.check_all(problems())
        return "sha256:" + hashlib.sha256(f"{rows_fingerprint}\nimages {self._digest}".encode()).hexdigest()
