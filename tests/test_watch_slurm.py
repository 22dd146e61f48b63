"""`shardeval watch` with `cluster.type: slurm` (issue 42): one array per checkpoint, and a watcher
restarted while the arrays are queued submits no second one.

A SLURM launch (`shardeval run … --sweep-services stepN --no-merge`) exits as soon as sbatch has
queued the array, long before any cell writes a manifest; the watcher then asks the slurm plugin
(the launch_pending hook, from squeue) whether the array still holds cells, and waits instead of
calling the launch failed. The end-to-end test runs on the real one-node SLURM of
scripts/setup/slurm.sh (the `slurm` fixture of tests/test_slurm.py); its arrays are submitted held
(`sbatch_extra_flags: [--hold]`, so they stay queued for as long as the test wants, however idle
the node is) and released with `scontrol release`. The arrays are counted from slurmctld itself
(every job of the test's own job name), not only from slurm_job.json, which this plugin writes.

The record tests need no SLURM: several one-model submissions into one root, each found again per
model, and none lost when the launches record themselves at the same moment.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import shardeval_cmd
from test_slurm import slurm  # noqa: F401  (the fixture: a running one-node SLURM)

MARKER = "model.safetensors.index.json"
CHECKPOINTS = ["step1", "step2", "step3"]


# -- slurm_job.json: several one-model launches into one sweep root (no SLURM needed) -------------


def one_model(job: str, model: str, at: float) -> dict[str, Any]:
    """What a watcher's launch of `model` records: a one-model sweep, its script in the model's folder."""
    return {
        "array_job_id": job,
        "submitted_at": at,
        "total_shards": 2,
        "tasks": [0, 1],
        "script": f"{model}/eval.sbatch",
        "sweep": {"services": [model], "shards": 2},
    }


def test_each_checkpoint_launch_is_found_again_by_its_model(tmp_path: Path) -> None:
    from shardeval_slurm import rerun_hint
    from shardeval_slurm.jobs import current_submissions, latest_submission

    full = {"array_job_id": "10", "total_shards": 2, "tasks": [0, 1, 2, 3], "sweep": {"services": ["base", "step1"], "shards": 2}}
    step2, step3 = one_model("11", "step2", 2.0), one_model("12", "step3", 3.0)
    step2_again = {**one_model("13", "step2", 4.0), "tasks": [1]}  # its shard 1 resubmitted
    record = {**step2_again, "previous": [full, step2, step3]}
    (tmp_path / "slurm_job.json").write_text(json.dumps(record))

    latest = {m: (latest_submission(record, m) or {}).get("array_job_id") for m in ("base", "step1", "step2", "step3")}
    assert latest == {"base": "10", "step1": "10", "step2": "13", "step3": "12"}
    assert latest_submission(record, "step9") is None
    assert [s["array_job_id"] for s in current_submissions(record)] == ["10", "12", "13"]  # 11: step2 was queued again since

    assert rerun_hint(run_dir=str(tmp_path / "step3"), shards=[1]) == f"`sbatch --array=1 {tmp_path}/step3/eval.sbatch`"
    assert rerun_hint(run_dir=str(tmp_path / "step1"), shards=[0, 1]) == f"`sbatch --array=2-3 {tmp_path}/eval.sbatch`"
    assert rerun_hint(run_dir=str(tmp_path / "step2"), shards=[0]) == f"`sbatch --array=0 {tmp_path}/step2/eval.sbatch`"


def _record_one(root: str, model: str, start: Any) -> None:
    from shardeval_slurm.submit import _add_record

    start.wait()
    _add_record(root, one_model(str(100 + int(model.removeprefix("step"))), model, time.time()))


def test_launches_recorded_at_the_same_moment_are_all_kept(tmp_path: Path) -> None:
    """A watcher submits every ready checkpoint at once: each launch rewrites slurm_job.json, and a
    lost one would be an array that nobody waits for (and that a restarted watcher submits again)."""
    from shardeval_slurm.jobs import read_record, submissions

    context = multiprocessing.get_context("spawn")
    start = context.Event()
    models = [f"step{i}" for i in range(8)]
    writers = [context.Process(target=_record_one, args=(str(tmp_path), model, start)) for model in models]
    for writer in writers:
        writer.start()
    start.set()
    for writer in writers:
        writer.join(timeout=60)
        assert writer.exitcode == 0
    record = read_record(str(tmp_path))
    assert record is not None
    assert sorted(s["sweep"]["services"][0] for s in submissions(record)) == models


# -- the watcher on a real SLURM --------------------------------------------------------------------


@pytest.fixture
def job_name() -> Iterator[str]:
    """A job name of this test alone; every job of it is cancelled at the end, whatever happened."""
    name = f"watch-slurm-{os.getpid()}-{int(time.time())}"
    yield name
    subprocess.run(["scancel", "--name", name], capture_output=True, timeout=60)


def arrays_named(name: str) -> dict[str, list[str]]:
    """{array job id: its tasks' states} of every job slurmctld knows by this name (pending ones
    folded into one line count once: what matters is how many arrays were submitted)."""
    from shardeval_slurm.jobs import parse_fields

    shown = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True, timeout=60).stdout
    arrays: dict[str, list[str]] = {}
    for fields in map(parse_fields, shown.splitlines()):
        if fields.get("JobName") == name:
            arrays.setdefault(fields.get("ArrayJobId") or fields["JobId"], []).append(fields.get("JobState", "?"))
    return arrays


def wait_for(what: str, condition: Callable[[], bool], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}\n{log.read_text(errors='replace')[-4000:]}"
        time.sleep(0.3)


def read_state(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / "watch" / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def checkpoints(out: Path) -> dict[str, dict[str, Any]]:
    return read_state(out).get("checkpoints", {})


def start_watcher(cfg: Path, out: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, "-m", "shardeval", "watch", str(cfg), "-o", str(out)], stdout=f, stderr=subprocess.STDOUT)


def write_checkpoint(folder: Path, step: int) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"step": step}))
    (folder / "model-00001-of-00001.safetensors").write_bytes(os.urandom(4096))
    (folder / MARKER).write_text(json.dumps({"weight_map": {}}))  # the file a trainer writes last


def sweep_config(tmp_path: Path, job_name: str) -> Path:
    cfg = tmp_path / "sweep.yaml"
    doc = {
        "services": {"sim": {"type": "sim", "bench": "arith", "ttft_ms": 0, "itl_ms": 0.2, "output_tokens": 16}},
        "benchmarks": [{"name": "arith", "params": {"n": 16}, "max_concurrent": 4}],
        "sweep": {
            "checkpoints": {
                "template": "sim",
                "paths": f"{tmp_path / 'ckpt'}/step*",
                "key": "root",
                "ready": {"marker": MARKER, "quiet_s": 1},
            },
            "watch": {"poll_s": 1, "until": {"idle_s": 5}},
        },
        "cluster": {
            "type": "slurm",
            "shards": 1,
            "walltime": "00:10:00",
            "partition": "debug",
            "job_name": job_name,
            "sbatch_extra_flags": ["--hold"],  # queued until the test releases them
        },
        "output": {"progress_interval_s": 5},
    }
    cfg.write_text(json.dumps(doc))
    return cfg


@pytest.mark.timeout(300)
def test_one_array_per_checkpoint_and_a_restart_while_queued_submits_none_again(
    slurm: str,
    tmp_path: Path,
    job_name: str,
) -> None:
    out, log = tmp_path / "out", tmp_path / "watch.log"
    for step, name in enumerate(CHECKPOINTS, 1):
        write_checkpoint(tmp_path / "ckpt" / name, step)
    cfg = sweep_config(tmp_path, job_name)
    watcher = start_watcher(cfg, out, log)
    try:
        # every checkpoint submitted, each as an array of its own, held in the queue
        wait_for("three arrays", lambda: len(arrays_named(job_name)) == 3, 90, log)
        wait_for(
            "the watcher to find every array queued",
            lambda: all("queued on slurm" in c["why"] for c in checkpoints(out).values()) and len(checkpoints(out)) == 3,
            60,
            log,
        )
        arrays = arrays_named(job_name)
        assert all(set(states) == {"PENDING"} for states in arrays.values()), arrays
        polls = read_state(out)["polls"]
        wait_for("three more polls", lambda: read_state(out)["polls"] >= polls + 3, 30, log)
        assert len(arrays_named(job_name)) == 3  # waited for, not called failed and submitted again

        watcher.send_signal(signal.SIGKILL)  # killed while the arrays are queued
        watcher.wait(timeout=30)
        watcher = start_watcher(cfg, out, log)
        polls = read_state(out)["polls"]
        wait_for("the restarted watcher's polls", lambda: read_state(out)["polls"] >= polls + 4, 60, log)
        assert watcher.poll() is None, log.read_text()
        assert arrays_named(job_name).keys() == arrays.keys()  # no second array
        state = checkpoints(out)
        assert {n: (c["status"], c["launches"], c["failures"]) for n, c in state.items()} == dict.fromkeys(CHECKPOINTS, ("running", 1, 0))
        assert sorted(p.name for p in (out / "watch" / "logs").iterdir()) == [f"{n}.1.log" for n in CHECKPOINTS]

        # slurm_job.json: one submission per checkpoint, its script in the checkpoint's folder
        from shardeval_slurm.jobs import read_record, submissions

        record = read_record(str(out))
        assert record is not None
        recorded = {s["sweep"]["services"][0]: s for s in submissions(record)}
        assert sorted(recorded) == CHECKPOINTS and {s["array_job_id"] for s in recorded.values()} == set(arrays)
        assert all(s["script"] == f"{n}/eval.sbatch" and (out / n / "eval.sbatch").is_file() for n, s in recorded.items())
        assert not (out / "eval.sbatch").exists() and not (out / "merge.sbatch").exists()  # the watcher merges

        # `status` shows every checkpoint's array, each task named by its cell
        status = shardeval_cmd("status", str(out))
        assert status.returncode == 0, status.stderr
        for name, submission in recorded.items():
            assert f"slurm array job {submission['array_job_id']}: 1 PENDING" in status.stdout, status.stdout
            assert f"{name} shard 0/1 PENDING" in " ".join(status.stdout.split()), status.stdout

        subprocess.run(["scontrol", "release", ",".join(sorted(arrays))], check=True, capture_output=True, timeout=60)
        code = watcher.wait(timeout=200)  # each array runs, is merged as it ends; `until: idle_s` ends the watch
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    text = log.read_text(errors="replace")
    assert code == 0, text[-4000:]

    assert arrays_named(job_name).keys() == arrays.keys(), text[-4000:]  # still one array per checkpoint
    assert all(set(states) == {"COMPLETED"} for states in arrays_named(job_name).values()), arrays_named(job_name)
    state = checkpoints(out)
    assert {n: (c["status"], c["launches"]) for n, c in state.items()} == dict.fromkeys(CHECKPOINTS, ("done", 1)), state
    assert read_state(out)["exit_code"] == 0 and "until: nothing new" in read_state(out)["stopped"]
    sweep = json.loads((out / "merged" / "sweep.json").read_text())
    assert sweep["services"] == CHECKPOINTS and not sweep["partial"], sweep
    cells = [c for c in sweep["cells"] if c["metric"] == "accuracy"]
    assert sorted(c["service"] for c in cells) == CHECKPOINTS and all(c["n_ok"] == c["n_expected"] == 16 for c in cells), cells
    for name in CHECKPOINTS:
        assert json.loads((out / name / "shard_0" / "manifest.json").read_text())["state"] == "complete"
