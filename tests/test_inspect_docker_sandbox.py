"""Inspect AI's `docker` sandbox on the engine scripts/setup/docker.sh provides.

Inspect's docker sandbox drives `docker compose` (the v2 plugin, at least 2.21) against Docker
Engine 24.0.6 or newer, and refuses anything older: that is why docker.sh runs trixie's dockerd
26.1 with the Compose 2.26 plugin. Here a task in a temporary folder names the imported base image
in its compose.yaml (`x-local: true` and `pull_policy: never`: no registry is reachable), and a
solver runs a command in each sample's container through `sandbox().exec`. The task runs with
`inspect_ai.eval(..., model="mockllm/model")` in a child process given the engine's environment
(DOCKER_HOST, its CLI first on PATH, the DOCKER_CONFIG holding the plugin), so nothing of Inspect's
global state stays in the test process. The same session fixture as tests/test_docker.py starts
the engine, and the test skips only when the engine cannot start on this machine.

A prepared run (docs/offline.md) checks its sandbox's images against this engine too: a shard in a
network namespace with only loopback (tests/test_prepare_offline.py's runner), reaching the daemon
through its socket, refuses in one line while the image is absent, and runs the sample in it once
the image is there (`docker tag`: what `docker load` on a node does, with no registry).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from test_docker import docker, engine  # noqa: F401  (the session fixture: docker.sh start, stop at the end)

pytestmark = pytest.mark.timeout(600)

SAMPLES = 3
COMMAND = ["bash", "-lc", "echo hi && python3 -c 'print(1+1)'"]

COMPOSE_YAML = """\
services:
  default:
    image: {image}
    x-local: true
    pull_policy: never
    command: tail -f /dev/null
    init: true
    network_mode: none
    stop_grace_period: 1s
"""

# The child: runs the task and prints one JSON line with what each sample's container answered and
# how long its sandbox took to start (the sample's `init` span: compose up and the wait for it).
TASK_RUNNER = """\
import json, sys, time
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.solver import solver
from inspect_ai.util import sandbox

COMMAND = {command!r}

@solver
def run_in_sandbox():
    async def solve(state, generate):
        ran = await sandbox().exec(COMMAND)
        state.store.set("stdout", ran.stdout)
        state.store.set("returncode", ran.returncode)
        inside = await sandbox().exec(["sh", "-c", "test -f /.dockerenv && echo in-container"])
        state.store.set("inside", inside.stdout.strip())
        return state
    return solve

task = Task(dataset=[Sample(input="run it", id=i) for i in range({samples})], solver=run_in_sandbox(),
            sandbox=("docker", "compose.yaml"))
started = time.monotonic()
(log,) = eval(task, model="mockllm/model", log_dir="logs", display="none")
wall = time.monotonic() - started

def startup_s(sample):
    begin = next(e for e in sample.events if e.event == "span_begin" and e.name == "init")
    end = next(e for e in sample.events if e.event == "span_end" and e.id == begin.id)
    return (end.timestamp - begin.timestamp).total_seconds()

print(json.dumps({{
    "status": log.status,
    "error": str(log.error) if log.error else None,
    "wall_s": wall,
    "samples": [{{"id": s.id, "error": str(s.error) if s.error else None, "store": dict(s.store),
                  "startup_s": startup_s(s)}} for s in (log.samples or [])],
}}))
"""


def inspect_containers(env: dict[str, str]) -> set[str]:
    """Containers of Inspect's compose projects (it names them inspect-<task>-<id>)."""
    listed = docker(env, "ps", "-a", "--filter", "label=com.docker.compose.project", "--format", "{{.Names}}").stdout.split()
    return {name for name in listed if name.startswith("inspect-")}


