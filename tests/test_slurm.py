"""`cluster.type: slurm` against a real one-node SLURM (slurmctld + slurmd + munge, 22.05).

A session fixture runs scripts/setup/slurm.sh (installs with apt when missing, starts the daemons
when not running; idempotent). Each array task starts its own simulator, as a GPU node starts its
own vLLM. Every wait polls scontrol with a deadline; nothing asserts on timing. Jobs a test
submitted are cancelled at its end, whatever happened.

The recovery paths users take are tested as documented (docs/slurm.md): an array task cancelled
mid-run and put back with `scontrol requeue` (22.05 requeues a cancelled array task; it then waits
for a BeginTime SLURM sets, which `scontrol update … StartTime=now` lifts) resumes without
duplicates; a task that never ran is resubmitted with `sbatch --array=<i> eval.sbatch`, as the
merge report says.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Callable, Iterator

import pytest

from conftest import REPO, shardeval_cmd

EXAMPLE = Path(REPO) / "examples" / "slurm_arith_sim.yaml"
RAY_EXAMPLE = Path(REPO) / "examples" / "slurm_ray_arith_sim.yaml"
SWEEP_EXAMPLE = Path(REPO) / "examples" / "slurm_sweep_sim.yaml"
TRUE_ACCURACY = {"base": 0.55, "mid": 0.65, "top": 0.75}  # slurm_sweep_sim.yaml's simulators
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="session")
def slurm() -> str:
    """A running one-node SLURM, started (or found running) by scripts/setup/slurm.sh."""
    if os.geteuid() != 0 and shutil.which("sbatch") is None:
        pytest.skip("SLURM is not installed and installing it needs root (scripts/setup/slurm.sh)")
    setup = subprocess.run(["bash", os.path.join(REPO, "scripts", "setup", "slurm.sh")], capture_output=True, text=True, timeout=600)
    assert setup.returncode == 0, f"scripts/setup/slurm.sh failed:\n{setup.stdout}\n{setup.stderr}"
    assert "slurm: ready; config /etc/slurm/slurm.conf" in setup.stdout
    node = subprocess.run(["sinfo", "-h", "-o", "%P %T"], capture_output=True, text=True, check=True).stdout
    assert "debug" in node, node
    return setup.stdout.strip()


@pytest.fixture
def jobs() -> Iterator[list[str]]:
    """Job ids a test submitted; whatever is left of them is cancelled afterwards."""
    submitted: list[str] = []
    yield submitted
    if submitted:
        subprocess.run(["scancel", *submitted], capture_output=True, timeout=60)


def tasks(job_id: str) -> dict[str, str]:
    """{array index (or '-'): state} of a job, from scontrol (what `shardeval status` shows too)."""
    from shardeval_slurm.jobs import job_tasks

    found = job_tasks(job_id)
    assert not isinstance(found, str), found
    return {t.task: t.state for t in found}


def wait_until(what: str, check: Callable[[], bool], timeout: float = 180.0, root: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{logs(root) if root else ''}")


def done(job_id: str) -> bool:
    states = tasks(job_id)
    return bool(states) and all(s in TERMINAL for s in states.values())


def logs(root: Path) -> str:
    """Every SLURM log under the run, for a failing assertion's message."""
    parts = []
    for path in sorted(root.rglob("slurm-*")) + sorted(root.rglob("merge-*")) + sorted(root.rglob("ray-*.err")):
        parts.append(f"--- {path}\n{path.read_text(errors='replace')[-3000:]}")
    return "\n".join(parts)


def submit(root: Path, *args: str, example: Path = EXAMPLE) -> dict:
    result = shardeval_cmd("run", str(example), "-o", str(root), *args, timeout=120)
    assert result.returncode == 0, result.stderr
    record = json.loads((root / "slurm_job.json").read_text())
    assert "submitted array job" in result.stderr
    return record


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def scores(root: Path) -> dict:
    return json.loads((root / "merged" / "scores.json").read_text())["arith"]


def assert_complete(s: dict, n_expected: int) -> None:
    assert (s["n_expected"], s["n_records"], s["n_missing"], s["n_duplicates"], s["n_errors"]) == (n_expected, n_expected, 0, 0, 0), s
    acc = s["metrics"]["accuracy"]
    assert acc["ci_low"] <= acc["value"] <= acc["ci_high"]
    assert acc["ci_low"] <= 0.7 <= acc["ci_high"], acc  # the simulator's true accuracy


