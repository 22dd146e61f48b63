"""The on-disk schema: result records, trajectories and the shard manifest.

These Structs are the single definition of every line a shard writes. Field names are a public
schema that users' scripts read: add fields, never rename them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar
from collections.abc import Iterator

import msgspec

from shardeval.numbers import finite_number
from shardeval.store.atomic import atomic_write
from shardeval.errors import UsageError, os_error
from shardeval.redact import redact_urls
from shardeval.store.regular import open_append, open_regular, read_regular

RESULTS_FILE = "results.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
IMAGES_FILE = "images.jsonl"  # per benchmark folder: one ImageThumbnail per distinct image the shard sent
MANIFEST_FILE = "manifest.json"
LOGS_DIR = "logs"
LOCK_FILE = "shard.lock"  # flock'd by the one process writing the shard directory (shardeval.store.liveness)
HEARTBEAT_FILE = "heartbeat.json"  # that process's proof of life, rewritten every few seconds

Status = Literal["ok", "error"]
# `finished_with_errors`: every pair has a record, but some end in errors (exit 3; not complete)
State = Literal["running", "complete", "finished_with_errors", "failed", "interrupted"]


class JudgeRecord(msgspec.Struct, kw_only=True):
    """What the judge said about one answer (shardeval.run.judging): its raw reply, the parsed verdict
    (None: none could be parsed, or the judge could not be asked), who judged and at what cost."""

    service: str  # the judge's service name in the config
    model: str  # the model the judge's endpoint serves
    mode: str  # single | pairwise
    reply: str = ""
    verdict: str | None = None
    error_kind: str | None = None  # the transport's kind when the judge could not be asked
    attempts: int = 0
    latency_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False  # served from the response cache
    reasoning: str | msgspec.UnsetType = msgspec.UNSET  # a reasoning judge's thinking; its verdict is read from its answer


class ImageInfo(msgspec.Struct, kw_only=True):
    """An image as a result record names it: which bytes the model saw (never the bytes)."""

    sha256: str
    bytes: int
    width: int
    height: int


class ImageThumbnail(msgspec.Struct, kw_only=True):
    """One line of a shard's images.jsonl: an image it sent, with a small embedded copy for the
    pages (report.html shows what the model saw, wherever the merge runs)."""

    sha256: str
    name: str  # how the data named it (a path as written in the row, a URL, a generator's label)
    bytes: int
    width: int
    height: int
    mime: str
    thumbnail: str | None = None  # a data: URL (WebP or JPEG), longest side 96 px, <= 8 KiB; None: could not be made
    thumb_width: int = 0
    thumb_height: int = 0


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
    # The run that wrote it: run_id(config hash). Records from before it existed have None; those
    # are told apart by their seed (shardeval.store.standing.Membership).
    run: str | None = None
    # True when the answer came from the response cache (shardeval.run.response_cache), asked of no server now.
    # Absent (UNSET) otherwise, so records without a cache stay byte-for-byte what they were.
    cached: bool | msgspec.UnsetType = msgspec.UNSET
    # The judge's reply and verdict, for a benchmark scored by a judge (absent otherwise).
    judge: JudgeRecord | msgspec.UnsetType = msgspec.UNSET
    # The images the problem showed the model, in order (absent for text problems).
    images: list[ImageInfo] | msgspec.UnsetType = msgspec.UNSET
    # A reasoning model's reply (docs/reasoning.md; all absent for a reply without thinking, so
    # such records stay what they were). `response` is the content as the server sent it;
    # `reasoning` its thinking (the server's reasoning field, or the text between inline tags);
    # `answer` what was scored, when it is not `response` (the text after the last closing tag,
    # "" for a reply that never closed its thinking): see `scored_text`.
    reasoning: str | msgspec.UnsetType = msgspec.UNSET
    answer: str | msgspec.UnsetType = msgspec.UNSET
    # How many tokens it thought, and who says so: "usage" (the server's
    # completion_tokens_details.reasoning_tokens) or "stream" (counted one per chunk).
    reasoning_tokens: int | msgspec.UnsetType = msgspec.UNSET
    reasoning_tokens_from: Literal["usage", "stream"] | msgspec.UnsetType = msgspec.UNSET
    # A reply cut off at its length limit: "truncated_reasoning" (inside its thinking: no answer,
    # scored 0, never from the thinking; not an error, not asked again) or "truncated" (after its
    # answer began: scored as it stands). Absent for a reply that ended on its own.
    outcome: Literal["truncated_reasoning", "truncated"] | msgspec.UnsetType = msgspec.UNSET

    def scored_text(self) -> str:
        """The text every scorer is given: the answer, without the thinking."""
        return self.response if self.answer is msgspec.UNSET else self.answer

    def judged_text(self) -> str:
        """The text a judge is shown: the scored text, without the whitespace that separates it
        from the thinking when the reply thought (shardeval.benchmark.reasoning.ReplySplit.shown)."""
        text = self.scored_text()
        return text.lstrip() if self.reasoning is not msgspec.UNSET else text


class Message(msgspec.Struct, omit_defaults=True):
    role: str
    content: str
    reasoning: str | None = None  # an assistant turn's thinking (docs/reasoning.md); content is the raw reply


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
    error_kinds: dict[str, int] = {}  # the pairs whose record is an error, by kind (n_error in all)
    # How the benchmark renders prompts and scores (shardeval.identity); None in shards
    # written before they existed, which then never mix with shards that have them.
    prompt_fingerprint: str | None = None
    scorer_fingerprint: str | None = None
    service: str | None = None  # which service of `Manifest.served` answered it


class ServedModel(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What an endpoint said it serves when the shard started (GET /v1/models and /version).

    `root` (the weights vLLM loaded) and `max_model_len` are the served identity: shards that
    report different ones are never resumed or merged together. The rest is provenance.
    """

    model: str  # the id requests name
    root: str | None = None
    max_model_len: int | None = None
    owned_by: str | None = None
    server_version: str | None = None
    error: str | None = None  # why /v1/models could not be read (then nothing is compared)

    def identity(self) -> tuple[str | None, int | None] | None:
        return None if self.root is None and self.max_model_len is None else (self.root, self.max_model_len)

    def describe(self) -> str:
        if self.identity() is None:
            return f"{self.model} (unknown: {self.error or 'not reported'})"
        return f"root {self.root}" + (f", max_model_len {self.max_model_len}" if self.max_model_len is not None else "")


