"""The stdlib msgspec fallback against the real msgspec: same bytes, same values, same errors.

(a) Property tests in this process: random JSON values and the repo's own record Structs encode,
    format and decode identically (the record modules are re-executed with the fallback as
    their `msgspec`, so both sides use the very same class definitions).
(b) Validation errors: msgspec's raw messages and the config loader's one-line explanations
    match, in process and through `load_config` in a subprocess on each side.
(c) A real unloadable msgspec: the installed package copied with its compiled `_core` replaced by
    garbage (importing it raises "invalid ELF header"), first on PYTHONPATH, then a sharded
    evaluation and merges run as subprocesses on both sides and write the same files.
"""

from __future__ import annotations

import enum
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardeval.msgspec_compat import USING_FALLBACK, msgspec as R
from shardeval_shims import msgspec_fallback as F

REPO = Path(__file__).resolve().parent.parent
IMPORT_LINE = "from shardeval.msgspec_compat import msgspec"
NOTICE = re.compile(
    r"^shardeval: notice: msgspec cannot load here \(.+\); using the stdlib fallback \(same output, slower\)$"
)

pytestmark = pytest.mark.skipif(USING_FALLBACK, reason="needs the real msgspec to compare against")


def outcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    """A call's result or error, comparable across the two implementations."""
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - the error is what is compared
        return ("error", type(exc).__name__, str(exc))
    return ("ok", type(value).__name__, value if isinstance(value, bytes) else repr(value))


def with_fallback(name: str) -> types.ModuleType:
    """Module `name` executed again with the fallback as its `msgspec` (cached per name)."""
    alias = "_fallback_" + name.replace(".", "_")
    if alias in sys.modules:
        return sys.modules[alias]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).read_text()
    assert IMPORT_LINE in source
    module = types.ModuleType(alias)
    module.__file__ = spec.origin
    sys.modules[alias] = module  # get_type_hints finds the module's globals through sys.modules
    code = compile(source.replace(IMPORT_LINE, "from shardeval_shims import msgspec_fallback as msgspec"), spec.origin, "exec")
    exec(code, module.__dict__)
    return module


# --- (a) encoding, formatting and decoding ------------------------------------------------------