def test_array_job_end_to_end_with_dependent_merge(slurm: str, tmp_path: Path, jobs: list[str]) -> None:
    root = tmp_path / "slurm run"  # a space: every path in the scripts must survive it
    record = submit(root, "-O", "benchmarks.0.params.n=60")
    array, merge = record["array_job_id"], record["merge_job_id"]
    jobs += [array, merge]
    text = (root / "eval.sbatch").read_text()
    assert "#SBATCH --array=0-3%4" in text and "#SBATCH --partition=debug" in text
    wait_until("the merge job to finish", lambda: done(merge), root=root)
    assert set(tasks(array).values()) == {"COMPLETED"}, logs(root)
    assert tasks(merge) == {"-": "COMPLETED"}, logs(root)
    assert_complete(scores(root), 120)
    for i in range(4):
        manifest = json.loads((root / f"shard_{i}" / "manifest.json").read_text())
        assert (manifest["shard_idx"], manifest["total_shards"], manifest["state"]) == (i, 4, "complete")
        out = next((root / f"shard_{i}" / "logs").glob(f"slurm-{array}_{i}.err")).read_text()
        assert f"(array {array}_{i}, restart 0)" in out and f"shard {i}/4" in out
        assert (root / f"shard_{i}" / "logs" / "sim.log").exists()  # the task started its own server
    assert "COMPLETE" in next((root / "logs").glob(f"merge-{merge}.out")).read_text()
    page = (root / "merged" / "report.html").read_text()  # the merge job writes the page as well
    assert 'id="chart-specs"' in page and "vegaEmbed" in page
    status = shardeval_cmd("status", str(root))
    assert status.returncode == 0, status.stderr
    assert f"slurm array job {array}: 4 COMPLETED" in status.stdout and f"slurm merge job {merge}: COMPLETED" in status.stdout

    # A changed config on the finished run is refused before anything is queued (each task would
    # only refuse to resume it after queueing, and the dependent merge would report the old run).
    before = (root / "slurm_job.json").read_text()
    changed = shardeval_cmd("run", str(EXAMPLE), "-o", str(root), "-O", "benchmarks.0.params.n=60", "-O", "benchmarks.0.repeats=3")
    assert changed.returncode == 2 and "Traceback" not in changed.stderr, changed.stderr
    assert "cannot be resumed: it holds another run" in changed.stderr and "nothing submitted" in changed.stderr
    assert "benchmarks[0].repeats: 2 -> 3" in changed.stderr  # what changed, key by key
    assert (root / "slurm_job.json").read_text() == before  # nothing submitted
    assert not (root / "shard_0" / "superseded").exists()


def test_cancelled_task_requeued_resumes_without_duplicates(slurm: str, tmp_path: Path, jobs: list[str]) -> None:
    root = tmp_path / "run"
    # slow enough that task 1 is cancelled mid-shard: 30 records a shard, one at a time, 0.25 s each
    record = submit(
        root, "-O", "benchmarks.0.params.n=40", "-O", "benchmarks.0.repeats=3", "-O", "benchmarks.0.max_concurrent=1",
        "-O", "services.model.ttft_ms=250", "-O", "output.drain_timeout_s=2",
    )  # fmt: skip
    array, merge = record["array_job_id"], record["merge_job_id"]
    jobs += [array, merge]
    results = root / "shard_1" / "arith" / "results.jsonl"
    wait_until("shard 1 to write some records", lambda: lines(results) >= 3, root=root)

    status = shardeval_cmd("status", str(root))
    assert status.returncode == 0, status.stderr
    assert f"slurm array job {array}:" in status.stdout and "RUNNING" in status.stdout, status.stdout
    assert f"slurm merge job {merge}: PENDING (Dependency)" in status.stdout, status.stdout

    subprocess.run(["scancel", f"{array}_1"], check=True, timeout=60)
    wait_until("task 1 to be cancelled", lambda: tasks(array).get("1") == "CANCELLED", root=root)
    partial = lines(results)
    assert 0 < partial < 30, "the cancel must land mid-shard"
    assert tasks(merge)["-"] == "PENDING"  # tasks 2 and 3 have not finished: the merge still waits

    # 22.05 requeues a cancelled array task; SLURM then holds it (BeginTime) for a while: lift that
    subprocess.run(["scontrol", "requeue", f"{array}_1"], check=True, timeout=60)
    subprocess.run(["scontrol", "update", f"JobId={array}_1", "StartTime=now"], check=True, timeout=60)
    wait_until("the merge job to finish", lambda: done(merge), timeout=240, root=root)
    assert set(tasks(array).values()) == {"COMPLETED"}, logs(root)

    recs = [json.loads(line) for line in results.read_text().splitlines()]
    keys = [(r["problem_idx"], r["repeat"]) for r in recs if r["status"] == "ok"]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 30, "resumed: every pair answered exactly once"
    err = (root / "shard_1" / "logs" / f"slurm-{array}_1.err").read_text()
    assert f"(array {array}_1, restart 0)" in err and f"(array {array}_1, restart 1)" in err  # appended, not overwritten
    assert "resuming" in err
    assert_complete(scores(root), 120)


