"""Shared fixtures. Every server a test talks to is a real process on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextmanager
def running_sim(*args: str, timeout: float = 20.0) -> Iterator[str]:
    """Start `shardeval sim --port 0 ARGS` and yield its base URL (http://127.0.0.1:PORT/v1).

    The simulator prints exactly one line, `shardeval sim listening on <base_url>`, once it accepts
    connections; this waits for it and stops the process afterwards.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardeval", "sim", "--host", "127.0.0.1", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + timeout
        line = proc.stdout.readline() if proc.stdout else ""
        if "listening on" not in line or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"simulator did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
        yield line.strip().rsplit(" ", 1)[-1]
    finally:
        stop_process(proc, 5)


def stop_process(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; reaped either way."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def sim() -> Iterator[str]:
    """A default simulator (arith-aware, 0.7 accuracy, fast) for tests that need any real server."""
    with running_sim("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "1", "--itl-ms", "0") as url:
        yield url


def shardeval_cmd(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess, as a user would."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "shardeval", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def process_alive(pid: int) -> bool:
    """Running (zombies, which an init that does not reap may keep around, count as dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def api_eval_config(
    path: Path,
    url: str,
    *,
    bench: str = "arith",
    n: int = 3,
    repeats: int = 1,
    concurrency: int = 4,
    service: dict | None = None,
    benchmark: dict | None = None,
    output: dict | None = None,
) -> Path:
    """A config file with one `api` service at `url` (model `sim`) and one benchmark, for tests
    that point `shardeval run` at a server of their own; each dict adds to (or replaces) the keys
    of its section. Written as JSON, which YAML reads as it is."""
    config = {
        "services": {"model": {"type": "api", "url": url, "model": "sim", **(service or {})}},
        "benchmarks": [{"name": bench, "params": {"n": n}, "repeats": repeats, "max_concurrent": concurrency, **(benchmark or {})}],
        "output": {"progress_interval_s": 0, **(output or {})},
    }
    path.write_text(json.dumps(config, indent=1))
    return path


def process_table() -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, process group)} of every process now (shardeval.run.process reads /proc)."""
    from shardeval.run.process import processes

    return {p.pid: (p.ppid, p.pgrp) for p in processes()}


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, …)."""
    table = process_table()
    found, frontier = [], {pid}
    while frontier:
        children = [p for p, (parent, _) in table.items() if parent in frontier]
        found += children
        frontier = set(children)
    return found


# --- how the test command runs these files (scripts/test.sh) -------------------------------------------

# Files that use one thing of the machine's each, so that parallel workers (pytest-xdist, scheduled
# by group_of below) run them one after another on one worker: the private Docker engine (test_docker stops
# it at its end), the one-node SLURM and the Ray clusters started on it, vLLM on the CPU (one server at
# a time fits the cores). Every other file is a group of its own, so a module's fixtures are made once.
SHARED: dict[str, tuple[str, ...]] = {
    "docker": ("test_docker.py", "test_compose.py", "test_inspect_agentic.py", "test_inspect_docker_sandbox.py"),
    "cluster": ("test_slurm.py", "test_prepare_slurm.py", "test_watch_slurm.py", "test_ray.py", "test_zipapp.py", "test_zipapp_pages.py"),
    "vllm": (
        "test_vllm_real.py",
        "test_vllm_lifecycle.py",
        "test_vllm_reasoning.py",
        "test_vllm_request_model.py",
        "test_vllm_service.py",
        "test_watch_vllm.py",
        "test_lmeval_parity.py",
        "test_lmeval_reference.py",
        "test_vlm_answers.py",
        "test_judge.py",
        "test_logprob_answers.py",
    ),
}
_GROUP_OF = {name: group for group, names in SHARED.items() for name in names}
# Files whose tests time themselves against wall-clock bounds (a drain of 15 s, a reply within 2 s,
# a load test's wall time against its fault-free run): marked `serial`, run alone after the parallel
# pass (scripts/test.sh), never beside other workers' load.
SERIAL: tuple[str, ...] = (
    "test_faults_load.py",
    "test_scale.py",
    "test_lifecycle.py",
    "test_process_faults.py",
    "test_peak_rss.py",
    "test_hostile_server.py",
    "test_client.py",
    "test_sim_reasoning.py",
    "test_sandbox.py",
    "test_process.py",
    "test_not_regular_files.py",
)


# Left out of the quick tier (`bash scripts/test.sh --quick`): files that need a component the set-up
# installs or starts (those above, Chromium, the benchmark data packages, Kubernetes' validator, the
# reasoning references), run lm-eval or Inspect for real, install packages, or take minutes.
SLOW: tuple[str, ...] = (
    *_GROUP_OF,
    *SERIAL,
    "test_lmeval.py",
    "test_inspect.py",
    "test_inspect_parity.py",
    "test_inspect_sweep.py",
    "test_inspect_identity.py",
    "test_inspect_view.py",
    "test_library_boundary.py",
    "test_sim_tools.py",
    "test_extras_alone.py",
    "test_extras_fresh_venv.py",
    "test_plugins_install.py",
    "test_example_plugin.py",
    "test_kubernetes.py",
    "test_prepare_kubernetes.py",
    "test_prepare_lmeval.py",
    "test_reasoning_split.py",
    "test_export_inspect.py",
    "test_grid_html.py",
    "test_one_number_one_text.py",
    "test_pages_read.py",
    "test_pages_scale.py",
    "test_reasoning_pages.py",
    "test_report_html.py",
    "test_report_images.py",
    "test_status_serve.py",
    "test_sweep.py",
    "test_gsm8k.py",
    "test_humaneval.py",
    "test_mmlu.py",
    "test_reasoning_e2e.py",
    "test_export_mlflow.py",
    "test_export_wandb.py",
    "test_fuzz.py",
    "test_interval_coverage.py",
    "test_sim_knows.py",
    "test_layers.py",
    "test_preflight.py",
    "test_secrets.py",
    "test_slurm_render.py",
    "test_no_spread.py",
    "test_static_types.py",  # mypy over the core and every plugin: minutes with a cold cache
    # issues 42-44: a training run watched through kills (90 s one test), the watcher's rules (sim
    # launches), prepared runs in network namespaces (lm-eval and Inspect for real), and 10,000s of
    # simulated decisions per case (a minute of CPU)
    "test_watch.py",
    "test_watch_rules.py",
    "test_prepare_offline.py",
    "test_gate_error_rates.py",
    "test_gate.py",  # issue 44's acceptance: sweeps of 1,319 problems run end to end, then 200 drawn pairs
    "test_export_targets.py",  # launches that export to MLflow and W&B stores at their end
)


def group_of(nodeid: str) -> str:
    """The worker group of a test: its file's shared group, else its file."""
    name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return _GROUP_OF.get(name, name)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Parallel workers take a whole group at a time (xdist's scope scheduling, scoped by group_of).
    Its own `--dist loadgroup` reads `xdist_group` marks by rewriting node ids, which pytest 9.2's
    node ids no longer allow: every test went to any worker."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = item.path.name
        if name in SERIAL:
            item.add_marker(pytest.mark.serial)
        if name in SLOW:
            item.add_marker(pytest.mark.slow)
