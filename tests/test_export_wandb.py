"""`shardeval export RUN --to wandb` (docs/export.md) with the real wandb library, offline, inside a
network namespace with no interfaces (`unshare -rn`): nothing can reach a network, so a test that
passes proves the export touched none. What it wrote is read back from the offline run files
themselves (the .wandb record log, parsed with W&B's own protobuf messages): config, tags, summary,
history and the artifact's manifest, compared with scores.json and sweep.json value by value."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from conftest import REPO

pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'shardeval[wandb]')")
from wandb.proto import wandb_internal_pb2

pytestmark = pytest.mark.timeout(120)

FAKE_KEY = "shardevaltestkey" + "0123456789abcdef" * 2 + "zz"  # a W&B-shaped key that must never be written
WANDB_VARS = (
    "WANDB_API_KEY",
    "WANDB_BASE_URL",
    "WANDB_DIR",
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_MODE",
    "WANDB_INIT_TIMEOUT",
    "WANDB_SILENT",
    "WANDB_RUN_ID",
    "WANDB_RESUME",
    "NETRC",
)


@pytest.fixture(scope="module")
def isolated() -> None:
    """Every export here runs in a new user and network namespace: skip where that is refused."""
    try:
        done = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"unshare is not usable here ({exc}); these tests prove no network is touched by running inside one")
    if done.returncode != 0:
        pytest.skip(f"unshare -rn is not permitted here ({done.stderr.decode().strip()}); it proves no network is touched")


def wandb_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of an export: W&B's own folders under `home` (nothing of the user's),
    offline unless told otherwise, a fake API key present to prove it is never written."""
    env = {k: v for k, v in os.environ.items() if k not in WANDB_VARS}
    env.update(
        {
            "HOME": str(home),
            "WANDB_CONFIG_DIR": str(home / "config"),
            "WANDB_DATA_DIR": str(home / "data"),
            "WANDB_CACHE_DIR": str(home / "cache"),
            "WANDB_MODE": "offline",
            "WANDB_API_KEY": FAKE_KEY,
            **extra,
        }
    )
    return env