text = st.text(st.characters(codec="utf-8"), max_size=12)
ints = st.integers() | st.integers(min_value=-(2**80), max_value=2**80)
floats = st.floats() | st.sampled_from([1e16, 1e15, 1e-5, 1e-7, 0.1, 5e-324, 1.7976931348623157e308, -0.0, 2.5e-5])
scalars = st.none() | st.booleans() | ints | floats | text
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same(a: Any, b: Any) -> bool:
    """Equal, with equal types all the way down (1 is not 1.0, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@PROPERTY
@given(json_values)
def test_encode_format_decode_random_values(value: Any) -> None:
    encoded = R.json.encode(value)
    assert F.json.encode(value) == encoded
    assert F.json.encode(value, order="sorted") == R.json.encode(value, order="sorted")
    for indent in (2, 0, -1, 4):
        assert F.json.format(encoded, indent=indent) == R.json.format(encoded, indent=indent)
    assert same(F.json.decode(encoded), R.json.decode(encoded))
    assert same(F.to_builtins(value), R.to_builtins(value))


@PROPERTY
@given(json_values, st.sampled_from([None, 1, 2, "\t"]), st.booleans())
def test_format_keeps_foreign_text(value: Any, indent: Any, ascii_only: bool) -> None:
    """JSON written by another tool (`1e+16`, `\\u00e9`, odd spacing, NaN) formats or fails alike."""
    written = json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode()
    for out_indent in (2, 0, -1):
        assert outcome(lambda: F.json.format(written, indent=out_indent)) == outcome(
            lambda: R.json.format(written, indent=out_indent)
        )
    assert outcome(lambda: repr(F.json.decode(written))) == outcome(lambda: repr(R.json.decode(written)))


def test_edge_scalars_encode_byte_for_byte() -> None:
    values = [1e16, 1e15, 1e17, 1e21, 1e22, 1e-4, 1e-5, 1e-6, 1e-7, 2.5e-5, 0.1, 1 / 3, 5e-324, 2.2250738585072014e-308,
              1.7976931348623157e308, -0.0, 0.0, 100.0, 9007199254740993.0, math.nan, math.inf, -math.inf, 2**63, 2**64,
              -(2**63) - 1, 10**30, True, False, None, "", "".join(map(chr, range(0x80))) + "é\u2028\u2029\U0001F600"]
    for value in values:
        assert F.json.encode(value) == R.json.encode(value), value
        assert F.json.encode([value, {"k": value}]) == R.json.encode([value, {"k": value}]), value


def test_malformed_json_fails_with_msgspecs_message() -> None:
    cases = [b"", b" ", b"1 2", b"[1,2", b"[1,2,]", b'{"a":1,}', b'{"a" 1}', b'{"a":}', b"{a:1}", b"nul", b"NaN", b"-Infinity",
             b'"a\x01"', b'"\\x"', b'"\\u12"', b'"\\ud800"', b'"\\udc00"', b'"\\ud800\\u0041"', b"\xff", b'"\xff"', b"01", b"-", b"1.",
             b"1e", b".5", b"1e400", b"[1]x", b"[1 2]", b"{,}", b"truex", b"trux", b'{"a":1,"a":2}', b"\xef\xbb\xbf1"]
    for case in cases:
        assert outcome(lambda: F.json.decode(case)) == outcome(lambda: R.json.decode(case)), case
        assert outcome(lambda: F.json.format(case)) == outcome(lambda: R.json.format(case)), case


MUTATIONS = [b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b" ", b"u", b"0", b"9", b"e", b"-", b".", b"n", b"t", b"\x01",
             b"\xff", b"\\ud800", b"\\udc00", b"1e400", b"NaN", b'"k":', b"99999999999999999999"]


@PROPERTY
@given(json_values, st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["cut", "insert", "replace", "delete"]),
                                       st.sampled_from(MUTATIONS)), min_size=1, max_size=3))
def test_damaged_json_fails_alike(value: Any, damage: list[tuple[float, str, bytes]]) -> None:
    """Truncated or corrupted JSON: the same value or the same error (wording and byte offset)."""
    import shardeval.records as real

    fake = with_fallback("shardeval.records")
    doc = bytearray(R.json.encode({"benchmark": "b", "problem_idx": 1, "problem_id": "p", "repeat": 0, "seed": 2,
                                   "status": "ok", "scores": {"a": 0.5}, "response": value if isinstance(value, str) else "r",
                                   "extra": value}))
    for where, op, piece in damage:
        i = int(where * len(doc))
        if op == "cut":
            del doc[i:]
        elif op == "insert":
            doc[i:i] = piece
        elif op == "replace":
            doc[i : i + 1] = piece
        else:
            del doc[i : i + 1]
    data = bytes(doc)
    assert outcome(lambda: F.json.decode(data)) == outcome(lambda: R.json.decode(data))
    assert outcome(lambda: F.json.decode(data, type=fake.ResultRecord)) == outcome(lambda: R.json.decode(data, type=real.ResultRecord))
    assert outcome(lambda: F.json.format(data)) == outcome(lambda: R.json.format(data))


STRUCTS = """
from __future__ import annotations
from typing import Annotated, Any, Literal, Optional
Meta = msgspec.Meta

class Base(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True, rename="camel"):
    type_name: str
    shards: int | None = None
    tags: list[str] = []

