"""No result depends on a server's hidden sampling defaults (guarantees H5, H5b, H5c).

A server fills every key a request leaves out (vLLM: temperature 1.0 unless the model's
generation_config says otherwise), so a config that sets no temperature was sampled at a
temperature nobody wrote down. Here a real HTTP server on 127.0.0.1 records the bodies it gets:
every request carries each benchmark's declared sampling, the user's explicit keys win, the
manifest and the run's identity hold what was sent, and --dry-run says it before anything runs.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

from aiohttp import web

from conftest import api_eval_config, shardeval_cmd
from served import app_in_thread


class RecordingServer:
    """An OpenAI-style chat endpoint that keeps every body it is sent and answers `#### 2`."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.url = ""

    async def chat(self, request: web.Request) -> web.Response:
        self.bodies.append(json.loads(await request.read()))
        return web.json_response(
            {
                "id": "c",
                "object": "chat.completion",
                "model": "sim",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "#### 2"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
        )

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "sim", "root": "sim", "max_model_len": 4096}]})


@contextmanager
def recording_server() -> Iterator[RecordingServer]:
    server, app = RecordingServer(), web.Application()
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_get("/v1/models", server.models)
    with app_in_thread(app) as origin:
        server.url = f"{origin}/v1"
        yield server


def run_and_collect(tmp_path: Path, *, repeats: int = 1, generation: dict | None = None, n: int = 3) -> tuple[list[dict], dict]:
    """Run arith against the recording server; the request bodies it got and the shard's manifest."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    with recording_server() as server:
        solver = {"type": "simple", "service": "model", **({"generation": generation} if generation is not None else {})}
        config = api_eval_config(
            tmp_path / "config.yaml",
            server.url,
            n=n,
            repeats=repeats,
            service={"stream": False, "retries": {"attempts": 1}},
            benchmark={"solver": solver},
        )
        proc = shardeval_cmd("run", str(config), "-o", str(tmp_path / "out"))
        assert proc.returncode == 0, proc.stderr
        bodies = list(server.bodies)
    assert len(bodies) == n * repeats
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    return bodies, manifest


def manifest_generation(manifest: dict) -> dict:
    return manifest["config"]["benchmarks"][0]["solver"].get("generation", {})


def test_unset_temperature_is_sent_as_the_benchmarks_greedy_default(tmp_path: Path) -> None:
    """H5: no generation section at all; every request says temperature 0, and so does the manifest."""
    bodies, manifest = run_and_collect(tmp_path)
    assert [b.get("temperature") for b in bodies] == [0.0] * 3
    assert manifest_generation(manifest) == {"temperature": 0.0}


def test_repeats_sample_at_a_declared_temperature_not_the_servers(tmp_path: Path) -> None:
    """H5 variant: repeats > 1 need distinct samples; the declared 1.0 is sent, never left out."""
    bodies, manifest = run_and_collect(tmp_path, repeats=2, n=2)
    assert [b.get("temperature") for b in bodies] == [1.0] * 4
    assert manifest_generation(manifest) == {"temperature": 1.0}


def test_an_explicit_setting_always_wins(tmp_path: Path) -> None:
    """H5b: a key the user set (as a key, or in `extra`) is sent as written; only unset ones are filled."""
    bodies, manifest = run_and_collect(tmp_path, generation={"temperature": 0.3, "max_tokens": 8})
    assert {(b["temperature"], b["max_tokens"]) for b in bodies} == {(0.3, 8)}
    assert manifest_generation(manifest) == {"temperature": 0.3, "max_tokens": 8}
    bodies, manifest = run_and_collect(tmp_path / "extra", generation={"extra": {"temperature": 0.5}})
    assert {b["temperature"] for b in bodies} == {0.5}
    assert "temperature" not in {k for k in manifest_generation(manifest) if k != "extra"}


def test_greedy_repeats_are_a_warning_and_run_as_written(tmp_path: Path) -> None:
    """H5c: repeats with an explicit temperature 0 ask one greedy question k times (pass@k = pass@1).
    It may be meant (a server's nondeterminism), so the run goes ahead as written, with one warning."""
    with recording_server() as server:
        solver = {"type": "simple", "service": "model", "generation": {"temperature": 0}}
        config = api_eval_config(
            tmp_path / "config.yaml", server.url, n=2, repeats=3, service={"stream": False}, benchmark={"solver": solver}
        )
        proc = shardeval_cmd("run", str(config), "-o", str(tmp_path / "out"))
        assert proc.returncode == 0, proc.stderr
        assert {b["temperature"] for b in server.bodies} == {0}
    warnings = [line for line in proc.stderr.splitlines() if "pass@k is pass@1" in line]
    assert len(warnings) == 1 and "repeats 3 with temperature 0" in warnings[0], proc.stderr


def _identity(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if "run identity" in line).split("run identity: ")[1].split()[0]


def test_dry_run_prints_the_sampling_and_an_unset_key_is_the_same_run_as_its_default(tmp_path: Path) -> None:
    """H5: --dry-run says what every request carries and where it comes from; a config that writes
    the default out is the same run (same identity) as one that leaves it unset, one that differs is not."""
    url = "http://127.0.0.1:9/v1"
    unset = api_eval_config(tmp_path / "unset.yaml", url)
    written = api_eval_config(tmp_path / "written.yaml", url, benchmark={"solver": {"type": "simple", "generation": {"temperature": 0.0}}})
    other = api_eval_config(tmp_path / "other.yaml", url, benchmark={"solver": {"type": "simple", "generation": {"temperature": 0.7}}})
    runs = {
        name: shardeval_cmd("run", str(path), "--dry-run", "-o", str(tmp_path / name))
        for name, path in (("unset", unset), ("written", written), ("other", other))
    }
    for proc in runs.values():
        assert proc.returncode == 0, proc.stderr
    assert "benchmarks[0] (arith), repeats 1: requests carry temperature=0.0 (the benchmark's default)" in runs["unset"].stderr
    assert "temperature=0.7 (the config's)" in runs["other"].stderr
    assert _identity(runs["unset"].stderr) == _identity(runs["written"].stderr) != _identity(runs["other"].stderr)


def test_quick_mode_and_humaneval_declare_their_sampling(tmp_path: Path) -> None:
    """H5 variant: `run --bench` (no config file) fills the same defaults; humaneval with repeats
    uses Chen et al.'s pass@k sampling (temperature 0.8, top_p 0.95), greedy without; a judge's
    requests say their temperature too."""
    quick = shardeval_cmd(
        "run", "--bench", "arith", "--model-url", "http://127.0.0.1:9/v1", "--model-id", "m", "--dry-run", "-o", str(tmp_path / "q")
    )
    assert quick.returncode == 0, quick.stderr
    assert "requests carry temperature=0.0 (the benchmark's default)" in quick.stderr
    for repeats, expected in (
        (5, "temperature=0.8 (the benchmark's default), top_p=0.95 (the benchmark's default)"),
        (1, "temperature=0.0 (the benchmark's default)"),
    ):
        config = api_eval_config(
            tmp_path / f"he{repeats}.yaml", "http://127.0.0.1:9/v1", bench="humaneval", repeats=repeats, benchmark={"params": {}}
        )
        proc = shardeval_cmd("run", str(config), "--dry-run", "-o", str(tmp_path / f"he{repeats}"))
        assert proc.returncode == 0, proc.stderr
        assert f"(humaneval), repeats {repeats}: requests carry {expected}" in proc.stderr
    judged = shardeval_cmd(
        "run", "examples/judge_sim.yaml", "--dry-run", "-o", str(tmp_path / "j"), cwd=str(Path(__file__).resolve().parent.parent)
    )
    assert judged.returncode == 0, judged.stderr
    assert "benchmarks[0] judge judge: requests carry temperature=0.0" in judged.stderr


def test_a_benchmark_scored_by_likelihood_is_said_as_it_is_sent(tmp_path: Path) -> None:
    """H5d: perplexity with repeats (and mmlu in loglikelihood mode, or any benchmark given
    `solver.type: loglikelihood`) is scored, not sampled: its requests carry temperature 0 and
    max_tokens 0 whatever the config says. --dry-run says that (it said `temperature=1.0 (the
    benchmark's default), max_tokens unset`), and the manifest records no filled-in temperature
    (it recorded 1.0, never sent); the requests of a real run against the simulator are as said."""
    from conftest import running_sim

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nhello world again\n")
    scored = "scored by log-likelihood: requests carry temperature=0.0, max_tokens=0"
    configs = {
        "perplexity": ("perplexity", {"params": {"path": str(corpus)}}),
        "mmlu": ("mmlu", {"params": {"subjects": ["anatomy"], "mode": "loglikelihood"}}),
        "named": ("arith", {"solver": {"type": "loglikelihood", "generation": {"max_tokens": 5}}}),
    }
    for name, (bench, section) in configs.items():
        config = api_eval_config(tmp_path / f"{name}.yaml", "http://127.0.0.1:9/v1", bench=bench, repeats=2, benchmark=section)
        proc = shardeval_cmd("run", str(config), "--dry-run", "-o", str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr
        assert f"({bench}), repeats 2: {scored}" in proc.stderr and "the benchmark's default" not in proc.stderr, proc.stderr
    greedy = shardeval_cmd("run", str(config), "--dry-run", "-o", str(tmp_path / "g"), "-O", "benchmarks.0.solver.generation.temperature=0")
    assert greedy.returncode == 0 and "pass@k is pass@1" not in greedy.stderr, greedy.stderr  # nothing is sampled: no warning
    with running_sim("--ttft-ms", "0", "--itl-ms", "0") as url:
        config = api_eval_config(tmp_path / "run.yaml", url, bench="perplexity", repeats=2, benchmark=configs["perplexity"][1])
        proc = shardeval_cmd("run", str(config), "-o", str(tmp_path / "out"))
        assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert "temperature" not in manifest_generation(manifest)
    sent = [json.loads(line)["request"] for line in (tmp_path / "out" / "perplexity" / "trajectories.jsonl").read_text().splitlines()]
    assert len(sent) == 4 and {(r["temperature"], r["max_tokens"]) for r in sent} == {(0.0, 0)}
