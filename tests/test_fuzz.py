"""Hostile and malformed input, fuzzed: every entry point that reads something a user, a
scheduler, a disk or a server hands us either succeeds correctly or says a clear UsageError —
never another exception, never a traceback (docs/guarantees.md, G10-G14)."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import msgspec
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shard_factory import make_shard, record
from shardeval.run.client import _Failure, _Reading
from shardeval.config import Config
from shardeval.config.loading import load_config
from shardeval.errors import UsageError
from shardeval.results.merge import merge_run
from shardeval.store.records import ReadReport, ResultRecord, encode_line, read_jsonl
from shardeval.results.report import counts
from shardeval.store.shards import ShardSpec, detect_shard
from shardeval.run.sse import SSEParser

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# --- the config loader ----------------------------------------------------------------------------

KEYS = [
    "services",
    "benchmarks",
    "cluster",
    "output",
    "seed",
    "shuffle_seed",
    "model",
    "type",
    "url",
    "api_key_env",
    "protocol",
    "stream",
    "timeouts",
    "retries",
    "attempts",
    "backoff_base",
    "idle",
    "connect",
    "first_token",
    "total",
    "adaptive",
    "name",
    "solver",
    "service",
    "generation",
    "temperature",
    "max_tokens",
    "stop",
    "extra",
    "repeats",
    "max_problems",
    "max_concurrent",
    "params",
    "metrics",
    "n",
    "dir",
    "trajectories",
    "drain_timeout_s",
    "shards",
    "walltime",
    "system_prompt",
    "bench",
    "accuracy",
    "fail_429",
    "namespace",
    "image",
]
VALID = {
    "services": {"model": {"type": "sim", "bench": "arith", "timeouts": {"idle": 5}, "retries": {"attempts": 3}}},
    "benchmarks": [
        {
            "name": "arith",
            "params": {"n": 20},
            "repeats": 2,
            "max_concurrent": 8,
            "solver": {"type": "simple", "service": "model", "generation": {"temperature": 0.7}},
        }
    ],
    "cluster": {"type": "local"},
    "output": {"dir": "./out"},
    "seed": 1,
}

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(
        [
            "${HOME}",
            "${UNSET_FUZZ_VAR}",
            "${X:-3}",
            "$$",
            "${",
            "sim",
            "api",
            "vllm",
            "slurm",
            "kubernetes",
            "compose",
            "ray",
            "local",
            "arith",
            "x.jsonl",
            "x.yaml",
            "chat_completions",
            "completions",
            "-1",
            "1e9",
        ]
    )
)
nested = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=5),
    max_leaves=25,
)
yamlish = st.text(alphabet=st.sampled_from(list("abcsx: -{}[]\n\t'\"#&*!|>%@`,?0123456789$.\\\u00e9")), max_size=200)


def load_or_refuse(text: str, tmp: Path, overrides: tuple[str, ...] = ()) -> Config | None:
    """The guarantee: a Config, or a one-line UsageError. Anything else propagates and fails."""
    path = tmp / "config.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        return load_config(str(path), overrides, env={"HOME": "/home/u", "X": ""})
    except UsageError as exc:
        assert "\n" not in str(exc) and str(exc).strip()
        return None


@pytest.fixture(scope="module")
def cfg_dir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="fuzzcfg"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@FAST
@given(yamlish)
def test_config_loader_on_random_yamlish_text(cfg_dir, text):
    load_or_refuse(text, cfg_dir)


@FAST
@given(nested)
def test_config_loader_on_random_nested_structures(cfg_dir, data):
    load_or_refuse(yaml.safe_dump(data, allow_unicode=True), cfg_dir)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


@FAST
@given(st.randoms(use_true_random=False), nested, st.lists(st.text(max_size=30), max_size=2))
def test_config_loader_on_a_valid_config_with_one_value_replaced(cfg_dir, rnd, junk, overrides):
    """The realistic mistake: a config that is right except for one value (and random -O's)."""
    data = msgspec.json.decode(msgspec.json.encode(VALID))
    assert load_or_refuse(yaml.safe_dump(data), cfg_dir) is not None
    path = rnd.choice(list(_paths(data))[1:])
    node = data
    for seg in path[:-1]:
        node = node[seg]
    node[path[-1]] = junk
    load_or_refuse(yaml.safe_dump(data, allow_unicode=True), cfg_dir, tuple(overrides))


# --- the shard detector ---------------------------------------------------------------------------

SHARD_VARS = [
    "NEL_SHARD_IDX",
    "NEL_TOTAL_SHARDS",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
    "SLURM_ARRAY_TASK_COUNT",
    "JOB_COMPLETION_INDEX",
    "SHARDEVAL_TOTAL_SHARDS",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
]
env_values = st.one_of(
    st.integers(min_value=-5, max_value=10**20).map(str),
    st.text(max_size=8),
    st.sampled_from(["", " 3", "3 ", "0x1", "1_000", "\u0661", "\uff13", "1.0", "nan", "-0", "+2", "007"]),
)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.sampled_from(SHARD_VARS), env_values, max_size=6),
    st.none() | st.text(max_size=10) | st.sampled_from(["0/4", "3/4", "4/4", "-1/4", "1/0", "a/b", "1/", "/", "1/2/3"]),
    st.none() | st.integers(min_value=-3, max_value=10**6),
)
def test_shard_detection_on_random_environments(env, flag, config_total):
    try:
        spec = detect_shard(flag, env, config_total)
    except UsageError as exc:
        assert "\n" not in str(exc) and str(exc).strip()
        return
    assert spec is None or (isinstance(spec, ShardSpec) and 0 <= spec.idx < spec.total)


