"""The SLURM plugin's scripts, without SLURM: `shardeval run … --dry-run` through the real CLI.

What eval.sbatch / merge.sbatch / ray.sbatch say (array, resources, requeue, the vLLM launch each
task will run), that no secret value reaches any written file, that user mistakes are one line
and exit 2, and that the generated script really runs a shard under bash when paths hold spaces
and quotes (no sbatch needed: the script also runs with NEL_SHARD_IDX set).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, descendants, shardeval_cmd

SEED = Path(REPO) / "examples" / "slurm_gsm8k_sharded.yaml"
SECRETS = {"OPENAI_API_KEY": "sk-test-0123456789abcdef", "HF_TOKEN": "hf_known_secret_value_42", "MY_SECRET": "s3cr3t-value-xyz"}


def dry_run(cfg: Path | str, out: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return shardeval_cmd("run", str(cfg), "--dry-run", "-o", str(out), *args, env={**SECRETS, **(env or {})})


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardeval: error: "), result.stderr
    return lines[0]


def assert_no_secret_in(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            for name, value in SECRETS.items():
                assert value.encode() not in text, f"{path} holds the value of {name}"


def sbatch_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


def test_seed_example_dry_run_writes_the_array_script(tmp_path: Path) -> None:
    shared = Path("/work/shared/examples/slurm_gsm8k_sharded.yaml")
    if shared.exists():
        assert SEED.read_bytes() == shared.read_bytes()  # the seed, unchanged
    out = tmp_path / "out"
    result = dry_run(SEED, out)
    assert result.returncode == 0, result.stderr
    script = (out / "eval.sbatch").read_text()
    assert script in result.stdout  # printed as written
    directives = sbatch_lines(script)
    for expected in (
        "#SBATCH --array=0-15",
        "#SBATCH --time=02:00:00",
        "#SBATCH --partition=batch",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gres=gpu:4",
        "#SBATCH --requeue",
        "#SBATCH --cpus-per-gpu=8",  # sized from the 4 GPUs the pool gives the TP-4 service
        "#SBATCH --mem-per-gpu=64G",
        "#SBATCH --signal=B:USR1@70",  # drain_timeout_s 10 + stop_margin_s 60 before the limit
        f"#SBATCH --output={out}/shard_%a/logs/slurm-%A_%a.out",
        f"#SBATCH --error={out}/shard_%a/logs/slurm-%A_%a.err",
    ):
        assert expected in directives, (expected, directives)
    # the service each task starts (shardeval run launches vLLM itself), tensor parallel 4
    (launch,) = [line for line in script.splitlines() if "vllm serve" in line]
    assert launch.startswith("#")
    assert "vllm serve nvidia/Llama-3.1-70B-Instruct" in launch and "--tensor-parallel-size 4" in launch
    assert "idx=${SLURM_ARRAY_TASK_ID:-$NEL_SHARD_IDX}" in script and "export NEL_SHARD_IDX=$idx NEL_TOTAL_SHARDS=16" in script
    (command,) = [line for line in script.splitlines() if " run " in line and line.endswith(" &")]
    # not exec: the batch shell stays to turn SLURM's early USR1 into a SIGTERM for the shard alone;
    # no --exclusive, so the fixed port 8000 becomes a free port per task
    assert f' run {SEED} -O services.model.port=0 --shard "${{NEL_SHARD_IDX}}"/16 -o {out}/shard_"${{NEL_SHARD_IDX}}" &' in command
    assert "--port 0" in launch and "picks a free port: services.model.port=0" in script
    merge = (out / "merge.sbatch").read_text()
    assert merge.rstrip().endswith(f"merge {out}")
    assert "afterany" in result.stderr  # how to submit the pair by hand
    assert all((out / f"shard_{i}" / "logs").is_dir() for i in range(16))  # SLURM drops output into missing dirs
    assert not (out / "slurm_job.json").exists()  # nothing submitted
    for path in (out / "eval.sbatch", out / "merge.sbatch"):
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    assert_no_secret_in(tmp_path)


def test_secrets_never_reach_the_scripts(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        """
services:
  model: {type: vllm, model: m, api_key_env: OPENAI_API_KEY, extra_args: ["--hf-token", "${HF_TOKEN}"]}
