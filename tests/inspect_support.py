"""Inspect tasks written at test time, a simulator that knows their answers, and shardeval runs of them.

The tasks read local JSON datasets of sums (`arith.jsonl`: ids s00, s01, ...; `unnamed.jsonl`: the
same questions, reversed, without ids, so Inspect numbers them 1, 2, ...). The simulator is started
with `--bench inspect --bench-param task=.../tasks.py@arith`: it loads the Inspect task through the
plugin and indexes each sample's input to its target, so it answers a question right with the
chosen probability (`#### <sum>`) or wrong (`#### <sum + 1>`), which `match()` tells apart. Its
replies depend on the prompt alone (Inspect sends no seed), so `inspect eval` and shardeval get the
same words for the same (sample, epoch).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from collections.abc import Iterator


from conftest import running_sim, shardeval_cmd, stop_process
import served

TASKS_PY = '''\
from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import includes, match
from inspect_ai.solver import generate, solver, user_message


@task
def arith():
    """The parity task: a local JSON dataset, generate(), match()."""
    return Task(dataset=json_dataset("arith.jsonl"), solver=generate(), scorer=match())


@task
def unnamed():
    """The same questions without ids; two scorers and two epoch reducers, so the log has several metrics."""
    return Task(dataset=json_dataset("unnamed.jsonl"), solver=generate(), scorer=[match(), includes()],
                epochs=Epochs(1, ["mean", "max"]))


@solver
def fail_on(sample_id):
    async def solve(state, generate):
        if state.sample_id == sample_id:
            raise RuntimeError(f"the solver fails on sample {sample_id}")
        return await generate(state)

    return solve


@task
def flaky():
    """Its solver raises for sample s03 (an Inspect sample error); the others are answered."""
    return Task(dataset=json_dataset("arith.jsonl"), solver=fail_on("s03"), scorer=match())


@task
def chatty():
    """Two turns: under a message limit of 1 every sample runs out of messages."""
    return Task(dataset=json_dataset("arith.jsonl"), solver=[generate(), user_message("Check it once more."), generate()],
                scorer=match())
'''

MODEL = "sim"


def question(i: int) -> tuple[str, str]:
    """The i-th sum and its answer (distinct texts: the simulator's key is the prompt)."""
    a, b = 3 + (i * 7) % 41, 10 + (i * 13) % 37
    return f"Question {i}: what is {a} + {b}? End with the number.", str(a + b)


def write_tasks(folder: Path, n: int) -> Path:
    """tasks.py with n samples in arith.jsonl (and the first min(n, 30) reversed, without ids, in
    unnamed.jsonl); returns tasks.py's path."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"s{i:02d}", "input": q, "target": t} for i, (q, t) in enumerate(map(question, range(n)))]
    (folder / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    unnamed = [{"input": r["input"], "target": r["target"]} for r in reversed(rows[:30])]
    (folder / "unnamed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in unnamed))
    (folder / "tasks.py").write_text(TASKS_PY)
    return folder / "tasks.py"


@contextmanager
def inspect_sim(tasks: Path, *args: str, accuracy: float = 0.5) -> Iterator[str]:
    """A simulator that knows the answers of tasks.py@arith (and so of every task on its questions)."""
    with running_sim(
        "--bench",
        "inspect",
        "--bench-param",
        f"task={tasks}@arith",
        "--accuracy",
        str(accuracy),
        "--ttft-ms",
        "0",
        "--itl-ms",
        "0",
        "--output-tokens",
        "12",
        *args,
        timeout=60,
    ) as url:
        yield url


class Recording(served.Recording):
    """What reached the simulator through the proxy, in arrival order."""

    def prompts(self) -> list[str]:
        """The last user turn of every chat request (the sample's question for a generate() task)."""
        return [next(m["content"] for m in reversed(b["messages"]) if m["role"] == "user") for b in self.bodies if "messages" in b]


@contextmanager
def recording(upstream_url: str) -> Iterator[Recording]:
    """A proxy in front of `upstream_url` (…/v1) that records each POST body and Authorization header."""
    with served.recording_proxy(upstream_url, Recording(url="")) as seen:
        yield seen


def inspect_config(path: Path, url: str, tasks: Path, entries: list[dict[str, Any]], service: dict[str, Any] | None = None) -> Path:
    """A config with one api service at `url` and one inspect benchmark per entry: `task` is a task
    name in tasks.py, the other keys go to the entry (`repeats`, `max_concurrent`) or, under
    `params`, join the task's params."""
    benchmarks = []
    for entry in entries:
        entry = dict(entry)
        params = {"task": f"{tasks}@{entry.pop('task')}", **entry.pop("params", {})}
        benchmarks.append({"name": "inspect", "params": params, "repeats": 3, "max_concurrent": 8, **entry})
    config = {
        "services": {"model": {"type": "api", "url": url, "model": MODEL, **(service or {})}},
        "benchmarks": benchmarks,
        "output": {"progress_interval_s": 0},
    }
    path.write_text(json.dumps(config, indent=1))
    return path


def run_shards(cfg: Path, root: Path, total: int, env: dict[str, str] | None = None, timeout: float = 180) -> None:
    """`shardeval run` for every shard of `total` at once, as NEL_SHARD_IDX/NEL_TOTAL_SHARDS say; all must exit 0."""
    procs = []
    for i in range(total):
        shard_env = {**os.environ, **(env or {}), "NEL_SHARD_IDX": str(i), "NEL_TOTAL_SHARDS": str(total)}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "shardeval", "run", str(cfg), "-o", str(root / f"shard_{i}")],
                env=shard_env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    failures = []
    for i, proc in enumerate(procs):
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"shard {i}: exit {proc.returncode}: {err[-2000:]}")
    assert not failures, "\n".join(failures)