# --- the record reader ----------------------------------------------------------------------------

good = ResultRecord(benchmark="arith", problem_idx=3, problem_id="arith-3", repeat=0, seed=9, status="ok", score=1.0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.binary(max_size=200)
        | st.just(encode_line(good))
        | st.sampled_from(
            [
                b'{"benchmark": 1}\n',
                b'{"benchmark":"arith","problem_idx":"x","problem_id":"a","repeat":0,"seed":0,"status":"ok"}\n',
                b'{"benchmark":"arith","problem_idx":1,"problem_id":"a","repeat":0,"seed":0,"status":"maybe"}\n',
                b"[]\n",
                b"null\n",
                b"\xff\xfe\n",
                b'{"a":' * 50 + b"\n",
                encode_line(good)[:20],
            ]
        ),
        max_size=30,
    )
)
def test_record_reader_never_raises_and_keeps_every_good_line(pieces):
    data = b"".join(pieces)
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
        f.write(data)
    try:
        report = ReadReport(f.name)
        got = list(read_jsonl(f.name, ResultRecord, report))
    finally:
        os.unlink(f.name)
    lines = data.split(b"\n")
    complete = lines[:-1]  # the piece after the last LF is a torn tail (or empty)
    want = sum(1 for line in complete if line + b"\n" == encode_line(good))
    assert sum(1 for r in got if r == good) >= want
    assert report.n_read == len(got) <= len(complete)
    assert report.torn_tail == bool(lines[-1].strip())
    assert report.describe() is None or report.describe().startswith(f.name)


