"""Helpers for the tests that run a real CPU vLLM (tests/test_vllm_real.py, tests/perf/test_vllm_overhead.py).

scripts/setup/vllm.sh (run by scripts/test.sh before pytest) builds the vLLM venv and the model
once per machine and writes their paths to `<cache>/vllm/env`; SHARDEVAL_VLLM_PYTHON and
SHARDEVAL_VLLM_MODEL in the environment win over that file. Without either, the tests skip,
naming the script to run.
"""

from __future__ import annotations

import asyncio
import os
from contextlib import contextmanager
from collections.abc import Iterator

import pytest

from shardeval.run.process import ServerProcess, free_port

SERVED_NAME = "smol"
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
# float32, not the recipe's bfloat16: on a CPU without AVX512-BF16 (this one has AVX2 only) bf16
# is emulated, and 32 concurrent 16-token completions took 19.3 s against 4.7 s in float32.
CPU_ARGS = ["--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", "32", "--enforce-eager"]
START_TIMEOUT_S = 300.0  # ~25 s on an idle machine; the CI machine may be busy


def env_file() -> str:
    return os.path.join(os.environ.get("SHARDEVAL_CI_CACHE", "/var/cache/shardeval-ci"), "vllm", "env")


def vllm_paths() -> tuple[str, str] | None:
    """(python of the vLLM venv, model directory), or None when vLLM is not set up here."""
    values: dict[str, str] = {}
    try:
        with open(env_file()) as f:
            for line in f:
                key, sep, value = line.strip().partition("=")
                if sep:
                    values[key] = value
    except OSError:
        pass
    python = os.environ.get("SHARDEVAL_VLLM_PYTHON") or values.get("SHARDEVAL_VLLM_PYTHON")
    model = os.environ.get("SHARDEVAL_VLLM_MODEL") or values.get("SHARDEVAL_VLLM_MODEL")
    if python and model and os.path.exists(python) and os.path.isfile(os.path.join(model, "config.json")):
        return python, model
    return None


def require_vllm() -> tuple[str, str]:
    paths = vllm_paths()
    if paths is None:
        pytest.skip(f"no CPU vLLM here: run scripts/setup/vllm.sh (writes {env_file()})")
    return paths


def launch_command(python: str) -> list[str]:
    """The CPU recipe's launch command (`vllm serve` fails for the vllm-cpu distribution)."""
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"]


def managed_service(python: str, model: str, **kw: object) -> dict[str, object]:
    """A `services.model` section of `type: vllm` that launches the CPU vLLM itself."""
    return {
        "type": "vllm",
        "model": model,
        "served_model_name": SERVED_NAME,
        "launch_command": launch_command(python),
        "extra_args": CPU_ARGS,
        "env": VLLM_ENV,
        "port": 0,
        "startup_timeout_s": START_TIMEOUT_S,
        "stop_timeout_s": 20,
        **kw,
    }


@contextmanager
def running_vllm(log_path: str, **service: object) -> Iterator[tuple[str, ServerProcess]]:
    """Start one real vLLM (via the project's ServerProcess) and yield (base URL …/v1, process).
    Its command line is the `type: vllm` service's (`managed_service` + `service`), so every test
    server also proves that vLLM parses what shardeval writes."""
    import msgspec

    from shardeval_vllm.config import check_media_path, VllmServiceConfig, vllm_argv

    python, model = require_vllm()
    port = free_port()
    config = msgspec.convert(managed_service(python, model, **service), VllmServiceConfig)
    check_media_path("model", config)
    argv = vllm_argv(config, port)
    with ServerProcess(argv, name="vllm (test server)", log_path=log_path, env=VLLM_ENV, stop_grace_s=20) as proc:
        asyncio.run(proc.wait_http(f"http://127.0.0.1:{port}/health", timeout_s=START_TIMEOUT_S, interval_s=0.5))
        yield f"http://127.0.0.1:{port}/v1", proc
