"""`shardeval export` and `shardeval.api.records.load_run` (issue 18): the rows are the records merge keeps.

Runs are real (the CLI against simulators on 127.0.0.1, with faults, reruns and a sweep) or made
by tests/shard_factory.py where a test needs shapes a server would not give (extra scores,
hostile strings, conflicting duplicates). Each export is compared with merge's own output,
merged/<bench>/results.jsonl, value by value: Parquet and JSONL with Python types (int stays
int, float float, null None); CSV reads back as strings, so the expected rows are written as CSV
writes them (null and "" both empty, floats in repr, booleans True/False).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import msgspec
import pyarrow.parquet as pq
import pytest

from conftest import api_eval_config, running_sim, shardeval_cmd
from shard_factory import make_shard, record
from shardeval.api import records as api
from shardeval.results.export import REASONING, RECORD, csv_chunks
from shardeval.store.records import ResultRecord, read_manifest

N, REPEATS = 40, 2
IDENTITY = ("config_hash", "service", "model", "weights")
HOSTILE = [
    'say "hi", then, bye',
    "two\nlines\r\nand\rcarriage",
    "nul\x00byte",
    "\u202eRTL override\u200f mark",
    "<script>alert(1)</script>",
    "'single' ;=1+1",
    "emoji \U0001f600 tab\t",
    "",
]


def merged_records(root: Path) -> list[dict]:
    """merge's standing records, in its order: merged/<bench>/results.jsonl of each benchmark."""
    benches = [b.name for b in read_manifest(str(next(root.glob("shard_*")))).benchmarks]
    return [json.loads(line) for bench in benches for line in (root / "merged" / bench / "results.jsonl").read_bytes().splitlines()]


def expected_rows(root: Path, identity: dict, score_names: list[str]) -> list[dict]:
    return [
        {
            **identity,
            **{k: rec[k] for k in RECORD},
            **{k: rec.get(k) for k in REASONING},
            "cached": rec.get("cached", False),
            **{f"scores.{n}": rec["scores"].get(n) for n in score_names},
        }
        for rec in merged_records(root)
    ]


def typed(rows: list[dict]) -> list[list[tuple]]:
    """Each value with its type, so 1 == 1.0 or None == "" cannot pass."""
    return [[(k, type(v).__name__, v) for k, v in row.items()] for row in rows]


def as_csv(rows: list[dict]) -> list[dict]:
    return [{k: "" if v is None else str(v) for k, v in row.items()} for row in rows]


