"""`shardeval watch` end to end (issue 42's acceptance), with real processes only: a test trainer
writes six checkpoints while a real watcher (killed with SIGKILL twice and restarted) launches
each through the local orchestrator against the simulator, whose `--weights-log` records which
files it served and when; the trainer's moves are the ones a training run makes:

- step100 written whole (its marker, the file a trainer writes last, written last);
- step200 and step300 copied slowly, byte by byte, marker first (the quiet rule keeps them out);
- step400 written under a temporary name (`.step400.tmp`) and renamed when whole;
- step500 written whole, after which a keep-last-3 rule deletes step100 (evaluated: its rows
  stay) and step200 (mid-evaluation: its later cell ends in errors naming the path);
- step600 written whole, evaluated, then rewritten in place (new bytes, same name): a new
  identity, evaluated again, its old rows set aside.

Then: every checkpoint launched exactly once (step600 once per identity), none served before it was
whole, the watched sweep equal to a one-shot merge of the same shards byte for byte, MLflow's file
store holding each checkpoint at its step with no duplicate point, and `until` ending the watch
with exit 3 (step200's errors).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import shardeval_cmd

pytestmark = pytest.mark.timeout(600)

MARKER = "model.safetensors.index.json"
WEIGHTS = "model-00001-of-00001.safetensors"


def files_of(name: str, version: int) -> dict[str, bytes]:
    """A checkpoint's files: a config, 64 KiB of "weights", the marker (each version other bytes)."""
    rnd = random.Random(f"{name}/{version}")
    return {
        "config.json": json.dumps({"step": int(name.removeprefix("step")), "version": version}).encode(),
        WEIGHTS: rnd.randbytes(64 * 1024),
        MARKER: json.dumps({"weight_map": {"w": WEIGHTS}, "version": version}).encode(),
    }


def digests(files: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}