benchmarks: [{name: arith}]
cluster: {type: slurm, walltime: "1:00:00", shards: 2, env: {HF_HOME: /data/hf}}
"""
    )
    result = dry_run(cfg, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "--hf-token '***'" in result.stdout or "--hf-token ***" in result.stdout  # redacted in the comment
    assert "export HF_HOME=/data/hf" in result.stdout
    assert_no_secret_in(tmp_path)
    # a secret that would land in the script verbatim is refused, by name, never shown
    cfg.write_text(
        """
services: {model: {type: sim}}
benchmarks: [{name: arith}]
cluster: {type: slurm, walltime: "10", shards: 2, env: {WANDB: "${MY_SECRET}"}}
"""
    )
    error = one_line_error(dry_run(cfg, tmp_path / "out2"))
    assert "$MY_SECRET" in error and SECRETS["MY_SECRET"] not in error
    assert not (tmp_path / "out2" / "eval.sbatch").exists()


def test_max_parallel_extra_flags_account_and_setup(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = dry_run(
        SEED,
        out,
        "-O", "cluster.max_parallel=4",
        "-O", 'cluster.sbatch_extra_flags=["--mail-type=END", "--exclude=gpu[01-03]", "--signal=B:USR1@300"]',
        "-O", "cluster.account=proj42",
        "-O", "cluster.qos=high",
        "-O", 'cluster.setup=["module load cuda/12.4", "source /opt/venv/bin/activate"]',
        "-O", 'cluster.command=["python3", "/shared/shardeval.pyz"]',
        "-O", "cluster.requeue=false",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    script = (out / "eval.sbatch").read_text()
    directives = sbatch_lines(script)
    for expected in (
        "#SBATCH --array=0-15%4",
        "#SBATCH --mail-type=END",
        "#SBATCH --exclude=gpu[01-03]",
        "#SBATCH --signal=B:USR1@300",
        "#SBATCH --account=proj42",
        "#SBATCH --qos=high",
        "#SBATCH --no-requeue",
    ):
        assert expected in directives, (expected, directives)
    lines = script.splitlines()
    (run_at,) = [i for i, line in enumerate(lines) if line.startswith("python3 /shared/shardeval.pyz run ")]
    assert lines.index("module load cuda/12.4") < lines.index("source /opt/venv/bin/activate") < run_at
    # the user's own --signal comes after the rendered one, so sbatch uses theirs
    assert directives.index("#SBATCH --signal=B:USR1@70") < directives.index("#SBATCH --signal=B:USR1@300")
    assert "exec python3 /shared/shardeval.pyz merge" in (out / "merge.sbatch").read_text()


def test_several_node_pools_with_shards_are_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        """
services:
  model: {type: vllm, model: big, node_pool: gpu, tensor_parallel_size: 8}
  judge: {type: vllm, model: small, node_pool: cpu}
benchmarks:
  - {name: arith, solver: {service: model}}
  - {name: gsm8k, solver: {service: judge}}
cluster:
  type: slurm
  walltime: "1:00:00"
  shards: 8
  node_pools: {gpu: {gres: "gpu:8"}, cpu: {cpus_per_task: 4}}
"""
    )
    error = one_line_error(dry_run(cfg, tmp_path / "out"))
    assert "several node pools" in error and "heterogeneous" in error and "shards: 8" in error
    assert not (tmp_path / "out").exists()
    # two pools and no service naming one: same limit
    cfg.write_text(cfg.read_text().replace(", node_pool: gpu", "").replace(", node_pool: cpu", ""))
    assert "defines several pools" in one_line_error(dry_run(cfg, tmp_path / "out"))
    # a pool name that does not exist
    cfg.write_text(
        """