def test_record_reader_on_a_huge_line_between_good_ones(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(encode_line(good) + b'{"benchmark":"' + b"x" * (16 << 20) + b'"\n' + encode_line(good))
    report = ReadReport(str(path))
    assert list(read_jsonl(str(path), ResultRecord, report)) == [good, good]
    assert report.bad_lines == [2]


# --- the SSE parser and the stream reader on hostile bytes ---------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.binary(max_size=64)
        | st.sampled_from(
            [
                b"\r",
                b"\n",
                b"\r\n",
                b": ping\n",
                b"data:",
                b"data: [DONE]\n\n",
                b"\xe2\x9c",
                b"\x93",
                b"\xef\xbb\xbf",
                b'data: {"choices":[',
                b"\n\n",
            ]
        ),
        max_size=40,
    )
)
def test_stream_reader_on_random_bytes_gives_an_answer_or_a_typed_failure(chunks):
    """Whatever a server sends: events parse or the attempt fails with a kind — never a crash."""
    parser = SSEParser()
    reading = _Reading(0.0)
    try:
        for chunk in chunks:
            for data in parser.feed(chunk):
                reading.event(data, 1.0)
        for data in parser.finish():
            reading.event(data, 1.0)
    except _Failure as exc:
        assert exc.kind in ("protocol", "server_error", "client", "rate_limited", "timeout")
        return
    assert isinstance(reading.completion(2.0).text, str)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(max_size=12), min_size=1, max_size=6),
    st.lists(st.integers(0, 400), max_size=20),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
)
def test_a_real_stream_split_anywhere_with_any_line_ending_reads_the_same(pieces, cuts, eol):
    """vLLM-shaped chunks with multibyte text, comments and a chosen line ending, cut at random
    byte offsets (inside CRLF pairs and UTF-8 characters): the answer text is exactly the pieces."""
    events = [b": ping" + eol + b"data: " + msgspec.json.encode({"choices": [{"delta": {"content": p}}]}) + eol + eol for p in pieces]
    events.append(b"data: " + msgspec.json.encode({"choices": [{"delta": {}, "finish_reason": "stop"}]}) + eol + eol)
    events.append(b"data: [DONE]" + eol + eol)
    data = b"".join(events)
    points = sorted({min(c, len(data)) for c in cuts})
    bounds = [0, *points, len(data)]
    parser, reading = SSEParser(), _Reading(0.0)
    for a, b in zip(bounds, bounds[1:]):
        for payload in parser.feed(data[a:b]):
            reading.event(payload, 1.0)
    for payload in parser.finish():
        reading.event(payload, 1.0)
    c = reading.completion(2.0)
    assert c.text == "".join(pieces) and c.finish_reason == "stop" and reading.done


# --- merge on mutilated shard directories --------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.randoms(use_true_random=False))
def test_merge_on_mutilated_shard_directories_counts_right_or_refuses(rnd: random.Random):
    """Shards deleted, duplicated, stripped of their manifest, given a foreign config, another
    benchmark's results, garbage lines: merge gives consistent counts or a one-line refusal."""
    root = Path(tempfile.mkdtemp(prefix="fuzzmerge"))
    try:
        total, n = rnd.randint(1, 5), rnd.randint(0, 30)
        for i in range(total):
            if rnd.random() < 0.15:
                continue  # a shard that never ran
            make_shard(str(root), i, total, n_problems=n, repeats=2)
        shards = sorted(p for p in root.iterdir() if p.is_dir())
        for shard in shards:
            roll = rnd.random()
            if roll < 0.1:
                (shard / "manifest.json").unlink()  # results without a manifest: an orphan
            elif roll < 0.2:
                shutil.copytree(shard, root / (shard.name + "_copy"))  # a duplicate shard
            elif roll < 0.25:
                make_shard(str(root), 0, total, n_problems=n, repeats=2, name=shard.name + "_odd", config_hash="sha256:other")
            elif roll < 0.35:
                (shard / "gsm8k").mkdir()
                (shard / "gsm8k" / "results.jsonl").write_bytes(encode_line(record("gsm8k", 0, 0, 0)))
            elif roll < 0.5:
                path = shard / "arith" / "results.jsonl"
                with open(path, "ab") as f:
                    f.write(rnd.choice([b"garbage\n", encode_line(record("other", 1, 0, 0)), b'{"torn": ']))
            elif roll < 0.55:
                (shard / "manifest.json").write_bytes(b'{"version": ')  # a corrupt manifest
        try:
            result = merge_run(str(root))
        except UsageError as exc:
            assert "\n" not in str(exc)
            return
        for b in result.benchmarks:
            c = counts(b)
            assert c["n_records"] + c["n_missing"] == c["n_expected"] == n * 2
            assert c["n_ok"] + c["n_errors"] == c["n_records"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
