"""`shardeval watch`'s rules, each on real files and real processes: when a checkpoint counts as
whole (marker, quiet time, a copy that keeps its mtimes, temporary names), one watcher per sweep,
a stop signal that drains the local launch and a restart that resumes it, --once for cron, the
mistakes refused in one line before anything starts, and what `status` says of the watch."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import shardeval_cmd
from shardeval.config.schema import ReadyConfig
from shardeval.watch.readiness import is_temporary, snapshot, waiting_for

pytestmark = pytest.mark.timeout(300)


def checkpoint(folder: Path, marker: bool = True) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "weights.bin").write_bytes(b"w" * 1000)
    if marker:
        (folder / "done").write_text("")
    return folder


def test_the_marker_and_the_quiet_time_each_hold_back_a_checkpoint(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "step1", marker=False)
    rule = ReadyConfig(marker="done", quiet_s=5)
    now = time.time()
    assert waiting_for(snapshot(str(folder), "done"), rule, now) == "no done yet"
    (folder / "done").write_text("")
    assert "changed 0 s ago" in (waiting_for(snapshot(str(folder), "done"), rule, now) or "")
    assert waiting_for(snapshot(str(folder), "done"), rule, now + 6) is None
    # neither key: no file changed for 120 s
    assert waiting_for(snapshot(str(folder), None), ReadyConfig(), now + 60) is not None
    assert waiting_for(snapshot(str(folder), None), ReadyConfig(), now + 121) is None
    assert waiting_for(snapshot(str(tmp_path / "gone"), None), rule, now) == "the folder is gone"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert waiting_for(snapshot(str(empty), None), ReadyConfig(quiet_s=0), now + 999) == "no file in it yet"


def test_a_copy_that_keeps_old_mtimes_is_still_seen_changing(tmp_path: Path) -> None:
    source = checkpoint(tmp_path / "src")
    old = time.time() - 3600
    for f in source.iterdir():
        os.utime(f, (old, old))
    copy = tmp_path / "step2"
    shutil.copytree(source, copy, copy_function=shutil.copy2)  # `cp -p`: the files' mtimes an hour old
    snap = snapshot(str(copy), "done")
    assert snap.newest_change > time.time() - 60  # their ctimes are now
    assert waiting_for(snap, ReadyConfig(marker="done", quiet_s=30), time.time()) is not None


def test_a_rewrite_in_place_changes_the_fingerprint_and_nothing_else_does(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "step3")
    first = snapshot(str(folder), "done").fingerprint
    assert snapshot(str(folder), "done").fingerprint == first
    time.sleep(0.01)
    (folder / "weights.bin").write_bytes(b"v" * 1000)  # same size, new bytes
    assert snapshot(str(folder), "done").fingerprint != first


def test_temporary_names_are_never_checkpoints() -> None:
    rule = ReadyConfig()
    for name in (".step5", "step5.tmp", "step5.partial", "tmp-step5", "step5~", "step5.incomplete"):
        assert is_temporary(f"/ckpt/{name}/", rule), name
    for name in ("step5", "checkpoint-500", "iter_0001000"):
        assert not is_temporary(f"/ckpt/{name}/", rule), name
    assert not is_temporary("/ckpt/step5.tmp", ReadyConfig(ignore=[]))


def config(tmp_path: Path, **watch: Any) -> Path:
    cfg = tmp_path / "sweep.yaml"
    doc = {
        "services": {"sim": {"type": "sim", "bench": "arith", "ttft_ms": 0, "itl_ms": 40, "output_tokens": 16}},
        "benchmarks": [{"name": "arith", "params": {"n": 16}, "max_concurrent": 2}],
        "cluster": {"shards": 2},
        "sweep": {
            "checkpoints": {
                "template": "sim",
                "paths": f"{tmp_path / 'ckpt'}/step*",
                "key": "root",
                "ready": {"marker": "done", "quiet_s": 0},
            },
            "watch": {"poll_s": 0.3, **watch},
        },
    }
    cfg.write_text(json.dumps(doc))
    return cfg


def state(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / "watch" / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_for(what: str, condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def watch(cfg: Path, out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "shardeval", "watch", str(cfg), "-o", str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_one_watcher_per_sweep_a_stop_drains_and_a_restart_resumes(tmp_path: Path) -> None:
    checkpoint(tmp_path / "ckpt" / "step1")
    cfg, out = config(tmp_path), tmp_path / "out"
    first = watch(cfg, out)
    try:
        wait_for("step1's cells to write", lambda: (out / "step1" / "shard_0" / "arith" / "results.jsonl").exists())
        second = shardeval_cmd("watch", str(cfg), "-o", str(out), timeout=60)
        assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
        assert "already watched by pid" in second.stderr and str(first.pid) in second.stderr

        status = shardeval_cmd("status", str(out), timeout=60)
        assert f"watch: watched by pid {first.pid}" in status.stdout and "step1            running" in status.stdout, status.stdout

        first.send_signal(signal.SIGTERM)  # no more polls; the local launch drains
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 143, err
    assert state(out)["checkpoints"]["step1"]["status"] in ("waiting", "done"), state(out)
    after_stop = shardeval_cmd("status", str(out), timeout=60)
    assert "watch: ended (SIGTERM, exit 143)" in after_stop.stdout, after_stop.stdout

    resumed = shardeval_cmd("watch", str(cfg), "-o", str(out), "--once", timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    s = state(out)["checkpoints"]["step1"]
    assert s["status"] == "done" and s["launches"] in (1, 2)
    merged = json.loads((out / "merged" / "sweep.json").read_text())
    assert merged["services"] == ["step1"] and all(c["complete"] for c in merged["cells"])


def test_once_launches_what_is_whole_one_at_a_time_and_again_launches_nothing(tmp_path: Path) -> None:
    for i in (1, 2):
        checkpoint(tmp_path / "ckpt" / f"step{i}")
    checkpoint(tmp_path / "ckpt" / "step3", marker=False)  # not whole: no marker
    checkpoint(tmp_path / "ckpt" / "step4.tmp")  # a temporary name
    cfg, out = config(tmp_path), tmp_path / "out"
    done = shardeval_cmd("watch", str(cfg), "-o", str(out), "--once", timeout=180)
    assert done.returncode == 0, done.stderr
    s = state(out)["checkpoints"]
    assert {n: c["status"] for n, c in s.items()} == {"step1": "done", "step2": "done", "step3": "waiting"}
    assert s["step3"]["why"] == "no done yet"
    # one launch at a time (the local orchestrator's default): step2 started after step1 ended
    assert s["step2"]["launched_at"] >= s["step1"]["finished_at"]
    again = shardeval_cmd("watch", str(cfg), "-o", str(out), "--once", timeout=180)
    assert again.returncode == 0 and "launch" not in again.stderr.replace("launches", ""), again.stderr
    assert sorted(p.name for p in (out / "watch" / "logs").iterdir()) == ["step1.1.log", "step2.1.log"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["sweep"].update(checkpoints=None, services=["sim"]), "add `sweep.checkpoints`"),
        (lambda d: d.update(cluster={"type": "compose", "shards": 2}), "cluster.type compose: it writes the files"),
        (lambda d: d.update(cluster={"type": "kubernetes", "shards": 2, "image": "x"}), "cluster.type kubernetes: its cells write"),
        (lambda d: d["sweep"]["watch"].update(poll_s=0), "poll_s"),
        (lambda d: d["sweep"]["checkpoints"]["ready"].update(marker=""), "marker"),
        (lambda d: d["sweep"]["watch"].update(until={"idle_s": -1}), "idle_s"),
    ],
)
def test_mistakes_are_one_line_before_anything_starts(tmp_path: Path, change, message: str) -> None:
    cfg = config(tmp_path)
    doc = json.loads(cfg.read_text())
    change(doc)
    cfg.write_text(json.dumps(doc))
    done = shardeval_cmd("watch", str(cfg), "-o", str(tmp_path / "out"), timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out" / "watch" / "state.json").exists()


def test_watch_is_a_name_no_model_can_take(tmp_path: Path) -> None:
    checkpoint(tmp_path / "ckpt" / "watch")
    cfg = config(tmp_path)
    doc = json.loads(cfg.read_text())
    doc["sweep"]["checkpoints"]["paths"] = str(tmp_path / "ckpt" / "watch")
    cfg.write_text(json.dumps(doc))
    done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"), "--dry-run", timeout=60)
    assert done.returncode == 2 and "where `shardeval watch` keeps its state" in done.stderr, done.stderr


def test_the_configs_in_docs_watch_md_load(tmp_path: Path) -> None:
    """docs/watch.md's two configs are what a user copies: each loads (with no checkpoint yet)."""
    import re

    from shardeval.config.loading import load_config

    text = (Path(__file__).parent.parent / "docs" / "watch.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert len(blocks) == 2
    for i, block in enumerate(blocks):
        path = tmp_path / f"doc{i}.yaml"
        path.write_text(block)
        config = load_config(str(path), [], {}, sweep_may_be_empty=True)
        assert config.sweep is not None and config.sweep.checkpoints is not None and config.sweep.watch is not None
        assert config.sweep.checkpoints.ready is not None and config.sweep.checkpoints.ready.marker == "model.safetensors.index.json"


def test_a_checkpoint_its_server_cannot_load_is_a_failed_row_and_the_watch_goes_on(tmp_path: Path) -> None:
    """The simulator loading weights (--weights-log) refuses a config.json that is no JSON, as vLLM
    does: after `retries` the checkpoint is failed, one warning line says why, sweep.json marks
    the row failed, the other checkpoint is complete, and `until` ends the watch with exit 1."""
    checkpoint(tmp_path / "ckpt" / "step1")
    broken = checkpoint(tmp_path / "ckpt" / "step2")
    (broken / "config.json").write_text('{"architectures": [')
    cfg, out = config(tmp_path, retries=1, until={"idle_s": 2}), tmp_path / "out"
    doc = json.loads(cfg.read_text())
    doc["services"]["sim"]["weights_log"] = str(tmp_path / "weights.jsonl")
    cfg.write_text(json.dumps(doc))
    done = shardeval_cmd("watch", str(cfg), "-o", str(out), timeout=240)
    assert done.returncode == 1, done.stderr
    s = state(out)["checkpoints"]
    assert (s["step1"]["status"], s["step2"]["status"], s["step2"]["launches"]) == ("done", "failed", 2)
    assert [line for line in done.stderr.splitlines() if "step2: failed after 2 launch(es)" in line and "not valid JSON" in line]
    assert sum("launching it again" in line for line in done.stderr.splitlines()) == 1
    sweep = json.loads((out / "merged" / "sweep.json").read_text())
    assert [(f["service"], f["shard"]) for f in sweep["failed"]] == [("step2", "0/2"), ("step2", "1/2")]
    assert all(c["complete"] for c in sweep["cells"] if c["service"] == "step1")