def export(root: Path, env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "-rn", sys.executable, "-m", "shardeval", "export", str(root), "--to", "wandb", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_example(out: Path, example: str, *overrides: str) -> Path:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardeval",
            "run",
            os.path.join(REPO, "examples", example),
            "-o",
            str(out),
            *[a for o in overrides for a in ("-O", o)],
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out


# --- reading an offline run back: W&B's record log (a LevelDB-style log of protobuf Records) ---

_BLOCK, _HEADER = 32768, 7  # the log's block size and each chunk's header: crc32 (4), length (2), type (1)
_FULL, _LAST = 1, 4


def records(path: Path) -> Iterator[Any]:
    """Each Record of a .wandb file: chunks joined across blocks, then parsed."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B record log"
    pos, pending = _HEADER, b""  # the file header: ":W&B", a magic number (2), a version (1)
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if kind == 0 and length == 0:
            break
        pending += data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


@dataclass
class OfflineRun:
    """What one offline run folder says about its W&B run."""

    folder: Path
    run_id: str = ""
    project: str = ""
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (name, type, file names)


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def read_offline_run(folder: Path) -> OfflineRun:
    [log] = folder.glob("run-*.wandb")
    out = OfflineRun(folder)
    for record in records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            out.run_id, out.project, out.name, out.group, out.job_type = r.run_id, r.project, r.display_name, r.run_group, r.job_type
            out.tags = list(r.tags)
            out.config.update({u.key: json.loads(u.value_json) for u in r.config.update})
        elif kind == "config":
            out.config.update({_key(u): json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":
            out.history.append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            out.summary.update({_key(u): json.loads(u.value_json) for u in record.summary.update})
        elif kind == "artifact":
            a = record.artifact
            out.artifacts.append((a.name, a.type, sorted(c.path for c in a.manifest.contents)))
    return out


def offline_runs(wandb_dir: Path) -> list[OfflineRun]:
    return [read_offline_run(folder) for folder in sorted(wandb_dir.glob("offline-run-*"))]


def assert_no_secret(*places: Path, text: str = "") -> None:
    assert FAKE_KEY not in text
    for place in places:
        for path in place.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert FAKE_KEY.encode() not in path.read_bytes(), f"the API key was written to {path}"


def metric_values(scores_entry: dict[str, Any]) -> dict[str, float]:
    """What the summary must hold for a benchmark: every metric's value, bounds and n, and the counts."""
    out = {k: scores_entry[k] for k in ("n_expected", "n_ok", "n_errors", "n_missing")}
    for name, m in scores_entry["metrics"].items():
        safe = name.replace("@", "_at_")
        out |= {safe: m["value"], f"{safe}_ci_low": m["ci_low"], f"{safe}_ci_high": m["ci_high"], f"{safe}_n": m["n"]}
    return out


# --- fixtures: one small run and one small sweep for the whole file ---


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_example(
        tmp_path_factory.mktemp("plain") / "arith",
        "arith_sim.yaml",
        "benchmarks.0.params.n=30",
        "benchmarks.0.repeats=2",
        "cluster.shards=2",
        "services.model.ttft_ms=0",
        "services.model.itl_ms=0",
        "output.progress_interval_s=0",
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    fast = [f"services.{s}.ttft_ms=0" for s in ("base", "step1", "step2")] + [f"services.{s}.itl_ms=0" for s in ("base", "step1", "step2")]
    return run_example(
        tmp_path_factory.mktemp("sweep") / "sweep", "sweep_sim.yaml", "benchmarks.0.params.n=30", "benchmarks.1.params.n=30", *fast
    )


def test_a_run_exported_offline_holds_the_identity_and_every_metric_as_scores_json_says(
    isolated: None, plain_run: Path, tmp_path: Path
) -> None:
    started = time.monotonic()
    done = export(plain_run, wandb_env(tmp_path))
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    wandb_dir = plain_run / "merged" / "wandb"  # the default: beside the merged results
    assert done.stdout.strip() == (f"wandb: 1 run in project 'arith' (offline: {wandb_dir}; `wandb sync {wandb_dir}` uploads it)"), (
        done.stdout
    )
    assert "Traceback" not in done.stderr and "wandb:" not in done.stderr, done.stderr  # W&B's console stays quiet
    assert took < 60, f"exporting one run took {took:.1f}s"

    [run] = offline_runs(wandb_dir)
    manifest = json.loads(next(plain_run.glob("shard_*/manifest.json")).read_text())
    config_hash = manifest["config_hash"]
    rid = config_hash.split(":")[1][:12]
    key = f"{rid}/arith"
    assert (run.project, run.name, run.group, run.job_type) == ("arith", "model/arith", "arith", "eval")
    assert run.run_id.startswith(f"se{rid}") and run.run_id.isalnum() and run.run_id == run.run_id.lower()
    assert {"shardeval", f"shardeval:{key}", "status:complete", "model:model", "benchmark:arith"} <= set(run.tags)
    assert (run.config["config_hash"], run.config["shardeval.run_id"], run.config["shardeval.key"]) == (config_hash, rid, key)
    assert (run.config["shardeval.status"], run.config["checkpoint_step"], run.config["repeats"]) == ("COMPLETE", 0, "2")

    scores = json.loads((plain_run / "merged" / "scores.json").read_text())["arith"]
    expected = metric_values(scores)
    assert {"accuracy", "accuracy_ci_low", "accuracy_ci_high", "accuracy_n", "pass_at_1"} <= set(expected)
    assert {k: run.summary[k] for k in expected} == expected  # to the last digit
    assert (run.summary["status"], run.summary["checkpoint_step"]) == ("COMPLETE", 0)
    [row] = run.history  # one row per export, against the checkpoint step
    assert {k: row[k] for k in expected} == expected and row["checkpoint_step"] == 0

    [(name, kind, files)] = run.artifacts
    assert (name, kind, files) == (f"shardeval-{rid}-arith", "evaluation", ["report.html", "samples.parquet", "scores.json"])
    assert_no_secret(plain_run, tmp_path, text=done.stdout + done.stderr)


def test_a_sweep_is_one_run_per_model_and_benchmark_with_steps_and_differences_and_a_reexport_keeps_the_ids(
    isolated: None, sweep: Path, tmp_path: Path
) -> None:
    out = tmp_path / "wandb_runs"
    started = time.monotonic()
    first = export(sweep, wandb_env(tmp_path), "-o", str(out), "--project", "ckpt-sweep", "--entity", "team")
    took = time.monotonic() - started
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("wandb: 6 runs in project 'ckpt-sweep' of entity 'team' (offline: "), first.stdout
    runs = offline_runs(out / "wandb")
    assert len(runs) == 6 and len({r.run_id for r in runs}) == 6
    print(f"\nwandb export of a 6-run sweep: {took:.1f}s")

    doc = json.loads((sweep / "merged" / "sweep.json").read_text())
    by_name = {r.name: r for r in runs}
    assert set(by_name) == {f"{m}/{b}" for m in ("base", "step1", "step2") for b in ("arith", "arith_b")}
    for name, run in by_name.items():
        model, bench = name.split("/")
        step = {"base": 0, "step1": 1, "step2": 2}[model]
        assert (run.project, run.group, run.summary["checkpoint_step"], run.config["checkpoint_step"]) == (
            "ckpt-sweep",
            "sweep",
            step,
            step,
        )
        assert run.config["shardeval.baseline"] == "base" and f"model:{model}" in run.tags
        scores = json.loads((sweep / model / "merged" / "scores.json").read_text())[bench]
        expected = metric_values(scores)
        for row in doc["vs_baseline"]:
            if (row["service"], row["benchmark"]) == (model, bench):
                base = f"vs_baseline/{row['metric'].replace('@', '_at_')}"
                expected |= {f"{base}/{p}": row[p] for p in ("diff", "ci_low", "ci_high", "p_value", "p_holm", "n")}
        assert any(k.startswith("vs_baseline/") for k in expected) == (model != "base")
        assert {k: run.summary[k] for k in expected} == expected
        assert {k: run.history[0][k] for k in expected} == expected

    # Exported again (into WANDB_DIR this time, which the export honours when no -o is given):
    # the same W&B run ids, each resumed, none new.
    again_dir = tmp_path / "again"
    again = export(sweep, wandb_env(tmp_path, WANDB_DIR=str(again_dir)), "--project", "ckpt-sweep")
    assert again.returncode == 0, again.stderr
    assert f"(offline: {again_dir / 'wandb'};" in again.stdout, again.stdout
    assert {r.run_id for r in offline_runs(again_dir / "wandb")} == {r.run_id for r in runs}
    assert_no_secret(out, again_dir, text=first.stdout + first.stderr + again.stdout + again.stderr)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_error_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr
    assert len(lines) == 1 and lines[0].startswith("shardeval: error: ") and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_an_unreachable_server_is_one_line_in_bounded_time_and_a_missing_key_or_extra_is_a_usage_error(
    isolated: None, plain_run: Path, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    online = wandb_env(tmp_path, WANDB_MODE="online", WANDB_BASE_URL=url, WANDB_INIT_TIMEOUT="3")
    started = time.monotonic()
    done = export(plain_run, online)
    took = time.monotonic() - started
    line = one_error_line(done, 1)
    assert f"W&B at {url}" in line and "WANDB_BASE_URL" in line and "WANDB_MODE=offline" in line and "wandb sync" in line, line
    assert took < 30, f"an unreachable server took {took:.1f}s to report"
    print(f"\nwandb unreachable server reported in {took:.1f}s (WANDB_INIT_TIMEOUT=3)")
    assert_no_secret(tmp_path, text=done.stdout + done.stderr)

    # online with no API key anywhere: said at once, never a prompt
    no_key = {k: v for k, v in online.items() if k != "WANDB_API_KEY"}
    line = one_error_line(export(plain_run, no_key, timeout=60), 2)
    assert "no W&B API key" in line and "WANDB_API_KEY" in line and "WANDB_MODE=offline" in line, line

    # a project W&B would refuse: before anything is merged or written
    line = one_error_line(export(plain_run, wandb_env(tmp_path), "--project", "a/b"), 2)
    assert "--project 'a/b'" in line, line

    # wandb not installed: one line naming the extra, exit 2, before any merge
    hide = (
        "import importlib.util as u, sys; f = u.find_spec; "
        "u.find_spec = lambda name, *a: None if name == 'wandb' else f(name, *a); "
        "from shardeval.cli import main; sys.argv[0] = 'shardeval'; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide, "export", str(plain_run), "--to", "wandb"],
        env=wandb_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = one_error_line(done, 2)
    assert "shardeval[wandb]" in line, line


def test_names_wandb_takes_the_same_on_every_export() -> None:
    from shardeval_wandb.exporter import _tag, artifact_name, wandb_run_id

    key = "0123456789ab/mmlu_pro:math"
    assert wandb_run_id(key) == wandb_run_id(key) != wandb_run_id("0123456789ab/mmlu_pro")
    assert wandb_run_id(key).startswith("se0123456789ab") and wandb_run_id(key).isalnum() and len(wandb_run_id(key)) <= 64
    long = "shardeval:0123456789ab/" + "b" * 80
    assert len(_tag(long)) == 64 and _tag(long) != _tag(long[:-1]) and _tag("short") == "short"

    class Run:  # what artifact_name reads of a TrackerRun
        run_id, benchmark = "0123456789ab", "mmlu pro/math"

    name = artifact_name(Run())  # type: ignore[arg-type]
    assert name.startswith("shardeval-0123456789ab-mmlu_pro_math-") and all(c.isalnum() or c in "-_." for c in name)