services: {model: {type: vllm, model: big, node_pool: gpus}}
benchmarks: [{name: arith}]
cluster: {type: slurm, walltime: "1:00:00", shards: 2, node_pools: {gpu: {gres: "gpu:8"}}}
"""
    )
    assert "did you mean 'gpu'?" in one_line_error(dry_run(cfg, tmp_path / "out"))


def test_config_mistakes_are_one_line(tmp_path: Path) -> None:
    result = dry_run(SEED, tmp_path / "out", "-O", "cluster.max_paralel=4")
    assert "did you mean 'max_parallel'?" in one_line_error(result)
    result = dry_run(SEED, tmp_path / "out", "-O", 'cluster.sbatch_extra_flags=["mail-type END"]')
    assert "is not one sbatch flag" in one_line_error(result)
    result = dry_run(SEED, tmp_path / "out", "-O", "cluster.env={1BAD: x}")
    assert "not a shell variable name" in one_line_error(result)


def test_without_sbatch_submission_is_one_line_and_scripts_stay(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path / "empty")}  # no sbatch, no squeue
    result = shardeval_cmd("run", str(SEED), "-o", str(tmp_path / "out"), env=env)
    assert "sbatch not found on PATH" in one_line_error(result)
    assert (tmp_path / "out" / "eval.sbatch").exists()


def test_generated_script_runs_a_shard_with_spaces_and_quotes_in_paths(tmp_path: Path) -> None:
    """bash runs eval.sbatch as SLURM would (here without SLURM: NEL_SHARD_IDX picks the shard)."""
    where = tmp_path / "it's a dir"
    where.mkdir()
    cfg = where / "my config.yaml"
    cfg.write_text(
        """
services: {model: {type: sim, bench: arith, accuracy: 0.7, ttft_ms: 1, itl_ms: 0}}
benchmarks: [{name: arith, params: {n: 12}, max_concurrent: 4}]
cluster:
  type: slurm
  walltime: "5:00"
  shards: 3
  setup: ["export FROM_SETUP='set up ok'"]
  env: {GREETING: "hello $world; `no` \\"subst\\""}