def merge(root: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return shardeval_cmd("merge", str(root), env=env)


def read_log(path: Path) -> Any:
    from inspect_ai.log import read_eval_log

    return read_eval_log(str(path))


def only_log(folder: Path) -> Path:
    """The one .eval file `inspect eval` wrote in `folder`."""
    (path,) = folder.glob("*.eval")
    return path


def cells(log: Any) -> dict[tuple[str, int], Any]:
    """{(sample id as text, epoch): EvalSample}, every sample of the log exactly once."""
    out = {(str(s.id), s.epoch): s for s in log.samples}
    assert len(out) == len(log.samples), "a (sample, epoch) appears twice in the log"
    return out


def records(folder: Path, bench: str) -> list[dict[str, Any]]:
    path = folder / bench / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def thinking_reply(i: int, a: int, b: int) -> tuple[dict[str, Any], int | None]:
    """How the thinking server answers question i (a + b): (the assistant message, reasoning tokens in
    the usage). Every third in vLLM's `reasoning` field, every third in the older
    `reasoning_content`, every third inline between `<think>` tags; right for even i, wrong for odd."""
    said = a + b if i % 2 == 0 else a + b + 1
    thought = f"Adding {a} and {b}: {a} + {b} = {a + b}."
    if i % 3 == 0:
        return {"content": f"#### {said}", "reasoning": thought}, 7 + i
    if i % 3 == 1:
        return {"content": f"#### {said}", "reasoning_content": thought}, 7 + i
    return {"content": f"<think>\n{thought}\n</think>\n\n#### {said}"}, None


@contextmanager
def thinking_server() -> Iterator[served.Recording]:
    """A chat server that plays a reasoning model on the arith questions (`thinking_reply`) and records
    each body it is sent; yields the Recording, its url …/v1."""
    import re

    from aiohttp import web

    seen = served.Recording(url="")

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        seen.bodies.append(body)
        asked = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
        i, a, b = map(int, re.search(r"Question (\d+): what is (\d+) \+ (\d+)\?", asked).groups())
        message, thought = thinking_reply(i, a, b)
        usage: dict[str, Any] = {"prompt_tokens": 20, "completion_tokens": 30, "total_tokens": 50}
        if thought is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": thought}
        return web.json_response(
            {
                "id": f"t{i}",
                "object": "chat.completion",
                "created": 0,
                "model": MODEL,
                "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
                "usage": usage,
            }
        )

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    with served.app_in_thread(app) as origin:
        seen.url = origin + "/v1"
        yield seen


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def inspect_view(log_dir: Path, timeout: float = 60.0) -> Iterator[str]:
    """`inspect view start` on `log_dir`; yield its origin once it lists the logs; always stop it."""
    port = free_port()
    inspect_cli = Path(sys.executable).parent / "inspect"
    proc = subprocess.Popen(
        [str(inspect_cli), "view", "start", "--log-dir", str(log_dir), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    origin = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert proc.poll() is None, f"inspect view exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
            try:
                with urllib.request.urlopen(origin + "/api/logs", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, "inspect view did not answer in time"
            time.sleep(0.2)
        yield origin
    finally:
        stop_process(proc)
