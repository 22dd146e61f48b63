"""An agentic Inspect task, sharded: Inspect's react() agent with bash() in a sandbox, 3 shards.

Twice: in Inspect's `local` sandbox, and in its `docker` sandbox on the engine scripts/setup/docker.sh
starts (trixie's dockerd 26 with Compose v2; the compose.yaml names the imported base image, nothing
is pulled; the same session fixture as tests/test_docker.py, skipped only where it cannot start).

The simulator (a real `shardeval sim` process on 127.0.0.1) answers a request that offers tools
with its scripted tool call (a bash command that really runs in the sandbox and takes a second),
then `submit`s its answer to the problem (right with --accuracy 0.7). One shard is SIGKILLed while
its samples are mid-way and run again: nothing it wrote is lost or repeated, nothing is scored as
an error, and every sample's transcript holds the tool call, the command's real output and the
submit, in the shard records and in the merged Inspect log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import running_sim, shardeval_cmd
from test_docker import engine  # noqa: F401  (the session fixture: docker.sh start, stop at the end)
from test_inspect_docker_sandbox import COMPOSE_YAML  # the imported base image, never pulled

pytest.importorskip("inspect_ai")

N_PROBLEMS, REPEATS, SHARDS = 12, 2, 3
COMMAND = "sleep 1; echo $((6 * 7))"  # a second in the sandbox: a SIGKILL can land mid-sample
TASK = """
from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import match
from inspect_ai.tool import bash


@task
def agent():
    return Task(dataset=json_dataset("problems.jsonl"), solver=react(tools=[bash(timeout=120)]), scorer=match(),
                sandbox=SANDBOX, message_limit=12)
"""


def write_task(folder: Path, sandbox: str, engine: dict[str, str] | None) -> None:
    """The task file and its dataset: arith problems, so the simulator knows each right answer."""
    from shardeval import plugins

    bench = plugins.registry().get("benchmarks", "arith", where="test").factory({"n": N_PROBLEMS})
    with open(folder / "problems.jsonl", "w", encoding="utf-8") as f:
        for i in range(N_PROBLEMS):
            p = bench.problem(i)
            f.write(json.dumps({"id": p.id, "input": p.user_text(), "target": p.reference}) + "\n")
    if engine is not None:
        (folder / "compose.yaml").write_text(COMPOSE_YAML.format(image=engine["SHARDEVAL_DOCKER_BASE"]), encoding="utf-8")
    spec = '("docker", "compose.yaml")' if sandbox == "docker" else '"local"'
    (folder / "agent.py").write_text(TASK.replace("SANDBOX", spec), encoding="utf-8")


def write_config(folder: Path, base: str) -> Path:
    config = folder / "agent.yaml"
    config.write_text(
        json.dumps(
            {
                "services": {"model": {"type": "api", "url": base, "model": "sim"}},
                "benchmarks": [{"name": "inspect", "params": {"task": "agent.py@agent"}, "repeats": REPEATS, "max_concurrent": 2}],
            }
        ),
        encoding="utf-8",
    )
    return config


def shard_env(i: int, engine: dict[str, str] | None) -> dict[str, str]:
    """A shard's environment: its index, and for docker the engine's (DOCKER_HOST, its CLI, the
    Compose plugin's DOCKER_CONFIG)."""
    return {**(engine or os.environ), "NEL_SHARD_IDX": str(i), "NEL_TOTAL_SHARDS": str(SHARDS)}


def remove_inspect_containers(env: dict[str, str]) -> None:
    """Inspect's sandbox containers (its compose projects are named inspect-<task>-<id>)."""
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "name=inspect-agent"], env=env, capture_output=True, text=True, timeout=60
    ).stdout.split()
    if listed:
        subprocess.run(["docker", "rm", "-f", *listed], env=env, capture_output=True, timeout=120)


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def kill_mid_way(folder: Path, config: Path, out: Path, engine: dict[str, str] | None) -> int:
    """Start shard 0 and SIGKILL it once its first record is on disk (others still running);
    returns how many records it had written."""
    results = out / "agent" / "results.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardeval", "run", str(config), "-o", str(out)],
        cwd=folder,
        env=shard_env(0, engine),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not read_lines(results):
            assert proc.poll() is None, f"shard 0 ended before it wrote a record: {proc.stderr.read() if proc.stderr else ''}"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    written = read_lines(results)
    assert written, "shard 0 wrote no record within two minutes"
    return len(written)


