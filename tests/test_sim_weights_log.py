"""Issue 42: the simulator "loads its weights" (`--weights-log PATH`), so a watched sweep's test can
prove which bytes each server was started on, and a checkpoint it cannot load fails the start as
vLLM fails: exit 1, one line naming the folder, nothing logged. Every simulator here is a real process."""

from __future__ import annotations

import hashlib
import json
import os
import time
from contextlib import ExitStack
from pathlib import Path

from conftest import running_sim, shardeval_cmd
from shardeval.store.records import read_manifest


def _checkpoint(folder: Path, config: str = '{"model_type": "sim"}') -> dict[str, bytes]:
    """A small checkpoint folder: a config, a weights file, a nested shard; returns its bytes by relative path."""
    files = {
        "config.json": config.encode(),
        "model.safetensors": os.urandom(3000),
        "shards/part-00001.bin": b"\x00\x01" * 700,
    }
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return files


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_weights_line_names_every_file_with_its_digest(tmp_path: Path) -> None:
    """One line per start, written before the listening line: the root as given, when, which
    process, and every regular file below it (recursively, sorted) with its sha256."""
    files = _checkpoint(tmp_path / "step1")
    log = tmp_path / "weights.jsonl"
    before = time.time()
    with running_sim("--root", str(tmp_path / "step1"), "--weights-log", str(log)):
        (entry,) = _lines(log)  # on disk once the listening line is printed
    assert entry["root"] == str(tmp_path / "step1")
    assert before <= entry["at"] <= time.time()
    assert isinstance(entry["pid"], int) and entry["pid"] != os.getpid()
    assert list(entry["files"]) == sorted(files)
    assert entry["files"] == {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}


def test_two_simulators_append_to_one_log(tmp_path: Path) -> None:
    """Several servers share one log: a whole line each, each with its own process and folder."""
    a, b = _checkpoint(tmp_path / "a"), _checkpoint(tmp_path / "b")
    log = tmp_path / "weights.jsonl"
    with ExitStack() as stack:
        for name in ("a", "b"):
            stack.enter_context(running_sim("--root", str(tmp_path / name), "--weights-log", str(log)))
        entries = _lines(log)
    assert sorted(e["root"] for e in entries) == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert len({e["pid"] for e in entries}) == 2
    by_root = {e["root"]: e["files"] for e in entries}
    assert by_root[str(tmp_path / "a")]["model.safetensors"] == hashlib.sha256(a["model.safetensors"]).hexdigest()
    assert by_root[str(tmp_path / "b")]["model.safetensors"] == hashlib.sha256(b["model.safetensors"]).hexdigest()


def test_weights_that_cannot_be_loaded_fail_the_start(tmp_path: Path) -> None:
    """A missing folder, no --root at all, a config.json that is not JSON: exit 1, one line on
    stderr naming the folder and why, no listening line, nothing appended to the log."""
    _checkpoint(tmp_path / "broken", config='{"model_type": ')
    log = tmp_path / "weights.jsonl"
    cases = {
        (str(tmp_path / "gone"),): f"cannot load the weights at {tmp_path / 'gone'}: no such folder",
        (): "--weights-log needs --root",
        (str(tmp_path / "broken"),): f"cannot load the weights at {tmp_path / 'broken'}: config.json is not valid JSON: ",
    }
    for root, message in cases.items():
        args = [*(["--root", root[0]] if root else []), "--weights-log", str(log)]
        out = shardeval_cmd("sim", "--port", "0", *args, timeout=60)
        assert out.returncode == 1, (root, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (root, out.stderr)
        assert "listening" not in out.stdout
    assert not log.exists()


def test_without_weights_log_root_is_only_reported(tmp_path: Path) -> None:
    """Without --weights-log nothing is read: a --root that is no folder starts as before."""
    with running_sim("--root", str(tmp_path / "no-such-folder")):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_shard_whose_sim_cannot_load_its_weights_fails(tmp_path: Path) -> None:
    """A managed `type: sim` service with `weights_log` passes it on; when its folder holds a broken
    config.json the service dies while loading, and the shard fails as it does for a vLLM that dies
    so: exit 1, the manifest `failed`, the message quoting the sim's line that names the folder."""
    _checkpoint(tmp_path / "ckpt", config="{not json")
    log = tmp_path / "weights.jsonl"
    config = {
        "services": {
            "model": {"type": "sim", "bench": "arith", "ttft_ms": 0, "itl_ms": 0, "root": str(tmp_path / "ckpt"), "weights_log": str(log)}
        },
        "benchmarks": [{"name": "arith", "params": {"n": 3}}],
        "output": {"progress_interval_s": 0},
    }
    (tmp_path / "run.yaml").write_text(json.dumps(config))
    out = shardeval_cmd("run", str(tmp_path / "run.yaml"), "-o", str(tmp_path / "out"))
    assert out.returncode == 1, out.stderr
    wanted = f"cannot load the weights at {tmp_path / 'ckpt'}: config.json is not valid JSON"
    assert "service 'model' (sim): exited during start-up (exit status 1)" in out.stderr and wanted in out.stderr, out.stderr
    manifest = read_manifest(str(tmp_path / "out"))
    assert manifest.state == "failed" and wanted in (manifest.reason or "")
    assert not log.exists()
    # the same folder made whole: the service starts, the log has its one line, every pair is asked
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    again = shardeval_cmd("run", str(tmp_path / "run.yaml"), "-o", str(tmp_path / "out"))
    assert again.returncode == 0, again.stderr
    (entry,) = _lines(log)
    assert entry["root"] == str(tmp_path / "ckpt") and entry["files"]["config.json"] == hashlib.sha256(b"{}").hexdigest()
