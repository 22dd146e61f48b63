"""The Ray orchestrator against a real Ray on 127.0.0.1 and a real simulator: no mocks.

Ray gets a private RAY_TMPDIR for this module, so neither a test here nor the launcher can join a
Ray that someone else on the machine started (or the stale `ray_current_cluster` file of one), and
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which Ray 2.60 needs to keep every address on loopback.
Tests that start their own Ray (the launcher subprocess, the two-raylet cluster) run first; the
module's in-process Ray starts after them, so at most one Ray runs at a time.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from conftest import REPO, running_sim, shardeval_cmd

TIMING = {"ttft_s", "latency_s", "started_at", "shard"}
SIM_ACCURACY = 0.7
pytestmark = pytest.mark.timeout(300)  # Ray start-up on a busy 2-core machine can take 20 s and more


@pytest.fixture(scope="module", autouse=True)
def ray_env() -> Iterator[str]:
    """Install Ray (scripts/setup/ray.sh, idempotent) and isolate this module's Ray on loopback."""
    setup = subprocess.run(
        ["bash", os.path.join(REPO, "scripts", "setup", "ray.sh")],
        env={**os.environ, "VENV_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert setup.returncode == 0, f"scripts/setup/ray.sh failed: {setup.stdout}{setup.stderr}"
    tmp = tempfile.mkdtemp(prefix="sr-", dir="/tmp")  # short: Ray's unix socket paths must stay < 108 bytes
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_TMPDIR", tmp)
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.delenv("RAY_ADDRESS", raising=False)
        yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with running_sim("--bench", "arith", "--accuracy", str(SIM_ACCURACY), "--ttft-ms", "2", "--itl-ms", "0") as url:
        yield url


@pytest.fixture(scope="module")
def ray_address(ray_env: str) -> Iterator[str]:
    """One Ray for the in-process tests, started here and stopped here (never `ray stop`)."""
    import ray

    context = ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    assert context.address_info["node_ip_address"] == "127.0.0.1"
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


def launcher(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardeval_ray", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def records(shard_dir: Path, bench: str = "arith") -> list[dict[str, Any]]:
    path = shard_dir / bench / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def scores(root: Path, bench: str = "arith") -> dict[str, Any]:
    return json.loads((root / "merged" / "scores.json").read_text())[bench]


def assert_complete(root: Path, n_expected: int) -> None:
    s = scores(root)
    assert (s["n_expected"], s["n_records"], s["n_missing"], s["n_duplicates"], s["n_errors"]) == (n_expected, n_expected, 0, 0, 0)
    acc = s["metrics"]["accuracy"]
    assert acc["ci_low"] <= SIM_ACCURACY <= acc["ci_high"], acc


def ray_processes(marker: str) -> list[int]:
    """PIDs of live processes whose command line names this module's RAY_TMPDIR (Ray's own ones)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X"):
                pids.append(int(entry))
    return pids


def listening_addresses(pids: list[int]) -> set[str]:
    """Local addresses of the TCP sockets these processes listen on, from /proc (no tools needed)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                hex_ip = fields[1].split(":")[0]
                raw = bytes.fromhex(hex_ip)
                words = [raw[i : i + 4][::-1] for i in range(0, len(raw), 4)]  # each 32-bit word is little-endian
                packed = b"".join(words)
                ip = ipaddress.ip_address(packed)
                found.add(str(getattr(ip, "ipv4_mapped", None) or ip))  # ::ffff:127.0.0.1 -> 127.0.0.1
    return found


def descendants(pids: list[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rfind(b")") + 2 :].split()[1]), []).append(int(entry))
    out, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


# --- the launcher starts and stops its own Ray --------------------------------------------------


def test_seed_command_end_to_end_with_its_own_local_ray(tmp_path: Path, sim_url: str, ray_env: str) -> None:
    out = tmp_path / "ray"
    result = launcher(
        "--bench",
        "arith",
        "--shards",
        "4",
        "--repeats",
        "2",
        "--max-problems",
        "40",
        "--model-url",
        sim_url,
        "--model-id",
        "sim",
        "--output-dir",
        str(out),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "a new local Ray on 127.0.0.1" in result.stderr
    for i in range(4):
        assert f"shard {i}/4 complete: arith 20/20 ok" in result.stderr
        assert json.loads((out / f"shard_{i}" / "manifest.json").read_text())["state"] == "complete"
    assert "**COMPLETE**" in result.stdout
    assert_complete(out, 80)
    deadline = time.monotonic() + 20  # ray.shutdown() stopped every process of the Ray it started
    while ray_processes(ray_env) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray_processes(ray_env) == []


def test_user_mistakes_are_one_line_and_exit_2_without_starting_ray(tmp_path: Path, ray_env: str) -> None:
    missing = launcher("--bench", "arith", "--shards", "2")
    assert missing.returncode == 2 and "missing: --model-url, --model-id" in missing.stderr
    assert [line for line in missing.stderr.splitlines() if "error" in line] == [missing.stderr.strip().splitlines()[-1]]
    bad = launcher("--bench", "arith", "--model-url", "http://127.0.0.1:9/v1", "--model-id", "m", "-O", "cluster.num_cpu=2")
    assert bad.returncode == 2 and "unknown key 'cluster.num_cpu'; did you mean 'num_cpus'?" in bad.stderr
    negative = launcher("--bench", "arith", "--model-url", "http://127.0.0.1:9/v1", "--model-id", "m", "--max-retries", "-5")
    assert negative.returncode == 2 and "cluster.max_retries" in negative.stderr and ">= -1" in negative.stderr
    plan = launcher(
        "--bench",
        "arith",
        "--model-url",
        "http://127.0.0.1:9/v1",
        "--model-id",
        "m",
        "--shards",
        "3",
        "--num-cpus",
        "0.5",
        "-o",
        str(tmp_path),
        "--dry-run",
    )
    assert plan.returncode == 0, plan.stderr
    assert "a new local Ray on 127.0.0.1, no dashboard" in plan.stdout and "num_cpus=0.5" in plan.stdout
    assert plan.stdout.count("run_shard.remote(") == 3 and not list(tmp_path.iterdir())
    assert ray_processes(ray_env) == []


def test_two_raylets_on_loopback_share_the_shards(tmp_path: Path, ray_env: str) -> None:
    """`ray.cluster_utils.Cluster`: two raylets on 127.0.0.1, one CPU each, one shard task each."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
    try:
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        with running_sim("--bench", "arith", "--accuracy", str(SIM_ACCURACY), "--ttft-ms", "150", "--itl-ms", "0") as url:
            out = tmp_path / "two"
            result = launcher(
                "--bench",
                "arith",
                "--shards",
                "2",
                "--max-problems",
                "16",
                "--max-concurrent",
                "2",
                "--model-url",
                url,
                "--model-id",
                "sim",
                "-o",
                str(out),
                "--address",
                cluster.address,
            )
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"the Ray at {cluster.address} (cluster.address)" in result.stderr
        assert_complete(out, 16)
        lines = [line for line in result.stderr.splitlines() if "complete: arith 8/8 ok" in line]
        assert len(lines) == 2 and all("[node 127.0.0.1 " in line for line in lines)
        nodes = {line.split("[node 127.0.0.1 ")[1].split(",")[0] for line in lines}
        assert len(nodes) == 2  # one CPU per raylet cannot hold both tasks: they ran on both
    finally:
        cluster.shutdown()


# --- the Python API against a Ray this test process started -------------------------------------


def test_run_shard_remote_writes_the_same_shards_as_shardeval_run(tmp_path: Path, sim_url: str, ray_address: str) -> None:
    import ray

    from shardeval_ray import run_shard

    root = tmp_path / "api"
    futures = [
        run_shard.remote("arith", i, 3, model_url=sim_url, model_id="sim", repeats=2, max_problems=30, output_dir=str(root))
        for i in range(3)
    ]
    summaries = ray.get(futures, timeout=120)
    assert [s["shard"] for s in summaries] == [0, 1, 2]
    assert all(s["state"] == "complete" and s["benchmarks"]["arith"] == {"n_ok": 20, "n_error": 0, "n_expected": 20} for s in summaries)
    assert {s["out_dir"] for s in summaries} == {str(root / f"shard_{i}") for i in range(3)}

    # The same shard from the plain CLI: identical records (but timing) and the same config hash.
    cli_dir = tmp_path / "cli_shard_1"
    cli = shardeval_cmd(
        "run",
        "--bench",
        "arith",
        "--model-url",
        sim_url,
        "--model-id",
        "sim",
        "-n",
        "2",
        "--max-problems",
        "30",
        "--shard",
        "1/3",
        "-o",
        str(cli_dir),
    )
    assert cli.returncode == 0, cli.stderr
    strip = lambda rs: sorted(({k: v for k, v in r.items() if k not in TIMING} for r in rs), key=lambda r: (r["problem_idx"], r["repeat"]))  # noqa: E731
    assert strip(records(root / "shard_1")) == strip(records(cli_dir))
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (root / "shard_1", cli_dir)]
    assert manifests[0]["config_hash"] == manifests[1]["config_hash"]
    assert manifests[0]["shard_source"].startswith("ray task ")

    merged = shardeval_cmd("merge", str(root))
    assert merged.returncode == 0, merged.stderr
    assert_complete(root, 60)


def test_a_changed_config_is_a_usage_error_and_is_not_retried(tmp_path: Path, sim_url: str, ray_address: str) -> None:
    import ray

    from shardeval.errors import UsageError
    from shardeval_ray import run_shard

    root = str(tmp_path / "changed")
    common = dict(model_url=sim_url, model_id="sim", max_problems=4, output_dir=root)
    assert ray.get(run_shard.remote("arith", 0, 1, repeats=1, **common), timeout=60)["state"] == "complete"
    started = time.monotonic()
    with pytest.raises(UsageError, match="cannot be resumed"):
        ray.get(run_shard.options(max_retries=3).remote("arith", 0, 1, repeats=2, **common), timeout=60)
    assert time.monotonic() - started < 30
    with pytest.raises(UsageError, match="idx=5 is out of range"):
        ray.get(run_shard.remote("arith", 5, 2, repeats=1, **common), timeout=60)


@pytest.mark.parametrize("mode", ["crash", "raise"])
def test_a_failed_attempt_is_retried_and_resumes_without_duplicates(tmp_path: Path, sim_url: str, ray_address: str, mode: str) -> None:
    """crash: the worker process is SIGKILLed after 25 records (Ray's max_retries);
    raise: the shard stops after 25 records and raises (retry_exceptions). Either way the retry
    starts from what the first attempt wrote and the shard ends with every pair exactly once."""
    import ray

    from shardeval_ray import run_shard
    from shardeval_ray.tasks import FAULT_ENV

    marker = tmp_path / "fault-fired"
    root = tmp_path / mode
    options = dict(max_retries=2, retry_exceptions=True, runtime_env={"env_vars": {FAULT_ENV: f"{mode}:25:{marker}"}})
    ref = run_shard.options(**options).remote(
        "arith", 0, 1, model_url=sim_url, model_id="sim", repeats=2, max_problems=40, max_concurrent=4, output_dir=str(root)
    )
    summary = ray.get(ref, timeout=120)
    assert marker.exists()  # the first attempt did fault
    assert summary["state"] == "complete" and summary["benchmarks"]["arith"]["n_ok"] == 80
    assert summary["records_before"] >= 25  # the retry found the first attempt's records and resumed
    recs = records(root / "shard_0")
    keys = [(r["problem_idx"], r["repeat"]) for r in recs]
    assert len(keys) == len(set(keys)) == 80
    assert sum(1 for _ in (root / "shard_0" / "arith" / "trajectories.jsonl").open()) == 80
    log = (root / "shard_0" / "logs" / "shard.log").read_text()
    assert "resuming:" in log
    merged = shardeval_cmd("merge", str(root))
    assert merged.returncode == 0, merged.stderr
    assert_complete(root, 80)


def test_the_worker_keeps_its_signal_handlers_after_a_shard(tmp_path: Path, sim_url: str, ray_address: str) -> None:
    """ShardRun installs asyncio signal handlers in the worker's main thread; they must not outlive it."""
    import ray

    @ray.remote
    def probe(url: str, root: str) -> dict[str, Any]:
        import threading

        from shardeval_ray import evaluate_shard

        before = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
        summary = evaluate_shard("arith", 0, 1, model_url=url, model_id="sim", max_problems=5, output_dir=root)
        after = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
        return {
            "main": threading.current_thread() is threading.main_thread(),
            "same": before == after,
            "ray_handler": "sigterm_handler" in repr(after[0]),
            "state": summary["state"],
        }

    result = ray.get(probe.remote(sim_url, str(tmp_path / "sig")), timeout=60)
    assert result == {"main": True, "same": True, "ray_handler": True, "state": "complete"}


def test_cluster_type_ray_through_shardeval_run_joins_a_running_ray(tmp_path: Path, ray_address: str) -> None:
    """examples/ray_arith_sim.yaml through `shardeval run`: each task starts its own simulator
    (a managed service inside a Ray worker), as tasks on GPU nodes would start vLLM."""
    out = tmp_path / "out"
    result = shardeval_cmd(
        "run",
        os.path.join(REPO, "examples", "ray_arith_sim.yaml"),
        "-o",
        str(out),
        "-O",
        "benchmarks.0.params.n=45",
        "-O",
        "benchmarks.0.repeats=2",
        "-O",
        "services.model.ttft_ms=2",
        "-O",
        "cluster.shards=3",
        "-O",
        "cluster.runtime_env={env_vars: {SHARDEVAL_DEMO: '1'}}",
        env={"RAY_ADDRESS": ray_address},
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"the Ray at {ray_address} (RAY_ADDRESS)" in result.stderr
    assert "**COMPLETE**" in result.stdout
    assert_complete(out, 90)
    for i in range(3):
        assert (out / f"shard_{i}" / "logs").is_dir()
    # The launcher only disconnected: the Ray it joined still runs.
    import ray

    assert ray.is_initialized() and ray.get(ray.put(1)) == 1


def sweep_config(models: dict[str, float]) -> str:
    sim = "type: sim, bench: arith, ttft_ms: 1, itl_ms: 0, output_tokens: 8"
    services = "".join(f"  {name}: {{{sim}, accuracy: {accuracy}}}\n" for name, accuracy in models.items())
    return f"""services:
{services}benchmarks:
  - {{name: arith, params: {{n: 12}}, max_concurrent: 8}}
sweep: {{services: [{", ".join(models)}], baseline: base}}
cluster: {{type: ray, shards: 2, num_cpus: 0.5}}
output: {{progress_interval_s: 0}}
"""


def test_a_sweep_is_one_task_per_model_shard_cell_and_a_new_model_costs_only_its_cells(tmp_path: Path, ray_address: str) -> None:
    """2 simulated models x 2 shards through `shardeval run`: four tasks, each starting its cell's
    own simulator, writing <out>/<model>/shard_<i>/, then the sweep merge. Adding a third model and
    rerunning runs its two cells; the finished cells start no server."""
    cfg, out = tmp_path / "sweep.yaml", tmp_path / "out"
    cfg.write_text(sweep_config({"base": 0.3, "step1": 0.9}))
    result = shardeval_cmd("run", str(cfg), "-o", str(out), env={"RAY_ADDRESS": ray_address}, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "4 shard task(s)" in result.stderr
    for model in ("base", "step1"):
        for k in range(2):
            assert f"shardeval: {model} shard {k}/2 complete: arith 6/6 ok" in result.stderr
            manifest = json.loads((out / model / f"shard_{k}" / "manifest.json").read_text())
            assert manifest["state"] == "complete" and manifest["shard_source"].startswith("ray task ")
            assert manifest["sweep"] == {"services": ["base", "step1"], "baseline": "base", "shards": 2, "service": model}
    sweep = json.loads((out / "merged" / "sweep.json").read_text())
    accuracy = {c["service"]: c for c in sweep["cells"] if c["metric"] == "accuracy"}
    assert set(accuracy) == {"base", "step1"} and all(c["n"] == 12 for c in accuracy.values())
    (diff,) = [d for d in sweep["vs_baseline"] if d["metric"] == "accuracy"]
    assert diff["service"] == "step1" and diff["diff"] > 0  # the 0.9 simulator beats the 0.3 one

    finished = {
        p: p.read_bytes() for p in sorted(out.glob("[bs]*/shard_*/**/*")) if p.is_file() and p.name not in ("heartbeat.json", "shard.lock")
    }
    cfg.write_text(sweep_config({"base": 0.3, "step1": 0.9, "top": 0.6}))
    again = shardeval_cmd("run", str(cfg), "-o", str(out), env={"RAY_ADDRESS": ray_address}, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    # the finished cells started no service, asked nothing and rewrote nothing (their logs included;
    # only the writer lease and heartbeat are taken anew)
    assert {p: p.read_bytes() for p in finished} == finished
    assert "top shard 0/2 complete: arith 6/6 ok" in again.stderr and "top shard 1/2 complete" in again.stderr
    sweep = json.loads((out / "merged" / "sweep.json").read_text())
    assert {c["service"] for c in sweep["cells"]} == {"base", "step1", "top"}


def test_every_port_of_the_test_ray_listens_on_loopback_only(ray_address: str, ray_env: str) -> None:
    """`_node_ip_address="127.0.0.1"` alone is not enough with Ray 2.60 (it binds every interface);
    with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 too, every listening socket is on 127.0.0.1."""
    pids = descendants(ray_processes(ray_env))
    addresses = listening_addresses(pids)
    assert addresses, f"no listening socket found among {len(pids)} Ray processes"
    assert all(ipaddress.ip_address(a).is_loopback for a in addresses), addresses