class Trainer:
    """Writes checkpoints as a training run (and its copy jobs) do; remembers when each was whole."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir()
        self.whole: dict[tuple[str, int], float] = {}  # (name, version) -> when its last byte was written

    def write(self, name: str, version: int = 1, *, slow: bool = False, temporary: bool = False) -> None:
        files = files_of(name, version)
        target = self.folder / name
        folder = self.folder / f".{name}.tmp" if temporary else target
        folder.mkdir(exist_ok=True)
        order = [MARKER, *(n for n in files if n != MARKER)] if slow else [*(n for n in files if n != MARKER), MARKER]
        for file in order:
            data = files[file]
            with open(folder / file, "wb") as f:
                step = 8192 if slow else len(data)
                for i in range(0, len(data), step):
                    f.write(data[i : i + step])
                    f.flush()
                    if slow:
                        time.sleep(0.3)
        if temporary:
            os.rename(folder, target)
        self.whole[name, version] = time.time()

    def keep_last(self, k: int) -> list[str]:
        steps = sorted((p for p in self.folder.iterdir() if p.name.startswith("step")), key=lambda p: int(p.name[4:]))
        gone = steps[:-k]
        for p in gone:
            shutil.rmtree(p)
        return [p.name for p in gone]


def read_state(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / "watch" / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def status_of(out: Path, name: str) -> str | None:
    return read_state(out).get("checkpoints", {}).get(name, {}).get("status")


def wait_for(what: str, condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def start_watcher(cfg: Path, out: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "shardeval", "watch", str(cfg), "-o", str(out)], stdout=f, stderr=subprocess.STDOUT, env=env
        )


def sweep_config(tmp_path: Path, store: Path, weights_log: Path, **watch: Any) -> Path:
    cfg = tmp_path / "sweep.yaml"
    doc = {
        "services": {
            "sim": {
                "type": "sim",
                "bench": "arith",
                "ttft_ms": 0,
                "itl_ms": 30,
                "output_tokens": 16,
                "weights_log": str(weights_log),
            }
        },
        "benchmarks": [{"name": "arith", "params": {"n": 24}, "max_concurrent": 2}],
        "cluster": {"shards": 2, "parallel": 1},
        "sweep": {
            "checkpoints": {
                "template": "sim",
                "paths": f"{tmp_path / 'ckpt'}/step*",
                "key": "root",
                "ready": {"marker": MARKER, "quiet_s": 2},
            },
            "watch": {"poll_s": 0.5, "until": {"idle_s": 8}, **watch},
        },
        "export": [{"to": "mlflow", "tracking_uri": store.as_uri(), "experiment": "watch"}],
    }
    cfg.write_text(json.dumps(doc))
    return cfg


def test_a_training_run_watched_each_checkpoint_once_when_whole_through_two_kills(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    out, store, weights_log, log = tmp_path / "out", tmp_path / "mlruns", tmp_path / "weights.jsonl", tmp_path / "watch.log"
    cfg = sweep_config(tmp_path, store, weights_log)
    env = {**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true"}
    trainer = Trainer(tmp_path / "ckpt")

    watcher = start_watcher(cfg, out, env, log)
    trainer.write("step100")
    wait_for("step100's launch", lambda: status_of(out, "step100") == "running")
    watcher.send_signal(signal.SIGKILL)  # kill 1: mid-evaluation; its launch goes on without it
    watcher.wait()
    watcher = start_watcher(cfg, out, env, log)

    trainer.write("step200", slow=True)
    trainer.write("step300", slow=True)
    trainer.write("step400", temporary=True)
    first_cell = out / "step200" / "shard_0" / "arith" / "results.jsonl"
    wait_for("step200's evaluation to begin", lambda: bool(records(first_cell)), timeout=180)
    trainer.write("step500")
    assert trainer.keep_last(3) == ["step100", "step200"]  # step200 mid-evaluation: its shard 1 has not started
    watcher.send_signal(signal.SIGKILL)  # kill 2
    watcher.wait()
    watcher = start_watcher(cfg, out, env, log)

    trainer.write("step600")
    wait_for("step600's first evaluation", lambda: status_of(out, "step600") == "done", timeout=240)
    trainer.write("step600", version=2)  # rewritten in place
    try:
        code = watcher.wait(timeout=300)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    text = log.read_text()
    assert code == 3, text  # `until` (idle), and step200 ended in errors

    state = read_state(out)["checkpoints"]
    names = [f"step{i}00" for i in range(1, 7)]
    assert sorted(state) == names, state.keys()  # never the temporary name
    assert {n: c["status"] for n, c in state.items()} == {**dict.fromkeys(names, "done"), "step200": "errors"}, state
    assert state["step100"].get("deleted_at") and state["step200"].get("deleted_at")
    assert len(state["step600"]["superseded"]) == 1

    # every checkpoint launched exactly once, step600 once per identity: one launch log each, through three watchers
    launches = Counter(p.name.split(".")[0] for p in (out / "watch" / "logs").iterdir())
    assert launches == {**dict.fromkeys(names, 1), "step600": 2}, launches
    assert {n: c["launches"] for n, c in state.items()} == {**dict.fromkeys(names, 1), "step600": 2}

    # none served before it was whole: each sim start read a complete version, after its last byte
    served = records(weights_log)
    by_root = Counter(os.path.basename(os.path.normpath(line["root"])) for line in served)
    assert by_root == {"step100": 2, "step200": 1, "step300": 2, "step400": 2, "step500": 2, "step600": 4}, by_root
    for line in served:
        name = os.path.basename(os.path.normpath(line["root"]))
        version = next((v for v in (1, 2) if (name, v) in trainer.whole and line["files"] == digests(files_of(name, v))), None)
        assert version is not None, f"{name} was served files no version of it had whole: {line['files']}"
        assert line["at"] >= trainer.whole[name, version], (name, version)
    v2_starts = [line for line in served if "step600" in line["root"] and line["files"] == digests(files_of("step600", 2))]
    assert len(v2_starts) == 2

    # step200: deleted mid-evaluation, the cell that started after it ended in errors naming the path
    late = records(out / "step200" / "shard_1" / "arith" / "results.jsonl")
    assert late and all(r["status"] == "error" and r["error_kind"] == "checkpoint_gone" and "step200" in r["error"] for r in late)
    assert records(first_cell) and all(r["status"] == "ok" for r in records(first_cell))

    # the sweep grew in place and equals a one-shot merge of the same shards, byte for byte
    sweep = json.loads((out / "merged" / "sweep.json").read_text())
    assert sweep["services"] == names and sweep["baseline"] == "step100"
    oneshot = tmp_path / "oneshot"
    merged = shardeval_cmd("merge", str(out), "-o", str(oneshot), env=env)
    assert merged.returncode == 3 and "ERRORS" in merged.stdout, merged.stdout + merged.stderr
    assert (out / "merged" / "sweep.json").read_bytes() == (oneshot / "sweep.json").read_bytes()
    for name in names:
        assert (out / name / "merged" / "scores.json").read_bytes() == (oneshot / name / "scores.json").read_bytes(), name
    assert (out / "merged" / "sweep.html").exists() or "sweep.html" in text

    # MLflow: each checkpoint at its step, no duplicate point in any metric's history
    from mlflow import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=store.as_uri())
    runs = client.search_runs([client.get_experiment_by_name("watch").experiment_id], max_results=100)
    assert sorted(r.info.run_name for r in runs) == [f"{n}/arith" for n in names]
    for run in runs:
        step = int(run.info.run_name.split("/")[0].removeprefix("step"))
        accuracy = client.get_metric_history(run.info.run_id, "accuracy")
        assert [(h.step, h.value) for h in accuracy] == [(step, accuracy[0].value)], run.info.run_name
        for metric in run.data.metrics:
            history = client.get_metric_history(run.info.run_id, metric)
            assert {h.step for h in history} == {step}, (run.info.run_name, metric)
            assert len({(h.step, h.value) for h in history}) == len(history), (run.info.run_name, metric, history)