@pytest.mark.timeout(420)
def test_time_limit_drains_then_requeues_itself_a_bounded_number_of_times(slurm: str, tmp_path: Path, jobs: list[str]) -> None:
    """A one-minute walltime on a shard that needs two: SLURM's early USR1 (--signal=B:USR1@23)
    reaches the batch shell, the shard drains (no request ends as a connection error, as it did
    when SLURM's SIGTERM at the limit hit the simulator too), the task requeues itself once
    (requeue_on_timeout: 1), resumes, and the second time says it will not requeue again."""
    root = tmp_path / "run"
    record = submit(
        root, "-O", "cluster.shards=1", "-O", "cluster.walltime=\"1\"", "-O", "cluster.requeue_on_timeout=1",
        "-O", "cluster.stop_margin_s=20", "-O", "cluster.merge=false", "-O", "output.drain_timeout_s=3",
        "-O", "benchmarks.0.params.n=400", "-O", "benchmarks.0.repeats=1", "-O", "benchmarks.0.max_concurrent=2",
        "-O", "services.model.ttft_ms=500",
    )  # fmt: skip
    array = record["array_job_id"]
    jobs.append(array)
    assert "#SBATCH --signal=B:USR1@23" in (root / "eval.sbatch").read_text()
    err_log = root / "shard_0" / "logs" / f"slurm-{array}_0.err"
    err = lambda: err_log.read_text() if err_log.exists() else ""  # noqa: E731
    wait_until("the first attempt to requeue itself", lambda: "requeue 1 of 1" in err(), timeout=150, root=root)
    first = json.loads((root / "shard_0" / "manifest.json").read_text())
    assert first["state"] == "interrupted", first  # drained and closed, not killed at the limit

    # SLURM starts it again by itself once the old credential expired (cred_expire, 20 s on the test
    # cluster): lifting its BeginTime sooner makes slurmd refuse it ("Job credential revoked")
    wait_until("the requeued attempt to start", lambda: "restart 1" in err(), timeout=150, root=root)
    wait_until("the second attempt to end", lambda: done(array), timeout=150, root=root)
    text = err()
    assert text.count("time limit near") == 2 and "not requeued: 1 requeue(s) used" in text, text
    assert "resuming" in text
    recs = [json.loads(line) for line in (root / "shard_0" / "arith" / "results.jsonl").read_text().splitlines()]
    assert recs and all(r["status"] == "ok" for r in recs), [r for r in recs if r["status"] != "ok"][:3]
    keys = [(r["problem_idx"], r["repeat"]) for r in recs]
    assert len(keys) == len(set(keys)) and len(keys) < 400  # resumed without asking twice; really cut short
    assert json.loads((root / "shard_0" / "manifest.json").read_text())["state"] == "interrupted"