"""
    )
    out = where / "results $HOME %a"
    result = dry_run(cfg, out)
    assert result.returncode == 0, result.stderr
    script = out / "eval.sbatch"
    text = script.read_text()
    (output_line,) = [line for line in sbatch_lines(text) if line.startswith("#SBATCH --output=")]
    assert output_line == f'#SBATCH --output="{where}/results $HOME %%a/shard_%a/logs/slurm-%A_%a.out"'
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NEL_"))}
    run = subprocess.run(["bash", str(script)], env={**env, "NEL_SHARD_IDX": "1"}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "shard 1/3" in run.stderr
    manifest = json.loads((out / "shard_1" / "manifest.json").read_text())
    assert (manifest["shard_idx"], manifest["total_shards"], manifest["state"]) == (1, 3, "complete")
    assert len((out / "shard_1" / "arith" / "results.jsonl").read_text().splitlines()) == 4
    # run without a shard, or with a bad one: refuses instead of guessing
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "submit it with sbatch" in run.stderr
    run = subprocess.run(["bash", str(script)], env={**env, "NEL_SHARD_IDX": "one"}, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "shard index 'one' is not a number 0..2" in run.stderr


def test_ray_template(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = dry_run(SEED, out, "-O", "cluster.ray=true", "-O", "cluster.ray_port=6380", "-O", "benchmarks.0.repeats=2")
    assert result.returncode == 0, result.stderr
    script = (out / "ray.sbatch").read_text()
    assert not (out / "eval.sbatch").exists()
    directives = sbatch_lines(script)
    assert "#SBATCH --gres=gpu:4" in directives and "#SBATCH --partition=batch" in directives
    assert not any(d.startswith("#SBATCH --array") for d in directives)
    assert '"${RAY[@]}" start --head --node-ip-address="$head_ip" --port="$PORT"' in script and "--block &" in script
    assert '"${RAY[@]}" start --address="$address"' in script  # a worker on every other node
    assert "head_ip=127.0.0.1" in script and "PORT=6380" in script
    assert 'srun --nodes=1 --ntasks=1 --overlap -w "$head_node"' in script
    assert "trap stop_ray EXIT" in script
    assert not any(line.strip().startswith("ray stop") or " ray stop" in line.split("#")[0] for line in script.splitlines())
    (launch,) = [line for line in script.splitlines() if "-m shardeval_ray" in line]
    assert f"-m shardeval_ray {SEED} -O benchmarks.0.repeats=2 --shards 16 --output-dir {out}" in launch
    assert "cluster.ray" not in launch  # the launcher brings its own cluster section
    assert "--tensor-parallel-size 4" in script  # the services each Ray task starts
    assert subprocess.run(["bash", "-n", str(out / "ray.sbatch")]).returncode == 0
    assert_no_secret_in(tmp_path)


def test_status_helpers_parse_scontrol_lines() -> None:
    from shardeval_slurm.jobs import expand_tasks, parse_fields

    assert expand_tasks("0-3,7,10-14:2%4") == ["0", "1", "2", "3", "7", "10", "12", "14"]
    fields = parse_fields("JobId=9 ArrayJobId=8 ArrayTaskId=2-3 JobName=a b JobState=PENDING Reason=Resources StdErr=/x y/z")
    assert fields["JobName"] == "a b" and fields["ArrayTaskId"] == "2-3" and fields["StdErr"] == "/x y/z"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_status_without_scontrol_says_so(tmp_path: Path) -> None:
    (tmp_path / "slurm_job.json").write_text(json.dumps({"array_job_id": "123", "merge_job_id": "124", "total_shards": 2}))
    result = shardeval_cmd("status", str(tmp_path), env={"PATH": str(tmp_path / "empty")})
    assert result.returncode == 0, result.stderr
    assert "slurm array job 123: scontrol not on PATH" in result.stdout


def test_resources_follow_the_gpus_each_service_declares(tmp_path: Path) -> None:
    """CPUs and memory per GPU unless the pool sets them; a pool with fewer GPUs than the service
    needs is one line; an exclusive node keeps the configured port."""
    out = tmp_path / "out"
    result = dry_run(SEED, out, "-O", "cluster.node_pools.compute.cpus_per_task=48", "-O", "cluster.node_pools.compute.mem_per_gpu=120G")
    assert result.returncode == 0, result.stderr
    directives = sbatch_lines((out / "eval.sbatch").read_text())
    assert "#SBATCH --cpus-per-task=48" in directives and not any("--cpus-per-gpu" in d for d in directives)
    assert "#SBATCH --mem-per-gpu=120G" in directives  # SLURM takes one of --mem / --mem-per-gpu

    result = dry_run(SEED, tmp_path / "o2", "-O", "cluster.node_pools.compute.exclusive=true")
    script = (tmp_path / "o2" / "eval.sbatch").read_text()
    assert result.returncode == 0 and "#SBATCH --exclusive" in script
    assert "services.model.port=0" not in script and "--port 8000" in script  # a whole node: no collision

    line = one_line_error(dry_run(SEED, tmp_path / "o3", "-O", "cluster.node_pools.compute.gres=gpu:a100:2"))
    assert "services.model needs 4 GPUs on its node, and cluster.node_pools.compute asks for 2 per task" in line

    line = one_line_error(dry_run(SEED, tmp_path / "o4", "-O", "cluster.requeue=false", "-O", "cluster.requeue_on_timeout=2"))
    assert "cluster.requeue_on_timeout: 2 needs cluster.requeue: true" in line


def _slow_sim_config(where: Path, extra: str = "") -> Path:
    cfg = where / "slow.yaml"
    cfg.write_text(
        f"""