class Provenance(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Where and with what a shard ran: shown once per run by merge's report, flagged if it varies."""

    shardeval: str  # version
    build_id: str | None = None  # the one-file app's build, when run from it
    python: str = ""
    platform: str = ""
    host: str = ""
    plugins: dict[str, str] = {}  # plugin name -> its distribution and version


class Heartbeat(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Who is writing a shard directory and when it last said so (`heartbeat.json`, replaced
    atomically every `period_s`). `status` and `merge` read it to tell a running shard from a
    lost one: a dead pid on the same machine, no refresh for `stale_after_s`, or `ended_at` set
    by a writer that left without closing its manifest."""

    host: str
    pid: int
    started_at: float
    updated_at: float
    period_s: float
    stale_after_s: float
    boot_id: str | None = None  # with pid_ns: the same machine and pid namespace, so the pid can be checked
    pid_ns: str | None = None
    pid_start: int | None = None  # the process's start time in clock ticks: a reused pid is not it
    ended_at: float | None = None
    job: str | None = None  # the scheduler's job that runs it (SLURM `123_4`), for a refused second writer


class GateRule(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A sweep's decision rule (`sweep.gate`, docs/decisions.md): each model against the baseline,
    GO when shown not worse than it by more than `margin`, with error rates `alpha` (a GO under a
    true loss of exactly `margin`; a NO-GO under no difference) and `power` for the plans it gives."""

    margin: Annotated[float, msgspec.Meta(gt=0, lt=1)]
    alpha: Annotated[float, msgspec.Meta(gt=0, le=0.5)] = 0.05
    power: Annotated[float, msgspec.Meta(ge=0.5, lt=1)] = 0.8


class SweepPlan(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A sweep's models in table order, its baseline and shards per model: <out>/sweep_plan.json,
    and in each of its shards' manifests with `service`, the model that shard evaluates."""

    services: list[str]
    baseline: str
    shards: int
    service: str | None = None
    gate: GateRule | None = None  # the sweep's decision rule, when it has one


class ScorerInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Which scorer gave one benchmark's scores in a rescored shard (`shardeval rescore`)."""

    benchmark: str  # its name in the run (its folder)
    scorer: str  # the registered benchmark (or data file) whose `score` was used
    params: dict[str, Any] = {}  # what that scorer was built with
    plugin: str | None = None  # the plugin that registered it
    plugin_version: str | None = None
    scorer_version: str | None = None  # the scorer's declared version (Benchmark.scorer_version)
    fingerprint: str | None = None  # shardeval.identity: also the benchmark's `scorer_fingerprint` here
    replaces: str | None = None  # the source shard's scorer fingerprint


class SourceFile(msgspec.Struct, kw_only=True):
    """A source results file as a rescore began reading it: its size and the hash of those bytes,
    so a resumed rescore can tell the records it already scored are still the source's."""

    bytes: int
    sha256: str


class RescoreProvenance(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Set in a shard written by `shardeval rescore`: the shard whose saved answers it scored again
    (asking no model anything), when, and with which scorers."""

    source: str  # the source shard directory (absolute)
    at: float = 0.0
    shardeval: str = ""  # the version that rescored
    scorers: list[ScorerInfo] = []
    # benchmark -> its source results file as this rescore last read it (empty: a rescore that recorded none)
    sources: dict[str, SourceFile] = {}


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
    served: dict[str, ServedModel] = {}  # service name -> what its endpoint reported at start
    provenance: Provenance | None = None
    sweep: SweepPlan | None = None  # set when the shard is one cell of a sweep (not part of the run's identity)
    # Set by `shardeval rescore` (absent, not null, elsewhere: other manifests are unchanged).
    rescored: RescoreProvenance | msgspec.UnsetType = msgspec.UNSET


def run_id(config_hash: str) -> str:
    """The short run identity every record carries: the first 12 hex digits of the config hash."""
    return config_hash.split(":", 1)[-1][:12]


_encoder = msgspec.json.Encoder()
T = TypeVar("T")


def score_fault(record: ResultRecord) -> str | None:
    """What in the record's `score` and `scores` is not a finite number (`score nan`,
    `scores['acc'] inf`, `scores['em'] True`), or None. JSON has no NaN: msgspec writes it as
    null, and a line whose `scores` hold a null (or a bool, or a string) does not decode, so the
    shard's own reader and the merge skipped a record the shard had counted ok."""
    if record.score is not None and not finite_number(record.score):
        return f"score {record.score!r}"
    for key, value in record.scores.items():
        if not finite_number(value):
            return f"scores[{key!r}] {value!r}"
    return None


def unscorable(record: ResultRecord, who: str, fault: str) -> None:
    """Make `record` an `internal` error that says which scorer gave what (its answer kept, never
    scored): a score that is not a finite number is the scorer's failure, not a wrong answer, and
    a rerun asks the pair again, as for a scorer that raises."""
    record.status, record.error_kind = "error", "internal"
    record.error = f"{who} gave {fault}, not a finite number; fix the scorer (a score must be a finite number)"
    record.score, record.extracted, record.scores = None, None, {}


def encode_line(obj: Any) -> bytes:
    """One JSON line. The last gate of every results file: a ResultRecord still holding a score that
    is not a finite number (a path that did not check it) is written as the error it is, never as
    a line no reader can decode."""
    if isinstance(obj, ResultRecord) and (fault := score_fault(obj)) is not None:
        unscorable(obj, "a scorer", fault)
    return _encoder.encode(obj) + b"\n"


def pretty_json(obj: Any) -> bytes:
    """Indented JSON with a final newline: manifest.json and merge's scores.json and timing.json."""
    return msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n"


@dataclass
class ReadReport:
    """What a tolerant read skipped: torn last lines, lines that do not decode, and records that
    are not this shard's own (another run's, another shard's: counted by reason)."""

    path: str
    n_read: int = 0
    torn_tail: bool = False
    bad_lines: list[int] = field(default_factory=list)
    bad_offsets: list[int] = field(default_factory=list)  # byte offset of each bad line
    foreign: dict[str, int] = field(default_factory=dict)  # why a record is not this shard's -> count
    # Where the read stopped, for a reader that follows a growing file (scan_lines' `follow`):
    end: int = 0  # byte offset after the last whole line read
    n_lines: int = 0  # whole lines read, so a later read numbers its bad lines on from there
    file_id: tuple[int, int] | None = None  # (device, inode) of the file read
    replaced: bool = False  # a follow-up read found another file, or a shorter one: read it again from the start

    def describe(self, name: str | None = None) -> str | None:
        """One line of what was skipped, starting with `name` (default: the path); None if nothing."""
        parts = []
        if self.torn_tail:
            parts.append("a torn last line (an interrupted write) was ignored")
        if self.bad_lines:
            shown = ", ".join(str(n) for n in self.bad_lines[:5])
            parts.append(f"{len(self.bad_lines)} undecodable line(s) skipped (line {shown})")
        if self.foreign:
            why = ", ".join(f"{n} of {reason}" for reason, n in sorted(self.foreign.items()))
            parts.append(f"{sum(self.foreign.values())} record(s) that are not this shard's own refused and never counted ({why})")
        return f"{name or self.path}: " + "; ".join(parts) if parts else None


def scan_lines(path: str, kind: type[T], report: ReadReport, follow: bool = False) -> Iterator[tuple[int, int, T]]:
    """(byte offset, length, decoded record) for each readable line of a JSONL file.

    The single reader of record files (resume, merge and status all use it): a torn last line (a
    crash mid-write) ends the read and is reported; an undecodable line is skipped and reported;
    a missing file yields nothing. Callers decode into their own Struct, so each reads only the
    fields it needs. Which of several records of one cell stands is shardeval.store.standing's rule.

    With `follow`, the read starts where the last read with this `report` stopped (a live status
    reads only what a shard appended since); when the file there is another one, or shorter, it
    yields nothing and sets `report.replaced`, and the caller starts over with a fresh report.
    """
    decode = msgspec.json.Decoder(kind).decode
    try:
        f = open_regular(path)
    except FileNotFoundError:
        report.replaced = follow and report.file_id is not None  # it was there: removed (moved aside by --fresh)
        return
    except OSError as exc:
        raise os_error(exc, "read", fix="check that it is a readable file, or move it aside") from None
    offset = lineno = n_read = 0
    try:
        with f:
            st = os.fstat(f.fileno())
            if follow and report.file_id is not None:
                if (st.st_dev, st.st_ino) != report.file_id or st.st_size < report.end:
                    report.replaced = True
                    return
                offset, lineno = report.end, report.n_lines
                f.seek(offset)
            report.file_id, report.torn_tail = (st.st_dev, st.st_ino), False  # a torn line may be whole by now
            for line in f:  # the hot loop of merge and resume: per line only what every line needs
                lineno += 1
                start = offset
                offset += len(line)
                if line[-1:] != b"\n":
                    if line.strip():
                        report.torn_tail = True
                    offset, lineno = start, lineno - 1  # read again next time, once its writer has ended it
                    break
                try:
                    record = decode(line)
                except (ValueError, RecursionError):  # msgspec's errors and invalid UTF-8 are ValueErrors
                    if line.strip():  # a blank line is no record, and no damage either
                        report.bad_lines.append(lineno)
                        report.bad_offsets.append(start)
                    continue
                n_read += 1
                yield start, offset - start, record
    except OSError as exc:  # an I/O error mid-file, a directory in its place
        raise os_error(exc, "read", fix="check the file system, or move the file aside") from None
    finally:
        report.n_read += n_read
        report.end, report.n_lines = offset, lineno


def read_jsonl(path: str, kind: type[T], report: ReadReport | None = None) -> Iterator[T]:
    """Yield records from a JSONL file, skipping a torn tail and undecodable lines (reported, not fatal)."""
    for _, _, record in scan_lines(path, kind, report if report is not None else ReadReport(path)):
        yield record


def seal_torn_tail(path: str) -> bool:
    """End a file whose last write was cut off with a newline, so appends start on a fresh line.

    The torn fragment stays in place (nothing written is ever removed); readers skip it as an
    undecodable line. Returns whether the file needed sealing.
    """
    try:
        with open_regular(path) as f:
            if f.seek(0, os.SEEK_END) == 0:  # empty
                return False
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return False
    except FileNotFoundError:
        return False
    with open_append(path) as f:
        f.write(b"\n")
    return True


def write_manifest(out_dir: str, manifest: Manifest) -> None:
    """Replace manifest.json atomically so a reader never sees half a manifest. Its reason (an
    error's text) never holds a URL's credentials."""
    if manifest.reason:
        manifest.reason = redact_urls(manifest.reason)
    atomic_write(os.path.join(out_dir, MANIFEST_FILE), pretty_json(manifest))


def read_manifest(out_dir: str) -> Manifest | None:
    path = os.path.join(out_dir, MANIFEST_FILE)
    try:
        data = read_regular(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise os_error(exc, "read", fix="check that it is a readable file") from None
    try:
        return msgspec.json.decode(data, type=Manifest)
    except ValueError as exc:  # msgspec's errors and invalid UTF-8 are ValueErrors
        raise UsageError(f"{path} is not a valid shardeval manifest ({exc}); move that directory aside or pass --fresh") from None