def command_printed_42(reply: str) -> bool:
    """The bash tool's reply ends with the command's stdout; Inspect puts any stderr first, and a
    `bash --login` on a busy host can write some (its profile scripts), which is not the command's."""
    lines = reply.strip().splitlines()
    return bool(lines) and lines[-1].strip() == "42"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sandbox", ["local", "docker"])
def test_react_agent_with_bash_sharded_killed_and_resumed(tmp_path: Path, sandbox: str, request: pytest.FixtureRequest) -> None:
    from inspect_ai.event import ToolEvent
    from inspect_ai.log import read_eval_log, resolve_sample_attachments

    engine = None
    if sandbox == "docker":  # Inspect's own data (its record of running projects) stays in the temporary folder
        engine = {**request.getfixturevalue("engine"), "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
        request.addfinalizer(lambda: remove_inspect_containers(engine))  # a SIGKILLed shard cannot remove its own
    write_task(tmp_path, sandbox, engine)
    script = [{"name": "bash", "arguments": {"command": COMMAND}}]
    with running_sim(
        "--ttft-ms", "0", "--itl-ms", "0", "--bench", "arith", "--accuracy", "0.7", "--tool-calls", json.dumps(script)
    ) as base:
        config = write_config(tmp_path, base)
        run = tmp_path / "run"
        per_shard = N_PROBLEMS // SHARDS * REPEATS
        before_kill = kill_mid_way(tmp_path, config, run / "shard_0", engine)
        assert before_kill < per_shard, "the kill came after shard 0 had finished: it proves nothing"
        for i in range(SHARDS):
            done = shardeval_cmd(
                "run", str(config), "-o", str(run / f"shard_{i}"), env=shard_env(i, engine), cwd=str(tmp_path), timeout=180
            )
            assert done.returncode == 0, done.stderr
        merged = shardeval_cmd("merge", str(run), env=engine, cwd=str(tmp_path), timeout=180)
    assert merged.returncode == 0 and "COMPLETE" in merged.stdout + merged.stderr, merged.stdout + merged.stderr

    # every (sample, epoch) ended once: shard 0's file holds the records from before the kill and
    # the rerun's, no pair twice, and no error (a sample cut off by the kill left no record)
    for i in range(SHARDS):
        records = read_lines(run / f"shard_{i}" / "agent" / "results.jsonl")
        pairs = [(r["problem_id"], r["repeat"]) for r in records]
        assert len(pairs) == len(set(pairs)) == per_shard, (i, pairs)
        assert all(r["status"] == "ok" and r["scores"].keys() == {"match"} for r in records), records
    shard0 = read_lines(run / "shard_0" / "agent" / "results.jsonl")
    assert len(shard0) == per_shard and before_kill >= 1

    # the transcript, as shardeval keeps it: the tool call, the command's real output, the submit
    trajectories = read_lines(run / "merged" / "agent" / "trajectories.jsonl")
    assert len(trajectories) == N_PROBLEMS * REPEATS
    for t in trajectories:
        roles = [m["role"] for m in t["messages"]]
        assert "tool" in roles, roles
        text = "\n".join(m["content"] for m in t["messages"])
        assert "[tool call" in text and "bash(" in text and COMMAND in text and "submit(" in text
        tool_replies = [m["content"] for m in t["messages"] if m["role"] == "tool"]
        assert any(command_printed_42(reply) for reply in tool_replies), tool_replies

    # the right answers are the simulator's: about 70 %, and exactly what it decided per problem
    results = read_lines(run / "merged" / "agent" / "results.jsonl")
    assert 0 < sum(r["score"] for r in results) < len(results)

    # and in the one merged Inspect log: every sample, each with its tool events in order
    log = read_eval_log(str(run / "merged" / "inspect" / "agent.eval"))
    assert log.status == "success" and len(log.samples) == N_PROBLEMS * REPEATS
    assert {(str(s.id), s.epoch) for s in log.samples} == {(r["problem_id"], r["repeat"] + 1) for r in results}
    for sample in (resolve_sample_attachments(s) for s in log.samples):
        tools = [e for e in sample.events if isinstance(e, ToolEvent)]
        assert [e.function for e in tools] == ["bash", "submit"], [e.function for e in tools]
        assert command_printed_42(str(tools[0].result)) and tools[0].error is None, (tools[0].result, tools[0].error)
    accuracy = log.results.scores[0].metrics["accuracy"].value
    assert accuracy == pytest.approx(sum(r["score"] for r in results) / len(results))