def test_a_rerun_while_the_task_still_runs_is_refused_by_its_shard_lock(slurm: str, tmp_path: Path, jobs: list[str]) -> None:
    """The rerun merge recommends (`sbatch --array=0 eval.sbatch`), submitted while the original
    task still runs: the second task finds the shard directory's lock held and stops in one line
    naming the holder's pid, host and SLURM job; the original finishes alone, each pair once."""
    root = tmp_path / "run"
    record = submit(
        root, "-O", "cluster.shards=1", "-O", "cluster.merge=false", "-O", "benchmarks.0.params.n=40",
        "-O", "benchmarks.0.max_concurrent=1", "-O", "services.model.ttft_ms=500",
    )  # fmt: skip
    array = record["array_job_id"]
    jobs.append(array)
    results = root / "shard_0" / "arith" / "results.jsonl"
    wait_until("the task to write records", lambda: lines(results) >= 2, root=root)
    again = subprocess.run(["sbatch", "--parsable", "--array=0", str(root / "eval.sbatch")], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    rerun = again.stdout.strip().split(";")[0]
    jobs.append(rerun)
    wait_until("the second writer to stop", lambda: done(rerun), timeout=120, root=root)
    assert tasks(rerun) == {"0": "FAILED"}, logs(root)
    err = (root / "shard_0" / "logs" / f"slurm-{rerun}_0.err").read_text()
    refusal = [line for line in err.splitlines() if "already being written by" in line]
    assert len(refusal) == 1 and f"(SLURM job {array}_0, since" in refusal[0] and "Traceback" not in err, err
    assert tasks(array) == {"0": "RUNNING"}  # the first writer goes on
    wait_until("the original task to finish", lambda: done(array), timeout=180, root=root)
    assert tasks(array) == {"0": "COMPLETED"}, logs(root)
    keys = [(r["problem_idx"], r["repeat"]) for r in map(json.loads, results.read_text().splitlines())]
    assert len(keys) == len(set(keys)) == 80  # every pair asked once


def test_tasks_sharing_a_node_each_pick_a_free_port(slurm: str, tmp_path: Path, jobs: list[str]) -> None:
    """Two array tasks on the one node, each launching a `vllm` service configured with the same
    fixed port (its engine is the simulator, which takes vLLM's flags): without --exclusive every
    task's command gets `-O services.model.port=0`, so both bind a port of their own and finish
    (before, the second found the port taken and failed)."""
    from shardeval.run.process import free_port

    fixed = free_port()
    launch = [
        sys.executable,
        "-m",
        "shardeval",
        "sim",
        "--ttft-ms",
        "300",
        "--itl-ms",
        "0",
        "--bench",
        "arith",
        "--bench-param",
        "n=40",
        "--root",
        "{model}",
    ]
    cfg = tmp_path / "ports.yaml"
    cfg.write_text(
        json.dumps(
            {
                "services": {
                    "model": {
                        "type": "vllm",
                        "model": "/ckpt/m",
                        "served_model_name": "sim",
                        "port": fixed,
                        "launch_command": launch,
                        "startup_timeout_s": 60,
                        "stop_timeout_s": 5,
                    }
                },
                "benchmarks": [{"name": "arith", "params": {"n": 40}, "max_concurrent": 1}],
                "cluster": {"type": "slurm", "walltime": "5:00", "shards": 2, "partition": "debug", "merge": False},
            }
        )
    )
    root = tmp_path / "run"
    result = shardeval_cmd("run", str(cfg), "-o", str(root), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "-O services.model.port=0" in (root / "eval.sbatch").read_text()
    array = json.loads((root / "slurm_job.json").read_text())["array_job_id"]
    jobs.append(array)
    wait_until(
        "both tasks to run at once", lambda: list(tasks(array).values()).count("RUNNING") == 2 or done(array), timeout=120, root=root
    )
    wait_until("both tasks to finish", lambda: done(array), timeout=180, root=root)
    assert tasks(array) == {"0": "COMPLETED", "1": "COMPLETED"}, logs(root)
    ports = set()
    for i in range(2):
        assert json.loads((root / f"shard_{i}" / "manifest.json").read_text())["state"] == "complete"
        log = (root / f"shard_{i}" / "logs" / "shard.log").read_text()
        ports |= {word.rsplit(":", 1)[1].split("/")[0] for word in log.split() if word.startswith("http://127.0.0.1:")}
    assert len(ports) == 2 and str(fixed) not in ports, ports


def test_missing_task_resubmitted_with_sbatch_array(slurm: str, tmp_path: Path, jobs: list[str]) -> None:
    """A task that never ran: the merge report names it, `sbatch --array=3 eval.sbatch` fills it in."""
    root = tmp_path / "run"
    record = submit(root, "-O", "benchmarks.0.params.n=40", "-O", "cluster.max_parallel=2")
    array, merge = record["array_job_id"], record["merge_job_id"]
    jobs += [array, merge]
    subprocess.run(["scancel", f"{array}_3"], check=True, timeout=60)  # still pending: %2 keeps it queued
    wait_until("the merge job to finish", lambda: done(merge), root=root)
    assert "3" not in tasks(array)  # a task cancelled while pending leaves no record in slurmctld
    report = next((root / "logs").glob(f"merge-{merge}.out")).read_text()
    assert "PARTIAL" in report and "--array=3" in report, report
    assert scores(root)["n_missing"] == 20

    again = subprocess.run(["sbatch", "--parsable", "--array=3", str(root / "eval.sbatch")], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    rerun = again.stdout.strip().split(";")[0]
    jobs.append(rerun)
    wait_until("the resubmitted task to finish", lambda: done(rerun), root=root)
    assert tasks(rerun) == {"3": "COMPLETED"}, logs(root)
    manifest = json.loads((root / "shard_3" / "manifest.json").read_text())
    assert (manifest["shard_idx"], manifest["state"]) == (3, "complete")  # array index 3 is shard 3
    merged = shardeval_cmd("merge", str(root))
    assert merged.returncode == 0, merged.stderr
    assert_complete(scores(root), 80)


def test_submitting_twice_while_the_array_runs_is_refused(slurm: str, tmp_path: Path, jobs: list[str]) -> None:
    root = tmp_path / "run"
    record = submit(root, "-O", "benchmarks.0.params.n=40", "-O", "services.model.ttft_ms=200", "-O", "benchmarks.0.max_concurrent=1")
    jobs += [record["array_job_id"], record["merge_job_id"]]
    again = shardeval_cmd("run", str(EXAMPLE), "-o", str(root), "-O", "benchmarks.0.params.n=40")
    assert again.returncode == 2, again.stderr
    assert f"job {record['array_job_id']} of this run still has" in again.stderr and "Traceback" not in again.stderr
    # --fresh while it runs: checked first, so nothing is moved under the running tasks' feet
    results = root / "shard_0" / "arith" / "results.jsonl"
    wait_until("shard 0 to write a record", lambda: lines(results) >= 1, root=root)
    fresh = shardeval_cmd("run", str(EXAMPLE), "-o", str(root), "-O", "benchmarks.0.params.n=40", "--fresh")
    # refused by whichever check sees the live run first: the shard's writer (its lease names the SLURM
    # job) or the queued tasks of this run's array; either names the job
    assert fresh.returncode == 2 and "Traceback" not in fresh.stderr, fresh.stderr
    assert f"job {record['array_job_id']} of this run still has" in fresh.stderr or (
        "already being written by pid" in fresh.stderr and f"SLURM job {record['array_job_id']}" in fresh.stderr
    ), fresh.stderr
    assert not list(root.glob("shard_*/superseded")) and results.exists()


def test_ray_on_slurm_one_node(slurm: str, tmp_path: Path, jobs: list[str]) -> None:
    pytest.importorskip("ray", reason="pip install ray==2.60.0 to run Ray on SLURM")
    pytest.importorskip("shardeval_ray", reason="the Ray launcher plugin is not installed")
    from shardeval.run.process import free_port

    root = tmp_path / "ray run"
    result = shardeval_cmd(
        "run", str(RAY_EXAMPLE), "-o", str(root), "-O", "benchmarks.0.params.n=40", "-O", f"cluster.ray_port={free_port()}",
        "-O", "cluster.ray_start_timeout_s=120", timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = json.loads((root / "slurm_job.json").read_text())["ray_job_id"]
    jobs.append(job)
    wait_until("the Ray job to finish", lambda: done(job), timeout=240, root=root)
    assert tasks(job) == {"-": "COMPLETED"}, logs(root)
    err = next((root / "logs").glob(f"ray-{job}.err")).read_text()
    assert "all 1 node(s) joined" in err and "Ray stopped" in err, err
    assert_complete(scores(root), 80)
    for i in range(4):
        assert json.loads((root / f"shard_{i}" / "manifest.json").read_text())["state"] == "complete"
    # the job's Ray is gone: nothing keeps its temp dir open
    leftover = subprocess.run(["pgrep", "-f", f"ray-shardeval-{job}/"], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "Ray processes of the job outlived it"
    assert not os.path.exists(f"/tmp/ray-shardeval-{job}"), "the job's Ray temp dir (sessions, sockets, logs) was left behind"


def test_sweep_is_one_array_of_cells_and_one_dependent_merge(slurm: str, tmp_path: Path, jobs: list[str]) -> None:
    """3 models × 2 shards: ONE array job of 6 tasks (task c = shard c mod 2 of model c div 2) and
    ONE merge job after it, which writes the 3 × 2 sweep table; resubmitting the finished sweep
    queues nothing."""
    root = tmp_path / "sweep run"
    small: tuple[str, ...] = ()  # the example as written: n=300 per benchmark, 150 a shard
    record = submit(root, *small, example=SWEEP_EXAMPLE)
    array, merge = record["array_job_id"], record["merge_job_id"]
    jobs += [array, merge]
    assert record["sweep"] == {"services": ["base", "mid", "top"], "shards": 2} and record["tasks"] == list(range(6))
    dependency = subprocess.run(["scontrol", "-o", "show", "job", merge], capture_output=True, text=True, timeout=60).stdout
    assert f"Dependency=afterany:{array}_*" in dependency or "JobState=COMPLETED" in dependency, dependency
    wait_until("the merge job to finish", lambda: done(merge), root=root)
    assert tasks(array) == {str(c): "COMPLETED" for c in range(6)}, logs(root)  # one array, every cell a task of it
    assert tasks(merge) == {"-": "COMPLETED"}, logs(root)
    for c in range(6):
        model, k = ["base", "mid", "top"][c // 2], c % 2
        manifest = json.loads((root / model / f"shard_{k}" / "manifest.json").read_text())
        assert (manifest["shard_idx"], manifest["total_shards"], manifest["state"], manifest["sweep"]["service"]) == (
            k,
            2,
            "complete",
            model,
        )
        err = (root / "logs" / f"slurm-{array}_{c}.err").read_text()
        assert f"(array {array}_{c}, restart 0)" in err and f"cell {c} = {model} shard {k}/2" in err, err
    sweep = json.loads((root / "merged" / "sweep.json").read_text())
    cells = {(c["service"], c["benchmark"]): c for c in sweep["cells"] if c["metric"] == "accuracy"}
    assert set(cells) == {(m, b) for m in TRUE_ACCURACY for b in ("arith", "arith_b")} and not sweep["partial"]
    for bench in ("arith", "arith_b"):  # the simulators' accuracies 0.55 < 0.65 < 0.75, in each column
        column = [cells[model, bench] for model in TRUE_ACCURACY]
        assert all(c["n"] == 300 and c["ci_low"] <= c["value"] <= c["ci_high"] for c in column), column
        assert column[0]["value"] < column[1]["value"] < column[2]["value"], column
    pairs = {(r["service"], r["benchmark"]): r for r in sweep["vs_baseline"]}
    assert set(pairs) == {(m, b) for m in ("mid", "top") for b in ("arith", "arith_b")}
    assert all(r["diff"] > 0 and r["ci_low"] > 0 for r in pairs.values()), pairs  # better than the baseline, paired
    assert "COMPLETE" in (root / "logs" / f"merge-{merge}.out").read_text()
    status = shardeval_cmd("status", str(root))
    assert status.returncode == 0, status.stderr
    assert f"slurm array job {array}: 6 COMPLETED" in status.stdout and "top shard 1/2" in status.stdout, status.stdout
    assert "resubmit" not in status.stdout

    again = shardeval_cmd("run", str(SWEEP_EXAMPLE), "-o", str(root), *small)
    assert again.returncode == 0 and "already complete: nothing submitted" in again.stdout, again.stderr
    assert json.loads((root / "slurm_job.json").read_text())["array_job_id"] == array

    # a fourth model: only its 2 cells are queued (tasks 6 and 7); the finished cells are left alone
    finished = {p: p.read_bytes() for p in root.glob("*/shard_*/manifest.json")}
    fourth = ("-O", "services.new={type: sim, bench: arith, accuracy: 0.85, ttft_ms: 5}", "-O", "sweep.services=[base, mid, top, new]")
    record = submit(root, *small, *fourth, example=SWEEP_EXAMPLE)
    array, merge = record["array_job_id"], record["merge_job_id"]
    jobs += [array, merge]
    assert record["tasks"] == [6, 7] and record["sweep"]["services"] == ["base", "mid", "top", "new"]
    wait_until("the fourth model's merge job to finish", lambda: done(merge), root=root)
    assert tasks(array) == {"6": "COMPLETED", "7": "COMPLETED"}, logs(root)
    assert {p: p.read_bytes() for p in finished} == finished  # no old cell ran again
    sweep = json.loads((root / "merged" / "sweep.json").read_text())
    assert {c["service"] for c in sweep["cells"]} == {"base", "mid", "top", "new"} and not sweep["partial"]


def test_sweep_cancelled_cells_are_named_with_the_array_to_resubmit(slurm: str, tmp_path: Path, jobs: list[str]) -> None:
    """One task cancelled while it runs, one while it is still pending: `status` names both by
    their cells with the `sbatch --array=` line that resubmits them, the partial merge says the
    same per model, and running that line completes the sweep."""
    root = tmp_path / "run"
    record = submit(
        root, "-O", "benchmarks.0.params.n=40", "-O", "benchmarks.1.params.n=40", "-O", "benchmarks.0.max_concurrent=1",
        "-O", "benchmarks.1.max_concurrent=1", "-O", "services.base.ttft_ms=150", "-O", "cluster.max_parallel=2",
        "-O", "output.drain_timeout_s=2", example=SWEEP_EXAMPLE,
    )  # fmt: skip
    array, merge = record["array_job_id"], record["merge_job_id"]
    jobs += [array, merge]
    subprocess.run(["scancel", f"{array}_5"], check=True, timeout=60)  # top shard 1/2: pending behind %2
    results = root / "base" / "shard_0" / "arith" / "results.jsonl"
    wait_until("base shard 0 to write some records", lambda: lines(results) >= 3, root=root)
    subprocess.run(["scancel", f"{array}_0"], check=True, timeout=60)
    wait_until("the merge job to finish", lambda: done(merge), timeout=240, root=root)
    states = tasks(array)
    assert states.get("0") == "CANCELLED" and "5" not in states, states
    assert all(states[str(c)] == "COMPLETED" for c in (1, 2, 3, 4)), logs(root)

    status = shardeval_cmd("status", str(root))
    assert status.returncode == 0, status.stderr
    (row,) = [line.split() for line in status.stdout.splitlines() if line.split()[:1] == ["0"] and "CANCELLED" in line]
    assert row[:5] == ["0", "base", "shard", "0/2", "CANCELLED"], status.stdout
    assert any(line.split()[:5] == ["5", "top", "shard", "1/2", "UNKNOWN"] for line in status.stdout.splitlines()), status.stdout
    resubmit = f"sbatch --array=0,5 {root}/eval.sbatch"
    assert "task 0 = base shard 0/2; task 5 = top shard 1/2" in status.stdout and resubmit in status.stdout, status.stdout
    assert "PARTIAL" in (root / "logs" / f"merge-{merge}.out").read_text()
    assert f"`sbatch --array=5 {root}/eval.sbatch`" in (root / "top" / "merged" / "report.md").read_text()
    assert f"`sbatch --array=0 {root}/eval.sbatch`" in (root / "base" / "merged" / "report.md").read_text()

    again = subprocess.run(["sbatch", "--parsable", "--array=0,5", str(root / "eval.sbatch")], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    rerun = again.stdout.strip().split(";")[0]
    jobs.append(rerun)
    wait_until("the resubmitted cells to finish", lambda: done(rerun), timeout=180, root=root)
    assert tasks(rerun) == {"0": "COMPLETED", "5": "COMPLETED"}, logs(root)
    assert "resuming" in (root / "logs" / f"slurm-{rerun}_0.err").read_text()
    merged = shardeval_cmd("merge", str(root))
    assert merged.returncode == 0, merged.stderr
    sweep = json.loads((root / "merged" / "sweep.json").read_text())
    assert not sweep["partial"] and len([c for c in sweep["cells"] if c["metric"] == "accuracy"]) == 6
    assert all(c["n_ok"] == c["n_expected"] == 40 for c in sweep["cells"])


def test_tasks_whose_pairs_end_in_errors_are_failed_and_the_merge_says_errors(slurm: str, tmp_path: Path, jobs: list[str]) -> None:
    """H2 on a real SLURM: every request a 5xx (one attempt), so each array task's shard records
    every pair as an error and exits 3; SLURM marks the task FAILED (not COMPLETED); the merge job
    (afterany) runs, says ERRORS with the count by kind, and fails too."""
    root = tmp_path / "run"
    record = submit(
        root,
        "-O",
        "benchmarks.0.params.n=10",
        "-O",
        "benchmarks.0.repeats=1",
        "-O",
        "cluster.shards=2",
        "-O",
        "services.model.fail_5xx=1",
        "-O",
        "services.model.retries.attempts=1",
    )
    array, merge = record["array_job_id"], record["merge_job_id"]
    jobs += [array, merge]
    wait_until("the merge job to finish", lambda: done(merge), root=root)
    assert tasks(array) == {"0": "FAILED", "1": "FAILED"}, logs(root)
    assert set(tasks(merge).values()) == {"FAILED"}, tasks(merge)  # merge exits 3: not COMPLETE
    for i in range(2):
        manifest = json.loads((root / f"shard_{i}" / "manifest.json").read_text())
        assert manifest["state"] == "finished_with_errors" and "pairs end in errors (server_error " in manifest["reason"], manifest
    report = next((root / "logs").glob(f"merge-{merge}.out")).read_text()
    assert "**ERRORS**: " in report and " server_error)" in report and "COMPLETE" not in report.replace("not complete", ""), report


def test_config_export_runs_in_the_dependent_merge_job(
    slurm: str, tmp_path: Path, jobs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`export:` in a config: the merge job (`shardeval merge ROOT --export`) exports to MLflow once
    the array is done; the tracking URI is a ${VAR} of the submitting environment."""
    pytest.importorskip("mlflow")
    import yaml
    from mlflow import MlflowClient

    store = tmp_path / "mlruns"
    config = yaml.safe_load(EXAMPLE.read_text())
    config["benchmarks"][0]["params"]["n"] = 20
    config["export"] = [{"to": "mlflow", "tracking_uri": "${SHARDEVAL_TEST_MLFLOW_URI}", "experiment": "slurm-export"}]
    path = tmp_path / "export.yaml"
    path.write_text(yaml.safe_dump(config))
    root = tmp_path / "run"
    token = "mlflow-token-0123456789abcdef"  # credentials come from the environment only, and are never written
    env = {"SHARDEVAL_TEST_MLFLOW_URI": store.as_uri(), "MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_TRACKING_TOKEN": token}
    result = shardeval_cmd("run", str(path), "-o", str(root), env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    record = json.loads((root / "slurm_job.json").read_text())
    jobs += [record["array_job_id"], record["merge_job_id"]]
    assert "merge" in (root / "merge.sbatch").read_text() and "--export" in (root / "merge.sbatch").read_text()
    wait_until("the merge job to finish", lambda: done(record["merge_job_id"]), root=root)
    out = next((root / "logs").glob(f"merge-{record['merge_job_id']}.out")).read_text()
    assert "mlflow: 1 run" in out, logs(root)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # to read the store back here
    client = MlflowClient(tracking_uri=store.as_uri())
    [run] = client.search_runs([client.get_experiment_by_name("slurm-export").experiment_id])
    assert run.data.metrics["accuracy"] == scores(root)["metrics"]["accuracy"]["value"]
    assert run.data.tags["shardeval.status"] == "COMPLETE"
    written = [p for base in (root, store) for p in base.rglob("*") if p.is_file()]
    assert written and not [p for p in written if token.encode() in p.read_bytes()]
    assert token not in result.stdout + result.stderr
