"""The on-disk schema: result records, trajectories and the shard manifest.

These Structs are the single definition of every line a shard writes. Field names are a public
schema that users' scripts read: add fields, never rename them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Type, TypeVar

from shardeval.msgspec_compat import msgspec

RESULTS_FILE = "results.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
MANIFEST_FILE = "manifest.json"
LOGS_DIR = "logs"

Status = Literal["ok", "error"]
State = Literal["running", "complete", "failed", "interrupted"]


class ResultRecord(msgspec.Struct, kw_only=True):
    """One answer to one (problem, repeat). Error records carry no score: errors are not wrong answers."""

    benchmark: str
    problem_idx: int
    problem_id: str
    repeat: int
    seed: int
    status: Status
    error_kind: str | None = None
    error: str | None = None
    attempts: int = 0
    response: str = ""
    extracted: str | None = None
    reference: str | None = None
    score: float | None = None
    scores: dict[str, float] = {}
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    latency_s: float | None = None
    started_at: float = 0.0
    shard: int = 0
    cluster: str | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.benchmark, self.problem_idx, self.repeat)


class Message(msgspec.Struct):
    role: str
    content: str


class TrajectoryRecord(msgspec.Struct, kw_only=True):
    """The full conversation behind one result record, with the request's generation parameters."""

    benchmark: str
    problem_idx: int
    problem_id: str
    repeat: int
    messages: list[Message]
    request: dict[str, Any] = {}
    status: Status = "ok"


class BenchmarkManifest(msgspec.Struct, kw_only=True):
    """What one shard holds of one benchmark: its problem range and how it went."""

    name: str
    range: tuple[int, int]
    repeats: int
    n_problems: int
    dataset_fingerprint: str
    metrics: list[str] = msgspec.field(default_factory=lambda: ["accuracy", "pass@k"])
    n_ok: int = 0
    n_error: int = 0


class Manifest(msgspec.Struct, kw_only=True):
    version: str
    shard_idx: int
    total_shards: int
    shard_source: str
    config_hash: str
    benchmarks: list[BenchmarkManifest]
    state: State = "running"
    started_at: float = 0.0
    finished_at: float | None = None
    permutation_seed: int | None = None
    reason: str | None = None
    config: dict[str, Any] = {}


_encoder = msgspec.json.Encoder()
T = TypeVar("T")


def encode_line(obj: Any) -> bytes:
    return _encoder.encode(obj) + b"\n"


@dataclass
class ReadReport:
    """What a tolerant read skipped: torn last lines and lines that do not decode."""

    path: str
    n_read: int = 0
    torn_tail: bool = False
    bad_lines: list[int] = field(default_factory=list)

    def describe(self) -> str | None:
        parts = []
        if self.torn_tail:
            parts.append("a torn last line (an interrupted write) was ignored")
        if self.bad_lines:
            shown = ", ".join(str(n) for n in self.bad_lines[:5])
            parts.append(f"{len(self.bad_lines)} undecodable line(s) skipped (line {shown})")
        return f"{self.path}: " + "; ".join(parts) if parts else None


def read_jsonl(path: str, kind: Type[T], report: ReadReport | None = None) -> Iterator[T]:
    """Yield records from a JSONL file, skipping a torn tail and undecodable lines (reported, not fatal)."""
    decoder = msgspec.json.Decoder(kind)
    report = report if report is not None else ReadReport(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        lineno = 0
        for line in f:
            lineno += 1
            if not line.endswith(b"\n"):
                if line.strip():
                    report.torn_tail = True
                break
            if not line.strip():
                continue
            try:
                yield decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                report.bad_lines.append(lineno)
                continue
            report.n_read += 1


def seal_torn_tail(path: str) -> bool:
    """End a file whose last write was cut off with a newline, so appends start on a fresh line.

    The torn fragment stays in place (nothing written is ever removed); readers skip it as an
    undecodable line. Returns whether the file needed sealing.
    """
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
    except FileNotFoundError:
        return False
    if last == b"\n":
        return False
    with open(path, "ab") as f:
        f.write(b"\n")
    return True


def write_manifest(out_dir: str, manifest: Manifest) -> None:
    """Replace manifest.json atomically so a reader never sees half a manifest."""
    path = os.path.join(out_dir, MANIFEST_FILE)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_manifest(out_dir: str) -> Manifest | None:
    path = os.path.join(out_dir, MANIFEST_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        return msgspec.json.decode(data, type=Manifest)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        from shardeval.errors import UsageError

        raise UsageError(
            f"{path} is not a valid shardeval manifest ({exc}); move that directory aside or pass --fresh"
        ) from None