def test_inspect_docker_sandbox_runs_commands_in_the_base_image(engine, tmp_path: Path):
    """Every sample's command runs in its own container of the imported base image: `echo hi` and
    python3 answer, the engine and Compose pass Inspect's version checks, nothing is pulled, and
    Inspect removes its containers at the end."""
    before = inspect_containers(engine)
    (tmp_path / "compose.yaml").write_text(COMPOSE_YAML.format(image=engine["SHARDEVAL_DOCKER_BASE"]))
    (tmp_path / "run_task.py").write_text(TASK_RUNNER.format(command=COMMAND, samples=SAMPLES))
    # Inspect's own data (its record of running projects) stays in the temporary folder
    env = {**engine, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    ran = subprocess.run([sys.executable, "run_task.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert (result["status"], result["error"]) == ("success", None), result
    samples = sorted(result["samples"], key=lambda s: s["id"])
    assert [s["id"] for s in samples] == list(range(SAMPLES))
    for sample in samples:
        assert sample["error"] is None, sample
        assert sample["store"] == {"stdout": "hi\n2\n", "returncode": 0, "inside": "in-container"}, sample
    startups = [s["startup_s"] for s in samples]
    print(
        f"\ninspect docker sandbox: {SAMPLES} samples in {result['wall_s']:.1f} s; sandbox startup per sample "
        + ", ".join(f"{t:.2f}" for t in startups)
        + " s"
    )
    assert inspect_containers(engine) == before, "Inspect left containers behind"


# --- a prepared run's image check, against this engine ----------------------------------------------

BOXED_TASK_PY = """\
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import match
from inspect_ai.solver import generate, solver
from inspect_ai.util import sandbox


@solver
def ask_the_container():
    async def solve(state, generate):
        ran = await sandbox().exec(["cat", "/etc/debian_version"])
        state.user_prompt.text = state.user_prompt.text + " [debian " + ran.stdout.strip() + "]"
        return state
    return solve


@task
def boxed():
    return Task(dataset=[Sample(input="1 + 1?", target="2", id="a")], solver=[ask_the_container(), generate()],
                scorer=match(), sandbox=("docker", "compose.yaml"))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"), reason="needs root, unshare and ip (a network namespace)"
)
def test_a_prepared_shard_checks_its_sandbox_image_against_the_engine(engine, tmp_path: Path):
    """`shardeval prepare` names the compose file's image; the shard, offline, asks the real engine
    (`docker image inspect`): absent, one line naming it, exit 2, nothing sent; present (tagged
    from the base image), the sample runs in a container of it and the run is COMPLETE."""
    from test_prepare_offline import config, shardeval, state

    image = f"shardeval-test/prepared-{uuid.uuid4().hex[:8]}:1"
    (tmp_path / "compose.yaml").write_text(COMPOSE_YAML.format(image=image))
    (tmp_path / "tasks.py").write_text(BOXED_TASK_PY)
    requests = tmp_path / "requests.jsonl"
    cfg = config(tmp_path, requests, {"name": "inspect", "params": {"task": f"{tmp_path}/tasks.py@boxed"}})
    out = tmp_path / "out"
    node = {
        **{k: v for k, v in engine.items() if k.startswith("DOCKER_") or k == "PATH"},
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    prepared = shardeval("prepare", str(cfg), "-o", str(out), env=node)
    assert prepared.returncode == 0, prepared.stderr
    assert f"the image(s) {image} must be present on the nodes" in prepared.stderr, prepared.stderr
    try:
        absent = shardeval("run", str(cfg), "-o", str(out / "shard_0"), "--shard", "0/1", env=node, offline=True)
        assert absent.returncode == 2, absent.stderr
        last = absent.stderr.strip().splitlines()[-1]
        assert last.startswith("shardeval: error:") and image in last and "docker pull or docker load" in last, absent.stderr
        assert not requests.exists() or requests.read_text() == ""
        docker(engine, "tag", engine["SHARDEVAL_DOCKER_BASE"], image)  # the node gets the image
        present = shardeval("run", str(cfg), "-o", str(out / "shard_0"), "--shard", "0/1", env=node, offline=True)
        assert present.returncode == 0, present.stderr
        assert state(out / "shard_0") == "complete"
        assert "[debian 12." in requests.read_text(), requests.read_text()
    finally:
        docker(engine, "rmi", image, check=False)
