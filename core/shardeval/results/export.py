"""`shardeval export` and `shardeval.api.load_run`: a run's standing records as rows.

The standing record of each (problem, repeat) is the one merge keeps: shardeval.results.merge's scan
decides it (shardeval.store.standing's rule) and remembers where it lies; each winner is read back from
its shard file and becomes one row, in merge order (benchmark, problem, repeat). Rows stream in
batches, so a run of any size exports in memory bounded by its number of cells. A sweep's models
go into one file, told apart by the identity columns. Shard files are only read; the output file
is replaced atomically (a FIFO or a device is written into, `-` is standard output:
shardeval.store.atomic).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple
from collections.abc import Iterable, Iterator

from msgspec import UNSET

from shardeval.errors import UsageError, os_error
from shardeval.results.merge import Cells, cell_warnings, read_winners, scan_results
from shardeval.results.metrics import MISSING
from shardeval.store.atomic import check_output, write_output
from shardeval.store.discover import load_shards, model_roots, naming_model, read_plan, refuse_inside_shard
from shardeval.store.records import RESULTS_FILE, ResultRecord

FORMATS = {"parquet": (".parquet", ".pq"), "csv": (".csv",), "jsonl": (".jsonl", ".ndjson")}
PARQUET_HINT = "pip install 'shardeval[parquet]'"
BATCH = 8192  # rows per Parquet record batch and per chunk written
BATCH_TEXT = 64 << 20  # ... or fewer, once their thinking holds this many characters (32k-token thinking, 8192 rows: 1 GB)

# Column name -> kind (str, int, float, bool); every column may be null but `cached`.
IDENTITY = {"config_hash": "str", "service": "str", "model": "str", "weights": "str"}
RECORD = {
    "benchmark": "str",
    "shard": "int",
    "problem_idx": "int",
    "problem_id": "str",
    "repeat": "int",
    "status": "str",
    "score": "float",
    "extracted": "str",
    "reference": "str",
    "prompt_tokens": "int",
    "completion_tokens": "int",
    "latency_s": "float",
    "ttft_s": "float",
    "error_kind": "str",
    "error": "str",
    "cluster": "str",
}
# A reasoning model's reply (docs/reasoning.md); null where the record has none (every record of a
# model that does not think).
REASONING = {"reasoning": "str", "answer": "str", "reasoning_tokens": "int", "reasoning_tokens_from": "str", "outcome": "str"}
SCORE_PREFIX = "scores."  # each name in a record's `scores` is its own float column, e.g. scores.f1
_fields = attrgetter(*RECORD)
_reasoning = attrgetter(*REASONING)


class Identity(NamedTuple):
    """Which run and model a record belongs to: the config hash, the service that answered the
    benchmark, the model id it served (the config's `model` where the shard could not ask) and
    the weights it reported (`root`)."""

    config_hash: str
    service: str | None
    model: str | None
    weights: str | None


@dataclass
class Scanned:
    """One benchmark of one run after merge's scan: every cell's standing record located."""

    run: Any  # shardeval.store.discover.Run
    bench: str
    cells: Any  # shardeval.results.merge.Cells
    identities: list[Identity]  # per shard of the run (index = Cells.src)
    label: str = ""  # "NAME: " for a sweep's model, to name its files in warnings


def columns(score_names: Iterable[str]) -> dict[str, str]:
    return {**IDENTITY, **RECORD, **REASONING, "cached": "bool", **{SCORE_PREFIX + n: "float" for n in score_names}}


def identity(run: Any, manifest: Any, i: int) -> Identity:
    service = manifest.benchmarks[i].service
    if service is None and len(manifest.served) == 1:  # shards written before benchmarks named their service
        service = next(iter(manifest.served))
    served = manifest.served.get(service) if service else None
    declared = manifest.config.get("services", {}).get(service) if service else None
    model = served.model if served else declared.get("model") if isinstance(declared, dict) else None
    return Identity(run.config_hash, service, model, served.root if served else None)


def scan(root: str, allow_mixed_models: bool = False, benchmarks: set[str] | None = None) -> list[Scanned]:
    """Locate every standing record of a run, or of each model of a sweep (merge's scan, no metrics);
    `benchmarks`: only these (a tracker's per-benchmark sample table)."""
    plan = read_plan(root)
    roots = [(None, root)] if plan is None else model_roots(root, plan)
    out = []
    for name, run_root in roots:
        if run_root is None:
            continue  # a model of the sweep with no shard yet: nothing stands
        with naming_model(name):
            run = load_shards(run_root, allow_mixed_served=allow_mixed_models)
        for i, bm in enumerate(run.benchmarks):
            if benchmarks is not None and bm.name not in benchmarks:
                continue
            cells = Cells(bm.n_problems, bm.repeats)
            scan_results(cells, bm.name, run.shards)
            out.append(Scanned(run, bm.name, cells, [identity(run, s.manifest, i) for s in run.shards], f"{name}: " if name else ""))
    if plan is not None and not out:
        raise UsageError(f"{root}: no model of the sweep has a shard yet; export it once one has written records")
    return out


def standing(scanned: list[Scanned]) -> Iterator[tuple[Identity, Any]]:
    """(identity, ResultRecord) of every standing record, in merge order, read back where the scan found it."""
    import msgspec

    decode = msgspec.json.Decoder(ResultRecord).decode
    for s in scanned:
        c = s.cells
        try:
            for cell, src, line in read_winners(s.run.shards, s.bench, RESULTS_FILE, c.src, c.offset, c.length):
                try:
                    record = decode(line)
                except msgspec.ValidationError as exc:  # the scan reads no text field: a line whose text is no string
                    where = os.path.join(s.run.shards[src].path, s.bench, RESULTS_FILE)
                    raise UsageError(
                        f"{s.label}{where}: the record at byte {c.offset[cell]} is not a valid result record "
                        f"({exc}); move that shard aside or mend the line, then export again"
                    ) from None
                yield s.identities[src], record
        except OSError as exc:  # a shard file moved or deleted since the scan: not the output's fault
            raise os_error(exc, "read", fix="a shard changed while exporting; export again") from None


def score_names(scanned: list[Scanned]) -> list[str]:
    return sorted({name for s in scanned for name in s.cells.extra})


_NO_REASONING = (None,) * len(REASONING)


def row(ident: Identity, rec: Any, names: list[str]) -> tuple:
    thought = _reasoning(rec)
    if thought[0] is not UNSET or thought[2] is not UNSET or thought[4] is not UNSET:
        thought = tuple(None if v is UNSET else v for v in thought)
    else:  # a record without thinking, tokens or outcome: all null, as most are
        thought = _NO_REASONING
    return (*ident, *_fields(rec), *thought, rec.cached is True, *[rec.scores.get(n) for n in names])


def batches(rows: Iterator[tuple], names: Iterable[str] = ()) -> Iterator[list[tuple]]:
    """Rows in batches of BATCH; where `names` has a `reasoning` column, a batch also ends once its
    thinking reaches BATCH_TEXT characters, so long thinking keeps memory bounded."""
    names = list(names)
    at = names.index("reasoning") if "reasoning" in names else None
    batch, text = [], 0
    for r in rows:
        batch.append(r)
        if at is not None and (thought := r[at]) is not None:
            text += len(thought)
            if text >= BATCH_TEXT:
                yield batch
                batch, text = [], 0
                continue
        if len(batch) == BATCH:
            yield batch
            batch, text = [], 0
    if batch:
        yield batch


def pick_format(fmt: str | None, out: str) -> str:
    """The --format given, else the one -o's suffix names (`-`, standard output: csv); a mistake is
    one line with the choices."""
    choices = "parquet, csv or jsonl"
    if fmt is not None:
        if fmt.lower() not in FORMATS:
            raise UsageError(f"--format {fmt}: not a format export writes; choose {choices}")
        return fmt.lower()
    if out == "-":
        return "csv"  # standard output has no suffix: CSV unless --format says otherwise
    suffix = os.path.splitext(out)[1].lower()
    found = next((name for name, suffixes in FORMATS.items() if suffix in suffixes), None)
    if found is None:
        raise UsageError(
            f"-o {out}: cannot tell the format from the suffix {suffix or '(none)'!r}; pass --format ({choices}) "
            "or name the file .parquet, .csv or .jsonl"
        )
    return found


def need_pyarrow() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise UsageError(
            f"--format parquet needs pyarrow, which is not installed ({exc}); {PARQUET_HINT}, or export --format csv or jsonl"
        ) from None
    return pq


def jsonl_chunks(names: Iterable[str], rows: Iterator[tuple]) -> Iterator[bytes]:
    import msgspec

    encode, names = msgspec.json.Encoder().encode, list(names)
    for batch in batches(rows, names):
        yield b"".join(encode(dict(zip(names, r))) + b"\n" for r in batch)


def csv_chunks(names: Iterable[str], rows: Iterator[tuple]) -> Iterator[bytes]:
    """RFC 4180 CSV in UTF-8: a null and an empty string are both an empty field."""
    import csv
    import io

    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    names = list(names)
    writer.writerow(names)
    for batch in batches(rows, names):
        writer.writerows(batch)
        yield buffer.getvalue().encode()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue().encode()  # the header alone when there are no rows


class _Chunks:
    """A write-only file that hands what Parquet wrote to the caller chunk by chunk (so the
    output goes through atomic_write like every other file shardeval replaces)."""

    closed = False

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.position = 0

    def write(self, data: Any) -> int:
        self.parts.append(bytes(data))
        self.position += len(self.parts[-1])
        return len(self.parts[-1])

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def drain(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


def arrow_schema(kinds: dict[str, str]) -> Any:
    import pyarrow as pa

    types = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
    return pa.schema([pa.field(name, types[kind], nullable=name != "cached") for name, kind in kinds.items()])


def parquet_chunks(kinds: dict[str, str], rows: Iterator[tuple]) -> Iterator[bytes]:
    """Parquet written one record batch (one row group) at a time."""
    import pyarrow as pa

    pq = need_pyarrow()
    schema, sink = arrow_schema(kinds), _Chunks()
    with pq.ParquetWriter(sink, schema) as writer:
        for batch in batches(rows, kinds):
            arrays = [pa.array(column, type=field.type) for column, field in zip(zip(*batch), schema)]
            writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
            yield sink.drain()
    yield sink.drain()


@dataclass
class Exported:
    format: str
    rows: int
    missing: int  # cells with no record yet (a run in progress, a shard never run)
    warnings: list[str]  # what the scan refused or could not read, one line per file


def export(
    root: str, out: str, fmt: str | None = None, *, allow_mixed_models: bool = False, benchmarks: set[str] | None = None
) -> Exported:
    """Write every standing record of the run (or sweep) at `root` to `out` (of `benchmarks` only, when given)."""
    fmt = pick_format(fmt, out)
    if fmt == "parquet":
        need_pyarrow()  # before reading any shard
    # likewise: a refused path costs no scan (a directory, a device that takes no file, a shard's file)
    if check_output(out, "-o") == "stdout":
        if fmt == "parquet" and sys.stdout.isatty():
            raise UsageError(
                "-o - --format parquet: Parquet is binary and standard output is a terminal; "
                "redirect it (> FILE, | …) or give -o FILE.parquet"
            )
    else:
        refuse_inside_shard(out, "-o")
    scanned = scan(root, allow_mixed_models, benchmarks)
    names = score_names(scanned)
    kinds = columns(names)
    counted = [0]

    def rows() -> Iterator[tuple]:
        for ident, rec in standing(scanned):
            counted[0] += 1
            yield row(ident, rec, names)

    write = {"parquet": parquet_chunks, "csv": csv_chunks, "jsonl": jsonl_chunks}[fmt]
    try:
        write_output(out, write(kinds, rows()))
    except OSError as exc:
        raise os_error(exc, "write the export to") from None
    lines = [line for s in scanned for line in cell_warnings(s.cells, s.label, never="exported")]
    return Exported(fmt, counted[0], sum(s.cells.status.count(MISSING) for s in scanned), lines)


class RunRecords(Sequence):
    """The standing records of a run or a sweep (shardeval.store.records.ResultRecord, in merge order),
    each with its run's Identity; `to_pandas()` makes the export's columns a DataFrame."""

    def __init__(self, records: list[Any], identities: list[Identity], score_names: list[str]) -> None:
        self.records, self.identities, self.score_names = records, identities, score_names

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: Any) -> Any:
        return self.records[index]

    def __repr__(self) -> str:
        return f"<RunRecords: {len(self)} standing records>"

    def rows(self) -> Iterator[tuple]:
        return (row(ident, rec, self.score_names) for ident, rec in zip(self.identities, self.records))

    def to_pandas(self) -> Any:
        """One row per record, the export's columns (nullable integers as pandas' Int64)."""
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError(f"RunRecords.to_pandas needs pandas, which is not installed ({exc}); pip install pandas") from None
        kinds = columns(self.score_names)
        values = list(zip(*self.rows())) or [()] * len(kinds)
        dtypes = {"str": object, "int": "Int64", "float": "float64", "bool": bool}
        return pd.DataFrame({name: pd.Series(list(col), dtype=dtypes[kind]) for (name, kind), col in zip(kinds.items(), values)})


def load_run(path: str, *, allow_mixed_models: bool = False) -> RunRecords:
    """The standing records of the run (or every model of the sweep) at `path`, as merge keeps
    them: for notebooks. Shard files are only read; nothing is written."""
    scanned = scan(path, allow_mixed_models)
    identities, records = [], []
    for ident, rec in standing(scanned):
        identities.append(ident)
        records.append(rec)
    return RunRecords(records, identities, score_names(scanned))