services: {{model: {{type: sim, bench: arith, accuracy: 1.0, ttft_ms: 1, itl_ms: 40, output_tokens: 40}}}}
benchmarks: [{{name: arith, params: {{n: 400}}, max_concurrent: 4}}]
cluster:
  type: slurm
  walltime: "5:00"
  shards: 2
  stop_margin_s: 5
  requeue_on_timeout: 2
{extra}
output: {{drain_timeout_s: 20, progress_interval_s: 0}}
"""
    )
    return cfg


@pytest.mark.parametrize("sig", ["USR1", "TERM"])
def test_the_batch_shell_stops_the_shard_so_it_drains(tmp_path: Path, sig: str) -> None:
    """SLURM's early USR1 (--signal=B:USR1@drain+margin) reaches the batch shell alone; it sends the
    shard SIGTERM, the shard finishes what is in flight, then stops the simulator it started, and
    the task ends 143 with the manifest `interrupted` and no request cut short. A TERM sent to the
    batch shell (`scancel -b`) is passed on the same way. Outside SLURM nothing is requeued."""
    import signal as signals
    import time

    from conftest import process_alive

    cfg = _slow_sim_config(tmp_path)
    out = tmp_path / "out"
    assert dry_run(cfg, out).returncode == 0
    text = (out / "eval.sbatch").read_text()
    assert "#SBATCH --signal=B:USR1@25" in sbatch_lines(text)  # drain 20 + margin 5
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NEL_"))}
    shell = subprocess.Popen(
        ["bash", str(out / "eval.sbatch")], env={**env, "NEL_SHARD_IDX": "0"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    results = out / "shard_0" / "arith" / "results.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not results.exists() or results.read_bytes().count(b"\n") < 8):
        time.sleep(0.2)
    assert results.exists(), shell.stderr.read() if shell.poll() is not None else "no records after 60 s"
    tree = descendants(shell.pid)  # the shard and the simulator it started
    assert len(tree) >= 2, tree
    os.kill(shell.pid, getattr(signals, f"SIG{sig}"))
    _, err = shell.communicate(timeout=60)
    assert shell.returncode == 143, err
    manifest = json.loads((out / "shard_0" / "manifest.json").read_text())
    assert manifest["state"] == "interrupted", manifest
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert records and all(r["status"] == "ok" for r in records), [r for r in records if r["status"] != "ok"][:3]
    assert len(records) < 400  # it really stopped early
    assert "requeue" not in err.replace("requeue_on_timeout", "")  # no SLURM job: nothing to requeue
    if sig == "USR1":
        assert "time limit near" in err
    assert not [pid for pid in tree if process_alive(pid)]


def test_fresh_at_submission_refuses_a_shard_still_being_written(tmp_path: Path) -> None:
    """--fresh on the submitting side takes each shard directory's lease before moving anything: a
    shard someone runs by hand is refused in one line naming its writer, and nothing moves."""
    import time

    cfg = _slow_sim_config(tmp_path)
    root = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NEL_"))}
    by_hand = subprocess.Popen(
        [sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", "0/2", "-o", str(root / "shard_0")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        results = root / "shard_0" / "arith" / "results.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (results.exists() and results.stat().st_size):
            time.sleep(0.2)
        fresh = shardeval_cmd("run", str(cfg), "-o", str(root), "--fresh", env={"PATH": os.environ["PATH"]})
        line = one_line_error(fresh)
        assert f"already being written by pid {by_hand.pid} on " in line, line
        assert not (root / "shard_0" / "superseded").exists() and results.exists()
        assert by_hand.poll() is None  # untouched, still writing
    finally:
        by_hand.terminate()
        by_hand.wait(timeout=60)


SWEEP = Path(REPO) / "examples" / "slurm_sweep_sim.yaml"
SMALL = ("-O", "benchmarks.0.params.n=8", "-O", "benchmarks.1.params.n=8")


def test_sweep_is_one_array_over_model_shard_cells_and_one_merge(tmp_path: Path) -> None:
    """3 models × 2 shards: one array of 6 tasks, model-major, the models frozen in the script in
    the config's order (a glob re-resolved on a node cannot shift the cells); SLURM's own files go
    to ROOT/logs/ (a task knows its model only once it runs); one merge of the sweep root."""
    out = tmp_path / "sweep out"
    result = dry_run(SWEEP, out, "-O", "sweep.services=[top, base, mid]")
    assert result.returncode == 0, result.stderr
    script = (out / "eval.sbatch").read_text()
    directives = sbatch_lines(script)
    assert "#SBATCH --array=0-5%4" in directives and "#SBATCH --partition=debug" in directives
    assert f'#SBATCH --output="{out}/logs/slurm-%A_%a.out"' in directives
    (command,) = [line for line in script.splitlines() if " run " in line and line.endswith(" &")]
    assert f" --sweep-services top,base,mid --shard \"${{NEL_SHARD_IDX}}\"/6 -o '{out}' &" in command
    assert "models=(top base mid)" in script and "export NEL_SHARD_IDX=$idx NEL_TOTAL_SHARDS=6" in script
    assert "checked against the services of every model (top, base, mid)" in script
    assert sum("services." in line and "(sim)" in line for line in script.splitlines()) == 3  # every model's server
    merge = (out / "merge.sbatch").read_text()
    assert merge.rstrip().endswith(f"merge '{out}'") and "afterany:<array job id>" in result.stderr
    assert "--array" not in result.stderr.split("to submit:")[1]  # every cell: the script's own line
    assert not list(out.glob("shard_*")) and (out / "logs").is_dir()  # no run-level shard dirs in a sweep root
    assert subprocess.run(["bash", "-n", str(out / "eval.sbatch")]).returncode == 0
    assert [line for line in result.stderr.splitlines() if "run identity of" in line][0].startswith("shardeval: run identity of top:")


def test_sweep_cell_runs_under_bash_and_submission_leaves_complete_cells_out(tmp_path: Path) -> None:
    """Task 3 of the array (bash, NEL_SHARD_IDX=3) is shard 1 of the second model; once it is
    complete a new submission asks only for the other cells; a model whose config changed is
    refused by that model's directory before anything is queued; --fresh sets aside per model."""
    out = tmp_path / "out"
    assert dry_run(SWEEP, out, *SMALL).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NEL_"))}
    run = subprocess.run(["bash", str(out / "eval.sbatch")], env={**env, "NEL_SHARD_IDX": "3"}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "cell 3 = mid shard 1/2" in run.stderr
    manifest = json.loads((out / "mid" / "shard_1" / "manifest.json").read_text())
    assert (manifest["shard_idx"], manifest["total_shards"], manifest["state"], manifest["sweep"]["service"]) == (1, 2, "complete", "mid")
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["logs", "mid"]

    again = dry_run(SWEEP, out, *SMALL)
    assert again.returncode == 0, again.stderr
    assert f"to submit: sbatch --array=0-2,4-5%4 {out}/eval.sbatch" in again.stderr
    # a cell that is complete but holds an error record is asked again (its task retries the error)
    lines = (out / "mid" / "shard_1" / "arith" / "results.jsonl").read_text().splitlines()
    bad = json.loads(lines[0]) | {"status": "error", "error_kind": "http", "error": "boom", "score": None}
    (out / "mid" / "shard_1" / "arith" / "results.jsonl").write_text("\n".join([json.dumps(bad), *lines[1:]]) + "\n")
    from shardeval.api.records import read_manifest
    from shardeval.store.standing import Membership, count_cells

    m = read_manifest(str(out / "mid" / "shard_1"))
    assert count_cells(str(out / "mid" / "shard_1" / "arith" / "results.jsonl"), Membership.of(m, m.benchmarks[0]))[:2] == (3, 1)
    assert "to submit: sbatch " + str(out) in dry_run(SWEEP, out, *SMALL).stderr
    (out / "mid" / "shard_1" / "arith" / "results.jsonl").write_text("\n".join(lines) + "\n")

    no_slurm = {"PATH": str(tmp_path / "empty")}
    changed = shardeval_cmd("run", str(SWEEP), "-o", str(out), *SMALL, "-O", "services.mid.accuracy=0.9", env=no_slurm)
    line = one_line_error(changed)
    assert f"{out}/mid/shard_1 cannot be resumed: it holds another run" in line and "nothing submitted" in line
    assert "services.mid.accuracy: " in line  # what changed, key by key
    unchanged = shardeval_cmd("run", str(SWEEP), "-o", str(out), *SMALL, "-O", "services.top.accuracy=0.9", env=no_slurm)
    assert "sbatch not found on PATH" in one_line_error(unchanged)  # only top's identity changed: it has no shard yet
    refused = shardeval_cmd("run", str(SWEEP), "-o", str(out), *SMALL, "--fresh", env=no_slurm)
    assert "sbatch not found on PATH" in one_line_error(refused)  # refused before --fresh moves anything
    assert (out / "mid" / "shard_1" / "manifest.json").exists()
    fake = tmp_path / "fake-slurm"  # an sbatch that queues nothing: only what --fresh moves is looked at
    fake.mkdir()
    (fake / "sbatch").write_text("#!/bin/sh\necho 4242\n")
    (fake / "sbatch").chmod(0o755)
    fresh = shardeval_cmd("run", str(SWEEP), "-o", str(out), *SMALL, "--fresh", env={"PATH": f"{fake}:/usr/bin:/bin"})
    assert fresh.returncode == 0 and "submitted array job 4242" in fresh.stderr, fresh.stderr
    assert "--fresh: earlier results of shard_1 moved to " + str(out / "mid" / "shard_1" / "superseded") in fresh.stderr
    assert (out / "mid" / "shard_1" / "superseded").is_dir() and not (out / "mid" / "shard_1" / "manifest.json").exists()


def test_sweep_resources_cover_every_model_and_secrets_stay_out(tmp_path: Path) -> None:
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(
        """
services:
  small: {type: vllm, model: /ckpt/s, tensor_parallel_size: 2, api_key_env: OPENAI_API_KEY, extra_args: ["--hf-token", "${HF_TOKEN}"]}
  big: {type: vllm, model: /ckpt/b, tensor_parallel_size: 8, api_key_env: OPENAI_API_KEY}
benchmarks: [{name: arith}]
sweep: {services: [small, big]}
cluster: {type: slurm, walltime: "1:00:00", shards: 3, node_pools: {gpu: {gres: "gpu:8"}}}
"""
    )
    out = tmp_path / "out"
    result = dry_run(cfg, out)
    assert result.returncode == 0, result.stderr
    script = (out / "eval.sbatch").read_text()
    assert "#SBATCH --gres=gpu:8" in sbatch_lines(script) and "#SBATCH --array=0-5" in sbatch_lines(script)
    assert "--tensor-parallel-size 2" in script and "--tensor-parallel-size 8" in script
    assert_no_secret_in(tmp_path)
    line = one_line_error(dry_run(cfg, tmp_path / "o2", "-O", "cluster.node_pools.gpu.gres=gpu:4"))
    assert "services.big needs 8 GPUs on its node, and cluster.node_pools.gpu asks for 4 per task" in line
    line = one_line_error(dry_run(cfg, tmp_path / "o3", "-O", "cluster.ray=true"))
    assert "cluster.ray: true does not run sweeps" in line and "cluster.ray: false" in line
    assert not (tmp_path / "o3").exists()


def test_sweep_status_and_merge_hints_name_cells(tmp_path: Path) -> None:
    """What slurm_job.json recorded maps a task to its cell, for `status` and for the rerun line
    a model's merge report gives (its shards are cells of the sweep's one script)."""
    from shardeval_slurm import rerun_hint
    from shardeval_slurm.jobs import Layout

    record = {"array_job_id": "41", "total_shards": 2, "tasks": [4, 5], "sweep": {"services": ["base", "step1", "step2"], "shards": 2}}
    (tmp_path / "slurm_job.json").write_text(json.dumps(record))
    layout = Layout.of(record, str(tmp_path))
    assert [layout.label(i) for i in (0, 3, 5)] == ["base shard 0/2", "step1 shard 1/2", "step2 shard 1/2"]
    assert layout.resubmit([5, 1, 2, 3]) == f"sbatch --array=1-3,5 {tmp_path}/eval.sbatch"
    assert rerun_hint(run_dir=str(tmp_path / "step1"), shards=[1]) == f"`sbatch --array=3 {tmp_path}/eval.sbatch`"
    assert rerun_hint(run_dir=str(tmp_path / "other"), shards=[1]) is None
    assert rerun_hint(run_dir=str(tmp_path), shards=[1]) is None  # the sweep root: hinted per model