class Child(Base, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    type_name: str = "child"
    wall_time: str
    port: Annotated[int, Meta(ge=1, le=65535)] = 6379
    ratio: Annotated[float, Meta(gt=0, lt=1)] | None = None
    pool: Optional[Pool] = None

class Pool(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    nodes: Annotated[int, Meta(ge=1)] = 1
    mode: Literal["a", "b"] | int = "a"
    extra: dict[str, Any] = msgspec.field(default_factory=dict, name="Extra")

class Pos(msgspec.Struct, gc=False):
    x: int
    y: float = 2.0

class PosKw(Pos, kw_only=True):
    w: int
    x: int = 0

class Frozen(msgspec.Struct, frozen=True):
    a: tuple[int, int] = (1, 2)
    b: str = ""
"""
STRUCT_EXPRESSIONS = [
    "Child(wall_time='1')", "Child(wall_time='1', type_name='child', shards=0, tags=[], pool=Pool(extra={'k': [1.5, None]}))",
    "Child()", "Child(wall_time='1', bogus=1)", "Pos(1)", "Pos(1, 2.5, 3)", "Pos(1, x=2)", "PosKw(3)", "PosKw(w=3)",
    "Frozen() == Frozen((1, 2), '')", "hash(Frozen()) == hash(Frozen())", "Pool(mode=3)", "Pool(nodes=0)",
]
STRUCT_INPUTS = [
    {"wallTime": "1"}, {"wallTime": 5}, {"wall_time": "1"}, {"wallTime": "1", "port": 0}, {"wallTime": "1", "port": "80"},
    {"wallTime": "1", "ratio": 1}, {"wallTime": "1", "ratio": "0.5"}, {"wallTime": "1", "pool": {"nodes": 0}},
    {"wallTime": "1", "pool": {"mode": "c"}}, {"wallTime": "1", "pool": {"mode": "7"}}, {"wallTime": "1", "pool": {"Extra": {"a": 1}}},
    {"wallTime": "1", "pool": {"extra": {}}}, {"wallTime": "1", "tags": "x"}, {"wallTime": "1", "tags": ["x", 1]}, {},
    {"typeName": None, "wallTime": "1"}, {"wallTime": "1", "shards": "null"}, {"wallTime": "1", "shards": 2.0}, [], "x",
]


def describe_fields(lib: Any, cls: type) -> list[tuple[Any, ...]]:
    fields = lib.structs.fields(cls)
    return [(f.name, f.encode_name, f.required, re.sub(r"_structs_\w+\.", "", repr(f.type)), repr(f.default)) for f in fields]


def test_struct_definitions_behave_alike() -> None:
    """Field order, renames, defaults, omit_defaults, constructor errors and validation, side by side."""
    sides = {}
    for name, lib in (("real", R), ("fake", F)):
        module = types.ModuleType(f"_structs_{name}")
        module.msgspec = lib  # type: ignore[attr-defined]
        sys.modules[module.__name__] = module
        exec(STRUCTS, module.__dict__)
        sides[name] = module
    for cls in ("Base", "Child", "Pool", "Pos", "PosKw", "Frozen"):
        r, f = getattr(sides["real"], cls), getattr(sides["fake"], cls)
        for attr in ("__struct_fields__", "__struct_encode_fields__", "__match_args__"):
            assert getattr(f, attr) == getattr(r, attr), (cls, attr)
        assert repr(f.__struct_defaults__) == repr(r.__struct_defaults__)
        assert describe_fields(F, f) == describe_fields(R, r)
    for expression in STRUCT_EXPRESSIONS:
        got = {name: outcome(lambda: eval(expression, vars(module))) for name, module in sides.items()}
        assert got["fake"] == got["real"], expression
        value = {name: outcome(lambda: lib.json.encode(eval(expression, vars(module))))
                 for (name, module), lib in zip(sides.items(), (R, F))}
        assert value["fake"] == value["real"], expression
    for data in STRUCT_INPUTS:
        for strict in (True, False):
            got = {name: outcome(lambda: lib.convert(data, module.Child, strict=strict))
                   for (name, module), lib in zip(sides.items(), (R, F))}
            assert got["fake"] == got["real"], (data, strict)
        encoded = R.json.encode(data)
        got = {name: outcome(lambda: lib.json.decode(encoded, type=module.Child)) for (name, module), lib in zip(sides.items(), (R, F))}
        assert got["fake"] == got["real"], data
        if got["real"][0] == "ok":
            obj = {name: lib.json.decode(encoded, type=module.Child) for (name, module), lib in zip(sides.items(), (R, F))}
            assert F.json.encode(obj["fake"]) == R.json.encode(obj["real"])
            assert repr(F.to_builtins(obj["fake"])) == repr(R.to_builtins(obj["real"]))
            assert repr(F.structs.replace(obj["fake"], port=1)) == repr(R.structs.replace(obj["real"], port=1))


class Color(str, enum.Enum):
    RED = "a"


class Level(enum.IntEnum):
    LOW = 1


SCALAR_TYPES = "[int, float, bool, str, None, int | None, float | None, str | int | float, Literal['a', 'b'] | None, Literal[1, 2], " \
    "Annotated[int, Meta(ge=0)] | Literal['all'] | None, list[int], tuple[int, int], tuple[int, ...], set[str], dict[str, int], " \
    "dict[str, list[float]], Annotated[str, Meta(min_length=2, pattern='^a')], Annotated[list[int], Meta(max_length=1)], Any, " \
    "Color, Level | None, dict[int, str], bytes | None]"
SCALAR_INPUTS = [0, 1, -3, 2**64, 5.0, 5.5, -0.0, 1e300, math.nan, "5", "5.0", "1e3", "-1", "x", "a", "all", "ab", "true", "null",
                 "nan", "1e400", "", "YWI=", True, False, None, [], [1, "2"], [1, 2, 3], ["a", "a"], {}, {"a": 1}, {"a": "1"},
                 {"a": [1, "x"]}, {1: 2}, {"1": "x"}, (1, 2), {"x"}, Color.RED, Level.LOW, b"ab"]


def test_convert_and_decode_tables_match() -> None:
    from typing import Annotated, Literal  # noqa: F401 - used by the type table

    names = {"Any": Any, "Annotated": Annotated, "Literal": Literal, "Color": Color, "Level": Level}
    type_r = eval(SCALAR_TYPES, names | {"Meta": R.Meta})
    type_f = eval(SCALAR_TYPES, names | {"Meta": F.Meta})
    for tr, tf in zip(type_r, type_f):
        for value in SCALAR_INPUTS:
            for strict in (True, False):
                assert outcome(lambda: F.convert(value, tf, strict=strict)) == outcome(
                    lambda: R.convert(value, tr, strict=strict)
                ), (tr, value, strict)
            encoded = outcome(lambda: R.json.encode(value))
            if encoded[0] == "ok":
                data = encoded[2]
                assert outcome(lambda: F.json.decode(data, type=tf)) == outcome(lambda: R.json.decode(data, type=tr)), (tr, data)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


result_kwargs = st.fixed_dictionaries(
    {"benchmark": text, "problem_idx": ints, "problem_id": text, "repeat": ints, "seed": ints,
     "status": st.sampled_from(["ok", "error"])},
    optional={
        "error_kind": optional(text), "error": optional(text), "attempts": ints, "response": text,
        "extracted": optional(text), "reference": optional(text), "score": optional(floats),
        "scores": st.dictionaries(text, floats, max_size=3), "finish_reason": optional(text),
        "prompt_tokens": optional(ints), "completion_tokens": optional(ints), "ttft_s": optional(floats),
        "latency_s": optional(floats), "started_at": floats, "shard": ints, "cluster": optional(text),
    },
)
messages = st.lists(st.tuples(st.sampled_from(["system", "user", "assistant"]), text), max_size=3)
trajectory_kwargs = st.fixed_dictionaries(
    {"benchmark": text, "problem_idx": ints, "problem_id": text, "repeat": ints, "messages": messages},
    optional={"request": st.dictionaries(text, json_values, max_size=3), "status": st.sampled_from(["ok", "error"])},
)
bench_kwargs = st.fixed_dictionaries(
    {"name": text, "range": st.tuples(ints, ints), "repeats": ints, "n_problems": ints, "dataset_fingerprint": text},
    optional={"metrics": st.lists(text, max_size=3), "n_ok": ints, "n_error": ints},
)
manifest_kwargs = st.fixed_dictionaries(
    {"version": text, "shard_idx": ints, "total_shards": ints, "shard_source": text, "config_hash": text,
     "benchmarks": st.lists(bench_kwargs, max_size=2)},
    optional={
        "state": st.sampled_from(["running", "complete", "failed", "interrupted"]), "started_at": floats,
        "finished_at": optional(floats), "permutation_seed": optional(ints), "reason": optional(text),
        "config": st.dictionaries(text, json_values, max_size=3),
    },
)


def build(records: types.ModuleType, kind: str, kwargs: dict[str, Any]) -> Any:
    kwargs = dict(kwargs)
    if kind == "TrajectoryRecord":
        kwargs["messages"] = [records.Message(role, content) for role, content in kwargs["messages"]]
    if kind == "Manifest":
        kwargs["benchmarks"] = [records.BenchmarkManifest(**b) for b in kwargs["benchmarks"]]
    return getattr(records, kind)(**kwargs)


def check_record(kind: str, kwargs: dict[str, Any], tmp: Path | None = None) -> None:
    import shardeval.records as real

    fake = with_fallback("shardeval.records")
    r, f = build(real, kind, kwargs), build(fake, kind, kwargs)
    assert repr(f) == repr(r)
    line = real.encode_line(r)
    assert fake.encode_line(f) == line
    assert F.json.encode(F.to_builtins(f)) == R.json.encode(R.to_builtins(r))
    assert outcome(lambda: F.json.Decoder(getattr(fake, kind)).decode(line)) == outcome(
        lambda: R.json.Decoder(getattr(real, kind)).decode(line)
    )
    if tmp is not None:
        (tmp / "r").mkdir(exist_ok=True)
        (tmp / "f").mkdir(exist_ok=True)
        real.write_manifest(str(tmp / "r"), r)
        fake.write_manifest(str(tmp / "f"), f)
        written = (tmp / "r" / real.MANIFEST_FILE).read_bytes()
        assert (tmp / "f" / real.MANIFEST_FILE).read_bytes() == written
        decoded = outcome(lambda: F.json.decode(written, type=fake.Manifest)), outcome(lambda: R.json.decode(written, type=real.Manifest))
        assert decoded[0] == decoded[1]


@PROPERTY
@given(result_kwargs)
def test_result_records_are_byte_identical(kwargs: dict[str, Any]) -> None:
    check_record("ResultRecord", kwargs)


@PROPERTY
@given(trajectory_kwargs)
def test_trajectory_records_are_byte_identical(kwargs: dict[str, Any]) -> None:
    check_record("TrajectoryRecord", kwargs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kwargs=manifest_kwargs)
def test_manifests_are_byte_identical(kwargs: dict[str, Any], tmp_path: Path) -> None:
    check_record("Manifest", kwargs, tmp_path)


def test_reading_records_tolerates_the_same_lines(tmp_path: Path) -> None:
    import shardeval.records as real

    fake = with_fallback("shardeval.records")
    lines = [
        b'{"benchmark":"a","problem_idx":0,"problem_id":"x","repeat":0,"seed":1,"status":"ok","score":1}\n',
        b'{"benchmark":"a","problem_idx":"1","problem_id":"x","repeat":0,"seed":1,"status":"ok"}\n',
        b'{"benchmark":"a","problem_idx":2,"problem_id":"x","repeat":0,"seed":1,"status":"maybe"}\n',
        b'{"benchmark":"a","problem_idx":3,"problem_id":"x","repeat":0,"seed":1,"status":"ok","extra":[1,{}]}\n',
        b'\n',
        b'{"benchmark":"a","problem_idx":4,"problem_id":"\\ud83d\\ude00","repeat":0,"seed":1,"status":"ok","started_at":1e400}\n',
        b'{"benchmark":"a","problem_idx":5,"problem_id":"x","repeat":0,"seed":1,"status":"ok"}\n',
        b'{"benchmark":"a","problem_idx":6,"prob',
    ]
    path = tmp_path / "results.jsonl"
    path.write_bytes(b"".join(lines))
    got = {}
    for name, module in (("real", real), ("fake", fake)):
        report = module.ReadReport(str(path))
        got[name] = ([repr(r) for r in module.read_jsonl(str(path), module.ResultRecord, report)], report.describe())
    assert got["fake"] == got["real"]
    assert got["real"][1] is not None and "torn" in got["real"][1]


# --- (b) validation errors --------------------------------------------------------------------

BAD_SECTIONS = [
    "servics: {}",
    "benchmarks: [{name: arith, repeats: x}]",
    "benchmarks: {name: arith}",
    "benchmarks: [{repeats: 2}]",
    "benchmarks: [{name: a, solver: {generation: {temperature: [1]}}}]",
    "benchmarks: [{name: a, solver: {generation: {stop: END}}}]",
    "benchmarks: [{name: a, solver: {generation: {max_tokens: 2.5}}}]",
    "benchmarks: [{name: a, solvr: {}}]",
    "benchmarks: [{name: a}, {name: b, params: {1: 2}}]",
    "benchmarks: [{name: a, max_problems: '7'}]",
    "output: {trajectories: yes}",
    "output: {trajectories: 'yes'}",
    "output: {trajectories: 'true', progress_interval_s: '2.5'}",
    "output: {progress_interval_s: '1e400'}",
    "output: {drain_timeout_s: -1}",
    "output: {progress_interval_s: '-0.5'}",
    "benchmarks: [{name: a, repeats: 0}]",
    "benchmarks: [{name: a, max_concurrent: '0'}]",
    "benchmarks: [{name: a, solver: {generation: {top_p: 1.5, temperature: -1}}}]",
    "cluster: {shards: 0}",
    "output: []",
    "seed: 1.5",
    "seed: '12'",
    "shuffle_seed: 'null'",
    "services: {model: [1, 2]}",
    "services: [1]",
    "cluster: 5",
]


@pytest.mark.parametrize("section", BAD_SECTIONS)
def test_config_section_errors_match(section: str) -> None:
    import shardeval.config as real_config

    fake_config = with_fallback("shardeval.config")
    data = yaml.safe_load(section)
    raw_r = outcome(lambda: R.convert(data, real_config.RawConfig, strict=False))
    raw_f = outcome(lambda: F.convert(data, fake_config.RawConfig, strict=False))
    assert raw_f == raw_r
    strict_r = outcome(lambda: R.convert(data, real_config.RawConfig))
    assert outcome(lambda: F.convert(data, fake_config.RawConfig)) == strict_r
    as_json = R.json.encode(data)
    assert outcome(lambda: F.json.decode(as_json, type=fake_config.RawConfig)) == outcome(
        lambda: R.json.decode(as_json, type=real_config.RawConfig)
    )
    told_r = outcome(lambda: real_config.decode_section(data, real_config.RawConfig, source="c.yaml"))
    told_f = outcome(lambda: fake_config.decode_section(data, fake_config.RawConfig, source="c.yaml"))
    assert told_f == told_r


# A worker run on each side: loads configs with shardeval's own loader and reports everything.
WORKER = r"""
import base64, json, sys
from shardeval.msgspec_compat import USING_FALLBACK, msgspec
import shardeval.config
from shardeval.config import Config, config_for_manifest, config_hash, load_config
from shardeval.errors import UsageError
from shardeval.plugins import registry

def b64(data):
    return base64.b64encode(data).decode()

def describe_structs():
    import typing
    import shardeval.records, shardeval.merge, shardeval.client
    todo = [shardeval.config.Config, shardeval.config.RawConfig, shardeval.records.Manifest, shardeval.records.ResultRecord,
            shardeval.records.TrajectoryRecord, shardeval.client._Body, shardeval.client.Completion]
    for group in registry().entries.values():
        for entry in group.values():
            todo.append(getattr(entry, "config", None))
    out = {}
    while todo:
        tp = todo.pop()
        if typing.get_origin(tp) is not None or type(tp) is type(int | None):
            todo.extend(typing.get_args(tp))
            continue
        if not (isinstance(tp, type) and issubclass(tp, msgspec.Struct)) or tp.__qualname__ in out:
            continue
        fields = msgspec.structs.fields(tp)
        out[tp.__module__ + "." + tp.__qualname__] = [
            list(tp.__struct_fields__), list(tp.__struct_encode_fields__), repr(tp.__struct_defaults__),
            [(f.name, f.encode_name, f.required, repr(f.type), repr(f.default)) for f in fields],
        ]
        todo.extend(f.type for f in fields)
    return out

job = json.load(sys.stdin)
results = []
for case in job["cases"]:
    try:
        config = load_config(case["path"], case.get("overrides", []), env=case.get("env", {}))
    except UsageError as exc:
        results.append({"error": str(exc)})
        continue
    encoded = msgspec.json.encode(config)
    try:
        roundtrip = repr(msgspec.json.decode(encoded, type=Config))
    except msgspec.ValidationError as exc:
        roundtrip = "ValidationError: " + str(exc)
    results.append({
        "encode": b64(encoded),
        "format": b64(msgspec.json.format(encoded, indent=2)),
        "manifest_config": b64(msgspec.json.encode(config_for_manifest(config))),
        "builtins_sorted": b64(msgspec.json.encode(msgspec.to_builtins(config), order="sorted")),
        "hash": config_hash(config),
        "repr": repr(config),
        "roundtrip": roundtrip,
    })
print(json.dumps({"fallback": USING_FALLBACK, "results": results, "structs": describe_structs()}))
"""

CONFIG_CASES: list[tuple[str, list[str], dict[str, str]]] = [
    ("@examples/arith_sim.yaml", [], {}),
    ("@examples/arith_sim.yaml", ["benchmarks.0.repeats=7", "services.model.accuracy=0.5", "output.trajectories=false"], {}),
    ("@examples/arith_sim.yaml", ["services.model.timeouts.connect=soon"], {}),
    ("@examples/arith_sim.yaml", ["services.model.protocol=grpc"], {}),
    ("@examples/arith_sim.yaml", ["services.model.accuracyy=1"], {}),
    ("@examples/arith_sim.yaml", ["services.model.retries.attempts=2.5"], {}),
    ("@examples/arith_sim.yaml", ["services.model.retries.attempts=0"], {}),
    ("@examples/arith_sim.yaml", ["services.model.timeouts.idle=0"], {}),
    ("@examples/arith_sim.yaml", ["services.model.retries.backoff_max=-1"], {}),
    ("@examples/arith_sim.yaml", ["services.model.accuracy=1.5"], {}),
    (
        "services: {model: {type: sim, bench_params: {n: '${N}'}}}\n"
        "benchmarks: [{name: arith, params: {n: '${N:-500}', label: 'n${N}', flag: '${F}'}}]\n",
        [], {"N": "5", "F": "true"},
    ),
    ("@examples/arith_sim.yaml", ["benchmarks.0.max_problems=abc"], {}),
    ("@examples/arith_sim.yaml", ["cluster.shards=two"], {}),
    ("@examples/arith_sim.yaml", ["benchmarks[0].solver.generation.temperature=[1]"], {}),
    ("@examples/slurm_arith_sim.yaml", [], {}),
    ("@examples/slurm_arith_sim.yaml", ["cluster.ray_port=70000"], {}),
    ("@examples/slurm_arith_sim.yaml", ["cluster.walltime=null"], {}),
    ("@examples/slurm_arith_sim.yaml", ["cluster.node_pools.gpu.nodes=0"], {}),
    ("@examples/ray_arith_sim.yaml", ["cluster.num_cpus=-0.5"], {}),
    ("@examples/ray_arith_sim.yaml", ["cluster.max_retries=-2"], {}),
    ("@examples/ray_arith_sim.yaml", ["cluster.resources.gpu_node=-1"], {}),
    (
        "services: {model: {type: api, url: 'http://h/v1', model: m, timeouts: {connect: '${T}'}}}\n"
        "benchmarks: [{name: arith, repeats: '${REPEATS}', solver: {generation: {temperature: '${TEMP}'}}}]\n"
        "seed: '${SEED:-7}'\n",
        [], {"T": "2.5", "REPEATS": "3", "TEMP": "0.5"},
    ),
    (
        "services: {model: {type: api, url: 'http://h/v1', model: m}}\nbenchmarks: [{name: arith}]\n"
        "cluster: {type: kubernetes, parallelism: 0}\n",
        [], {},
    ),
    (
        "services: {model: {type: api, url: 'http://h/v1', model: m}}\nbenchmarks: [{name: arith}]\n"
        "cluster: {type: kubernetes, tolerations: [{key: a, operator: Maybe}]}\n",
        [], {},
    ),
    (
        "services: {model: {type: api, url: 'http://h/v1', model: m}}\nbenchmarks: [{name: arith}]\n"
        "cluster: {type: kubernetes, tolerations: [{key: a, tolerationSeconds: soon}], resources: {requests: {cpu: '500m'}}}\n",
        [], {},
    ),
    (
        "services: {model: {type: api, url: 'http://h/v1', model: m}}\nbenchmarks: [{name: arith}]\n"
        "cluster: {type: kubernetes, tolerations: [{key: a, toleration_seconds: 5}]}\n",
        [], {},
    ),
    (
        "services: {model: {type: api, url: 'http://h/v1', model: m}}\nbenchmarks: [{name: arith}]\n"
        "cluster: {type: kubernetes, resources: {requests: {cpu: [1]}, gpus: 2}, tolerations: [{key: a, tolerationSeconds: 5, effect: NoSchedule}]}\n",
        [], {},
    ),
    (
        "services: {model: {type: api, url: 'http://h/v1', model: m}}\nbenchmarks: [{name: arith}]\n"
        "cluster: {type: compose, gpus: some}\n",
        [], {},
    ),
    (
        "services: {model: {type: api, url: 'http://h/v1', model: m}}\nbenchmarks: [{name: arith}]\n"
        "cluster: {type: compose, gpus: -1}\n",
        [], {},
    ),
    (
        "services: {model: {type: api, url: 'http://h/v1', model: m}}\nbenchmarks: [{name: arith}]\n"
        "cluster: {type: compose, gpus: all, env: {A: 1}}\n",
        [], {},
    ),
    (
        "services: {model: {type: sim, accuracy: high}}\nbenchmarks: [{name: arith}]\n",
        [], {},
    ),
    (
        "services: {model: {type: sim, accuracy: '0.25', output_tokens: '16', stream: 'false'}}\nbenchmarks: [{name: arith}]\n",
        [], {},
    ),
    (
        "services: {model: {type: vllm, model: org/M, tensor_paralel_size: 2}}\nbenchmarks: [{name: arith}]\n",
        [], {},
    ),
]


def run_worker(paths: list[tuple[str, list[str], dict[str, str]]], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    job = {"cases": [{"path": p, "overrides": o, "env": e} for p, o, e in paths]}
    proc = subprocess.run(
        [sys.executable, "-c", WORKER], input=json.dumps(job), capture_output=True, text=True, env=env, cwd=cwd, timeout=90
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) | {"stderr": proc.stderr}


def test_load_config_gives_the_same_config_and_errors_on_both_sides(tmp_path: Path, broken_msgspec: Path) -> None:
    paths = []
    for i, (source, overrides, env) in enumerate(CONFIG_CASES):
        if source.startswith("@"):
            paths.append((str(REPO / source[1:]), overrides, env))
        else:
            path = tmp_path / f"case{i}.yaml"
            path.write_text(source)
            paths.append((str(path), overrides, env))
    real = run_worker(paths, clean_env(), tmp_path)
    fake = run_worker(paths, clean_env(broken_msgspec), tmp_path)
    assert not real["fallback"] and fake["fallback"]
    assert count_notices(real["stderr"]) == 0 and count_notices(fake["stderr"]) == 1
    assert fake["structs"] == real["structs"] and len(real["structs"]) >= 20
    for case, r, f in zip(CONFIG_CASES, real["results"], fake["results"]):
        assert f == r, case
    errors = [r["error"] for r in real["results"] if "error" in r]
    assert len(errors) >= 15  # the table really exercises the error paths


# --- (c) a real unloadable msgspec, end to end -------------------------------------------------


@pytest.fixture(scope="module")
def broken_msgspec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the installed msgspec whose compiled module is garbage, as on a wrong-arch node."""
    spec = importlib.util.find_spec("msgspec")
    assert spec is not None and spec.submodule_search_locations
    root = tmp_path_factory.mktemp("broken") / "site"
    shutil.copytree(spec.submodule_search_locations[0], root / "msgspec")
    compiled = [p for p in (root / "msgspec").iterdir() if p.name.startswith("_core") and p.suffix in (".so", ".pyd")]
    assert compiled
    for path in compiled:
        path.write_bytes(b"\x7fnot an ELF object" * 256)
    probe = subprocess.run([sys.executable, "-c", "import msgspec"], env=clean_env(root), capture_output=True, text=True, timeout=30)
    assert probe.returncode != 0 and "ImportError" in probe.stderr
    return root


def clean_env(broken: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("NEL_", "SLURM_"))}
    if broken is not None:
        env["PYTHONPATH"] = str(broken)
    return env


def count_notices(stderr: str, prefix: str = "") -> int:
    return sum(1 for line in stderr.splitlines() if line.startswith(prefix) and NOTICE.match(line[len(prefix):]))


EVAL_CONFIG = """
services:
  model:
    type: sim
    bench: arith
    accuracy: 0.7
    ttft_ms: 1
    itl_ms: 0
    output_tokens: 16
benchmarks:
  - name: arith
    params: {n: 24}
    repeats: 2
    max_concurrent: 1   # one request at a time: records are written in a fixed order
    solver:
      type: simple
      service: model
      system_prompt: "Be careful. Ünïcödé ✓ \\"quoted\\" \\\\ back\\tslash"
      generation: {temperature: 0.7, max_tokens: 32}
cluster:
  type: local
  shards: 2
output:
  dir: out
  progress_interval_s: 0.5
"""
SHARDS = ("shard_0", "shard_1")
SHARD_FILES = ("manifest.json", "arith/results.jsonl", "arith/trajectories.jsonl")
# What differs between any two runs, found by comparing two runs with the real msgspec: when a
# request started and how long it took, and when the shard started and finished. Nothing else.
VARYING = {
    "arith/results.jsonl": re.compile(rb'"(ttft_s|latency_s|started_at)":(null|-?[0-9][0-9.eE+-]*)'),
    "manifest.json": re.compile(rb'"(started_at|finished_at)": (null|-?[0-9][0-9.eE+-]*)'),
}


def masked(rel: str, data: bytes) -> tuple[bytes, int]:
    pattern = VARYING.get(rel)
    if pattern is None:
        return data, 0
    return pattern.subn(rb'"\1":"<varies>"', data)


def run_cli(args: list[str], cwd: Path, broken: Path | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardeval", *args], cwd=cwd, env=clean_env(broken), capture_output=True, text=True, timeout=150
    )


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.timeout(400)
def test_sharded_run_and_merge_with_an_unloadable_msgspec(tmp_path: Path, broken_msgspec: Path) -> None:
    config = tmp_path / "eval.yaml"
    config.write_text(EVAL_CONFIG)
    version = run_cli(["--version"], tmp_path, broken_msgspec)
    assert version.returncode == 0 and count_notices(version.stderr) == 0  # --version never loads msgspec

    runs: dict[str, Path] = {}
    for side, broken in (("real", None), ("fallback", broken_msgspec)):
        cwd = tmp_path / side
        cwd.mkdir()
        result = run_cli(["run", str(config)], cwd, broken)
        assert result.returncode == 0, result.stderr
        runs[side] = cwd / "out"
        if broken is None:
            assert "notice" not in result.stderr
            continue
        # one notice per process: the orchestrating `run`, each shard process, each shard's simulator
        assert count_notices(result.stderr) == 1, result.stderr
        for i, shard in enumerate(SHARDS):
            assert count_notices(result.stderr, f"[shard {i}] ") == 1, result.stderr
            assert count_notices((runs[side] / shard / "logs" / "sim.log").read_text()) == 1
        assert result.stderr.count("shardeval: notice:") == 1 + len(SHARDS)

    # (ii) the evaluation's own files match once the per-run timings are masked
    for shard in SHARDS:
        for rel in SHARD_FILES:
            real_bytes, n_real = masked(rel, (runs["real"] / shard / rel).read_bytes())
            fake_bytes, n_fake = masked(rel, (runs["fallback"] / shard / rel).read_bytes())
            assert n_fake == n_real and (n_real > 0) == (rel in VARYING), (shard, rel)
            assert fake_bytes == real_bytes, (shard, rel)

    # (i) merging the same shard directories gives byte-identical files on both sides
    for source in ("real", "fallback"):
        merged = {}
        for side, broken in (("real", None), ("fallback", broken_msgspec)):
            out = tmp_path / f"merged-{source}-by-{side}"
            result = run_cli(["merge", str(runs[source]), "-o", str(out)], tmp_path, broken)
            assert result.returncode == 0, result.stderr
            assert count_notices(result.stderr) == (1 if broken else 0), result.stderr
            merged[side] = tree(out)
        assert set(merged["real"]) >= {"scores.json", "timing.json", "report.md", "arith/results.jsonl", "arith/trajectories.jsonl"}
        assert merged["fallback"] == merged["real"]