def export(root: Path, out: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return shardeval_cmd("export", str(root), "-o", str(out), *args, env=env)


def read_back(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def check_all_formats(root: Path, tmp: Path, want: list[dict]) -> None:
    """Parquet, CSV and JSONL exports (format from the suffix) equal `want`; load_run too."""
    for suffix in (".parquet", ".csv", ".jsonl"):
        out = tmp / f"{root.name}{suffix}"
        r = export(root, out)
        assert r.returncode == 0, r.stderr
        assert f"{len(want)} rows" in r.stdout
        got = read_back(out)
        assert len(got) == len(want)
        if suffix == ".csv":
            assert got == as_csv(want)
        else:
            assert typed(got) == typed(want), suffix
    records = api.load_run(str(root))
    assert list(records) == [msgspec.json.decode(json.dumps(rec), type=ResultRecord) for rec in merged_records(root)]
    assert [dict(zip(want[0], row)) for row in records.rows()] == want


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """Two shards against a simulator failing 20 % of requests with one attempt each; shard 0 run
    again (its errors asked again: some fixed, some failing again); a duplicate and another run's
    record appended to shard 1. Merged by the CLI."""
    tmp = tmp_path_factory.mktemp("export")
    root = tmp / "run"
    with running_sim("--bench", "arith", "--accuracy", "0.6", "--ttft-ms", "1", "--itl-ms", "0", "--fail-5xx", "0.2") as url:
        cfg = api_eval_config(tmp / "eval.yaml", url, n=N, repeats=REPEATS, concurrency=8, service={"retries": {"attempts": 1}})
        for i in (0, 1, 0):
            r = shardeval_cmd("run", str(cfg), "--shard", f"{i}/2", "-o", str(root / f"shard_{i}"))
            assert r.returncode == 3, r.stderr  # finished with errors, which is the point
    results = root / "shard_1" / "arith" / "results.jsonl"
    first = next(rec for rec in map(json.loads, results.read_bytes().splitlines()) if rec["status"] == "ok")
    with open(results, "ab") as f:
        f.write(json.dumps(first).encode() + b"\n" + json.dumps({**first, "run": "0123456789ab"}).encode() + b"\n")
    r = shardeval_cmd("merge", "-q", str(root))
    assert r.returncode == 3, r.stderr  # written; ERRORS, not complete
    scores = json.loads((root / "merged" / "scores.json").read_text())["arith"]
    assert scores["n_errors"] > 0 and scores["n_duplicates"] == 1 and scores["n_refused"] == 1, scores
    lines = (root / "shard_0" / "arith" / "results.jsonl").read_bytes().splitlines()
    assert len(lines) > N, "the rerun asked some errors again"
    return root


def test_every_format_equals_the_merged_records_of_a_faulted_rerun_run(real_run: Path, tmp_path: Path) -> None:
    manifest = read_manifest(str(real_run / "shard_0"))
    identity = {"config_hash": manifest.config_hash, "service": "model", "model": "sim", "weights": "sim"}
    want = expected_rows(real_run, identity, [])
    assert len(want) == N * REPEATS
    assert {row["status"] for row in want} == {"ok", "error"} and {row["shard"] for row in want} == {0, 1}
    check_all_formats(real_run, tmp_path, want)
    r = export(real_run, tmp_path / "again.jsonl")
    assert "refused (not that shard's own records, never exported)" in r.stderr  # as merge warns


def test_to_pandas_has_one_row_per_record_and_the_columns(real_run: Path) -> None:
    records = api.load_run(str(real_run))
    df = records.to_pandas()
    want = merged_records(real_run)
    assert len(df) == len(records) == len(want)
    assert list(df.columns) == [*IDENTITY, *RECORD, *REASONING, "cached"]
    assert df["problem_idx"].tolist() == [r["problem_idx"] for r in want]
    assert df["status"].tolist() == [r["status"] for r in want]
    assert [None if s != s else s for s in df["score"].tolist()] == [r["score"] for r in want]  # NaN for an error's score
    assert str(df["prompt_tokens"].dtype) == "Int64" and df["prompt_tokens"].isna().sum() == sum(r["prompt_tokens"] is None for r in want)
    assert records.identities[0].model == "sim" and len(records.identities) == len(records)


def rec(p: int, r: int, shard: int, **fields) -> ResultRecord:
    """One record as a shard writes it (the factory's), with `fields` set; an error carries no score."""
    if fields.get("status") == "error":
        fields = {"score": None, "error_kind": "server_error", **fields}
    return msgspec.structs.replace(record("arith", p, r, shard, run="test"), **fields)


def hostile_run(root: Path) -> Path:
    """Two shards made directly: extra scores on some records, hostile strings in extracted,
    reference and error, a conflicting duplicate, an error fixed later, an ok followed by an error."""
    n = len(HOSTILE)

    def recs(lo: int, hi: int, shard: int):
        for p in range(lo, hi):
            text = HOSTILE[p]
            yield rec(p, 0, shard, extracted=text, reference=text[::-1], scores={"f1": p / 10})
            yield rec(p, 1, shard, status="error", error=text, reference=text)
            yield rec(p, 1, shard, score=0.0, extracted=text, scores={"chars": float(len(text))})  # fixes the error
            yield rec(p, 0, shard, score=0.0)  # a duplicate with another score: the first stands
            yield rec(p, 0, shard, status="error", error="late")  # an error after an ok: the ok stands

    for i, (lo, hi) in enumerate(((0, n // 2), (n // 2, n))):
        make_shard(str(root), i, 2, n_problems=n, repeats=2, records=recs(lo, hi, i))
    r = shardeval_cmd("merge", "-q", str(root))
    assert r.returncode == 0, r.stderr
    return root


def test_hostile_strings_and_extra_scores_survive_every_format(tmp_path: Path) -> None:
    root = hostile_run(tmp_path / "hostile")
    want = expected_rows(root, {"config_hash": "sha256:test", "service": None, "model": None, "weights": None}, ["chars", "f1"])
    assert len(want) == 2 * len(HOSTILE)
    assert [row["extracted"] for row in want[::2]] == HOSTILE and [row["error"] for row in want] == [None] * len(want)
    assert want[0]["scores.f1"] == 0.0 and want[1]["scores.f1"] is None and want[1]["scores.chars"] is not None
    check_all_formats(root, tmp_path, want)
    df = api.load_run(str(root)).to_pandas()
    assert df["extracted"].tolist()[::2] == HOSTILE and "scores.chars" in df.columns


def test_hostile_errors_survive_csv_and_parquet(tmp_path: Path) -> None:
    """The standing record is an error carrying each hostile string (its cell never fixed)."""
    n = len(HOSTILE)
    make_shard(
        str(tmp_path / "run"),
        0,
        1,
        n_problems=n,
        records=(rec(p, 0, 0, status="error", error=HOSTILE[p], reference=HOSTILE[p]) for p in range(n)),
    )
    for suffix in (".parquet", ".csv"):
        r = export(tmp_path / "run", tmp_path / f"e{suffix}")
        assert r.returncode == 0, r.stderr
        got = read_back(tmp_path / f"e{suffix}")
        assert [row["error"] for row in got] == HOSTILE and [row["reference"] for row in got] == HOSTILE
        assert [row["status"] for row in got] == ["error"] * n


def test_a_sweep_exports_every_model_into_one_file(tmp_path: Path) -> None:
    root = tmp_path / "out"
    with ExitStack() as servers:
        urls = {
            name: servers.enter_context(
                running_sim("--bench", "arith", "--accuracy", acc, "--ttft-ms", "1", "--itl-ms", "0", "--model", f"m_{name}")
            )
            for name, acc in (("a", "0.5"), ("b", "0.8"))
        }
        config = {
            "services": {name: {"type": "api", "url": url, "model": f"m_{name}"} for name, url in urls.items()},
            "benchmarks": [
                {"name": "arith", "params": {"n": 12}, "max_concurrent": 8},
                {"name": "arith", "id": "arith_b", "params": {"n": 8, "seed": 3}, "max_concurrent": 8},
            ],
            "sweep": {"services": ["b", "a"], "baseline": "b"},
            "cluster": {"type": "local", "shards": 2, "parallel": 2},
            "output": {"dir": str(root), "progress_interval_s": 0},
        }
        (tmp_path / "sweep.yaml").write_text(json.dumps(config))
        run = shardeval_cmd("run", str(tmp_path / "sweep.yaml"), timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    want = []
    for name in ("b", "a"):  # the sweep's order
        manifest = read_manifest(str(root / name / "shard_0"))
        want += expected_rows(
            root / name, {"config_hash": manifest.config_hash, "service": name, "model": f"m_{name}", "weights": f"m_{name}"}, []
        )
    assert len(want) == 2 * (12 + 8)
    assert [row["benchmark"] for row in want[:20]] == ["arith"] * 12 + ["arith_b"] * 8
    for suffix in (".parquet", ".jsonl"):
        r = export(root, tmp_path / f"sweep{suffix}")
        assert r.returncode == 0, r.stderr
        assert typed(read_back(tmp_path / f"sweep{suffix}")) == typed(want)
    assert [(i.service, i.model) for i in api.load_run(str(root)).identities] == [(r["service"], r["model"]) for r in want]


def test_mixed_weights_are_refused_as_by_merge_and_told_apart_when_allowed(tmp_path: Path) -> None:
    for i in range(2):
        shard = make_shard(str(tmp_path / "run"), i, 2, n_problems=4)
        manifest = json.loads(Path(shard, "manifest.json").read_text())
        manifest["served"] = {"model": {"model": "sim", "root": f"weights-{i}"}}
        manifest["benchmarks"][0]["service"] = "model"
        Path(shard, "manifest.json").write_text(json.dumps(manifest))
    r = export(tmp_path / "run", tmp_path / "rows.jsonl")
    assert r.returncode == 2 and "served other weights" in r.stderr and "--allow-mixed-models" in r.stderr, r.stderr
    r = export(tmp_path / "run", tmp_path / "rows.jsonl", "--allow-mixed-models")
    assert r.returncode == 0, r.stderr
    got = read_back(tmp_path / "rows.jsonl")
    assert [(row["model"], row["weights"]) for row in got] == [("sim", "weights-0")] * 2 + [("sim", "weights-1")] * 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "xml"], "--format xml: not a format export writes; choose parquet, csv or jsonl"),
        (["-o", "{tmp}/rows.txt"], "cannot tell the format from the suffix '.txt'; pass --format (parquet, csv or jsonl)"),
        (["-o", "{tmp}/rows"], "cannot tell the format from the suffix '(none)'"),
        (["-o", "{tmp}/run/shard_0/rows.csv"], "is inside the shard directory"),
        (["-o", "{tmp}/no/such/dir/rows.csv"], "cannot write the export to"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    make_shard(str(tmp_path / "run"), 0, 1, n_problems=3)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    argv = [a.format(tmp=tmp_path) for a in args]
    r = shardeval_cmd("export", str(tmp_path / "run"), *(argv if "-o" in argv else ["-o", str(tmp_path / "rows.csv"), *argv]))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written


def shadow(tmp_path: Path, module: str) -> dict[str, str]:
    """An environment whose `import MODULE` raises ImportError, as where it is not installed."""
    (tmp_path / "shadow" / module).mkdir(parents=True)
    (tmp_path / "shadow" / module / "__init__.py").write_text(f'raise ImportError("No module named {module!r}")\n')
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), os.environ.get("PYTHONPATH", "")])}


def test_parquet_without_pyarrow_says_what_to_install(tmp_path: Path) -> None:
    make_shard(str(tmp_path / "run"), 0, 1, n_problems=3)
    env = shadow(tmp_path, "pyarrow")
    r = export(tmp_path / "run", tmp_path / "rows.parquet", env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "needs pyarrow, which is not installed" in r.stderr and "pip install 'shardeval[parquet]'" in r.stderr
    assert not (tmp_path / "rows.parquet").exists()
    r = export(tmp_path / "run", tmp_path / "rows.csv", env=env)  # the other formats need nothing more
    assert r.returncode == 0 and len(read_back(tmp_path / "rows.csv")) == 3, r.stderr


def test_to_pandas_without_pandas_says_what_to_install(tmp_path: Path) -> None:
    make_shard(str(tmp_path / "run"), 0, 1, n_problems=3)
    probe = (
        "import shardeval.api.records as api\nrecords = api.load_run(__import__('sys').argv[1])\nprint(len(records))\n"
        "try:\n    records.to_pandas()\nexcept ImportError as exc:\n    print(exc)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **shadow(tmp_path, "pandas")},
    )
    assert r.returncode == 0, r.stderr
    count, message = r.stdout.splitlines()
    assert count == "3" and "needs pandas, which is not installed" in message and "pip install pandas" in message


def test_rows_stream_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A big run is never one list: CSV asks for rows a batch at a time, Parquet writes one row
    group per batch."""
    import shardeval.results.export as export_module

    monkeypatch.setattr(export_module, "BATCH", 10)
    pulled = []
    rows = ((pulled.append(i) or (i,)) for i in range(35))
    chunks = csv_chunks(["i"], rows)
    assert next(chunks).decode().splitlines() == ["i", *map(str, range(10))] and len(pulled) == 10
    assert b"".join(chunks).decode().split() == list(map(str, range(10, 35)))
    make_shard(str(tmp_path / "run"), 0, 1, n_problems=35)
    done = export_module.export(str(tmp_path / "run"), str(tmp_path / "rows.parquet"))
    assert (done.format, done.rows, done.missing) == ("parquet", 35, 0)
    assert pq.ParquetFile(tmp_path / "rows.parquet").num_row_groups == 4


def test_partial_runs_export_what_stands_and_say_what_is_missing(tmp_path: Path) -> None:
    make_shard(str(tmp_path / "run"), 0, 2, n_problems=10, state="running")  # shard 1 never ran
    r = export(tmp_path / "run", tmp_path / "rows.jsonl")
    assert r.returncode == 0, r.stderr
    assert "(jsonl, 5 rows; 5 cells have no record yet)" in r.stdout
    assert [row["problem_idx"] for row in read_back(tmp_path / "rows.jsonl")] == list(range(5))
