"""The managed `vllm` service, launched for real — with the simulator standing in for vLLM.

`shardeval sim` accepts vLLM's `--served-model-name/--host/--port/--tensor-parallel-size`, so a
`launch_command` pointing at it exercises the whole path: port check, launch, /health, Endpoint,
stop. Failure paths use tiny scripts. No real vLLM is needed here.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import openai
import pytest

from conftest import process_alive as alive
import yaml

from shardeval.errors import ShardError, UsageError
from shardeval.run.process import free_port
from shardeval.run.service import ServiceContext
from shardeval_vllm.config import VllmServiceConfig
from shardeval_vllm.service import connect_host, vllm_argv, vllm_service

SEED_EXAMPLE = "/work/shared/examples/slurm_gsm8k_sharded.yaml"
SIM_AS_VLLM = [sys.executable, "-m", "shardeval", "sim", "--ttft-ms", "0", "--itl-ms", "0", "--model"]


def config(**kw: Any) -> VllmServiceConfig:
    return msgspec.convert({"type": "vllm", "model": "org/Model-7B", **kw}, VllmServiceConfig)


def ctx(tmp_path: Path) -> ServiceContext:
    return ServiceContext(logs_dir=str(tmp_path / "logs"), shard_idx=0, total_shards=1)


# --- config and command line ------------------------------------------------------------------


def test_seed_example_decodes() -> None:
    if not os.path.exists(SEED_EXAMPLE):
        pytest.skip("shared seed example not present")
    with open(SEED_EXAMPLE) as f:
        raw = yaml.safe_load(f)["services"]["model"]
    cfg = msgspec.convert(raw, VllmServiceConfig)
    assert (cfg.model, cfg.tensor_parallel_size, cfg.port, cfg.node_pool) == ("nvidia/Llama-3.1-70B-Instruct", 4, 8000, "compute")
    assert cfg.protocol == "chat_completions" and cfg.served_model() == cfg.model
    assert cfg.startup_timeout_s == 1800 and cfg.launch_command is None


def test_unknown_key_is_named() -> None:
    with pytest.raises(msgspec.ValidationError, match="tensor_paralel_size"):
        config(tensor_paralel_size=2)


def test_registered_as_vllm() -> None:
    from shardeval import plugins

    entry = plugins.registry().get("services", "vllm", where="test")
    assert entry.config is VllmServiceConfig and entry.factory is vllm_service


def test_default_command_is_vllm_serve() -> None:
    argv = vllm_argv(config(tensor_parallel_size=4, extra_args=["--max-model-len", "8192"]), 8000)
    assert argv == [
        "vllm", "serve", "org/Model-7B",
        "--served-model-name", "org/Model-7B", "--host", "127.0.0.1", "--port", "8000",
        "--tensor-parallel-size", "4", "--max-model-len", "8192",
    ]  # fmt: skip


def test_cpu_recipe_command_appends_the_model_after_model_flag() -> None:
    cfg = config(
        served_model_name="smol",
        launch_command=["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model"],
        extra_args=["--dtype", "bfloat16", "--enforce-eager"],
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    argv = vllm_argv(cfg, 8123)
    assert argv[:5] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/Model-7B"]
    assert argv[5:] == [
        "--served-model-name", "smol", "--host", "127.0.0.1", "--port", "8123",
        "--tensor-parallel-size", "1", "--dtype", "bfloat16", "--enforce-eager",
    ]  # fmt: skip


def test_placeholders_and_no_standard_args() -> None:
    cfg = config(
        launch_command=["python", "-m", "sglang.launch_server", "--model-path", "{model}", "--port", "{port}"],
        extra_args=["--tp", "{tensor_parallel_size}", '--json={"a": 1}'],
        standard_args=False,
        tensor_parallel_size=2,
    )
    assert vllm_argv(cfg, 9000) == [
        "python", "-m", "sglang.launch_server", "--model-path", "org/Model-7B", "--port", "9000",
        "--tp", "2", '--json={"a": 1}',
    ]  # fmt: skip


# --- images (issue 28): the three vLLM keys -------------------------------------------------------

IMAGE_KEYS = {
    "limit_mm_per_prompt": {"image": {"width": 512, "count": 4, "height": 512}},
    "mm_processor_kwargs": {"num_crops": 4, "max_pixels": 1003520},
    "allowed_local_media_path": "/data/images",
}


def test_image_keys_become_canonical_json_flags() -> None:
    argv = vllm_argv(config(extra_args=["--enforce-eager"], **IMAGE_KEYS), 8000)
    assert argv[argv.index("--tensor-parallel-size") + 2:] == [
        "--limit-mm-per-prompt", '{"image":{"count":4,"height":512,"width":512}}',
        "--mm-processor-kwargs", '{"max_pixels":1003520,"num_crops":4}',
        "--allowed-local-media-path", "/data/images",
        "--enforce-eager",
    ]  # fmt: skip
    assert vllm_argv(config(limit_mm_per_prompt={"image": 2}), 8000)[-2:] == ["--limit-mm-per-prompt", '{"image":2}']


def test_image_keys_are_not_appended_without_standard_args() -> None:
    cfg = config(launch_command=["python", "-m", "server", "{model}"], standard_args=False, **IMAGE_KEYS)
    assert vllm_argv(cfg, 9000) == ["python", "-m", "server", "org/Model-7B"]


def test_image_keys_join_the_identity_only_when_set() -> None:
    plain = config().identity()
    assert not set(IMAGE_KEYS) & set(plain)
    for key, value in IMAGE_KEYS.items():
        assert config(**{key: value}).identity() == plain | {key: value}


PLAIN = {"type": "vllm", "model": "/ckpt/step1000", "served_model_name": "policy"}


def hash_of(tmp_path: Path, name: str, service: dict[str, Any]) -> str:
    from shardeval.config.loading import load_config
    from shardeval.identity import config_hash

    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"services": {"model": service}, "benchmarks": [{"name": "arith"}]}))
    return config_hash(load_config(str(path)))


def test_a_config_written_before_images_keeps_its_hash(tmp_path: Path) -> None:
    """Pinned before the image keys existed (commit 0cc74f6): a resume or merge of a text run
    started then goes on."""
    assert hash_of(tmp_path, "plain", PLAIN) == "sha256:f158ddf705473859"
    engine = {"type": "vllm", "model": "org/w", "port": 8000, "dtype": "bfloat16", "extra_args": ["--enforce-eager"]}
    assert hash_of(tmp_path, "engine", engine) == "sha256:be56db18074a5ccf"
    for key, value in IMAGE_KEYS.items():
        assert hash_of(tmp_path, key, PLAIN | {key: value}) != "sha256:f158ddf705473859", key
    limits = [hash_of(tmp_path, f"limit{n}", PLAIN | {"limit_mm_per_prompt": {"image": n}}) for n in (1, 2)]
    assert limits[0] != limits[1]


@pytest.mark.parametrize(
    "key, value, named",
    [
        ("limit_mm_per_prompt", {"image": "four"}, r"limit_mm_per_prompt"),
        ("limit_mm_per_prompt", "image=4", r"limit_mm_per_prompt"),
        ("mm_processor_kwargs", "num_crops=4", r"mm_processor_kwargs"),
        ("allowed_local_media_path", ["/data"], r"allowed_local_media_path"),
    ],
)
def test_bad_image_values_are_one_line_naming_the_key(tmp_path: Path, key: str, value: Any, named: str) -> None:
    from shardeval.config.loading import load_config

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"services": {"model": {"type": "vllm", "model": "m", key: value}}, "benchmarks": [{"name": "arith"}]}))
    with pytest.raises(UsageError, match=named) as info:
        load_config(str(path))
    assert "\n" not in str(info.value)


# --- reasoning models (issue 39): --reasoning-parser, --chat-template, what a request may carry ------------


def test_reasoning_keys_become_flags_and_join_the_identity_only_when_set(tmp_path: Path) -> None:
    cfg = config(reasoning_parser="qwen3", chat_template="/templates/think.jinja", extra_args=["--enforce-eager"])
    argv = vllm_argv(cfg, 8000)
    assert argv[argv.index("--tensor-parallel-size") + 2 :] == [
        "--reasoning-parser",
        "qwen3",
        "--chat-template",
        "/templates/think.jinja",
        "--enforce-eager",
    ]
    plain = config().identity()
    assert not {"reasoning_parser", "chat_template"} & set(plain)
    assert config(reasoning_parser="qwen3").identity() == plain | {"reasoning_parser": "qwen3"}
    assert config(chat_template="/t.jinja").identity() == plain | {"chat_template": "/t.jinja"}
    # the hash pinned before them stays; each changes it
    assert hash_of(tmp_path, "plain", PLAIN) == "sha256:f158ddf705473859"
    hashes = {
        hash_of(tmp_path, f"p{i}", PLAIN | keys)
        for i, keys in enumerate([{"reasoning_parser": "qwen3"}, {"reasoning_parser": "deepseek_r1"}, {"chat_template": "/t.jinja"}])
    }
    assert len(hashes) == 3 and "sha256:f158ddf705473859" not in hashes
    # not appended without the standard args (the launch command is written out whole)
    written = config(launch_command=["python", "-m", "server", "{model}"], standard_args=False, reasoning_parser="qwen3")
    assert vllm_argv(written, 9000) == ["python", "-m", "server", "org/Model-7B"]


def reasoning_config(tmp_path: Path, service: dict[str, Any], reasoning: dict[str, Any]) -> Any:
    from shardeval.config.loading import load_config

    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "services": {"model": {"type": "vllm", "model": "m", **service}},
                "benchmarks": [{"name": "arith", "solver": {"generation": {"reasoning": reasoning}}}],
            }
        )
    )
    return load_config(str(path))


def test_a_thinking_budget_needs_a_server_started_with_a_reasoning_parser(tmp_path: Path) -> None:
    """vLLM 0.32 answers `thinking_token_budget` 400 on a server without a reasoning config
    (vllm/v1/engine/input_processor.py): refused at load, in one line naming the key and the fix."""
    with pytest.raises(
        UsageError,
        match=r"reasoning\.budget_tokens is 64, which vLLM takes only from a server started with a "
        r"reasoning parser; set reasoning_parser .* \(service 'model', type vllm\)",
    ) as info:
        reasoning_config(tmp_path, {}, {"budget_tokens": 64})
    assert "\n" not in str(info.value)
    for service in (
        {"reasoning_parser": "qwen3"},
        {"extra_args": ["--reasoning-parser", "qwen3"]},
        {"extra_args": ['--reasoning-config={"reasoning_parser": "qwen3"}']},
    ):
        reasoning_config(tmp_path, service, {"budget_tokens": 64})
    with pytest.raises(UsageError, match="budget_tokens"):  # the key is not appended to a written-out command
        reasoning_config(
            tmp_path, {"reasoning_parser": "qwen3", "standard_args": False, "launch_command": ["srv", "{model}"]}, {"budget_tokens": 64}
        )
    # enable and effort reach any vLLM (chat_template_kwargs, reasoning_effort), parser or not
    cfg = reasoning_config(tmp_path, {}, {"enable": False, "effort": "low"})
    asked = cfg.benchmarks[0].solver.generation.reasoning
    assert cfg.services["model"].reasoning_request(asked) == {"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "low"}


@pytest.mark.parametrize("make, what", [(lambda p: None, "does not exist"), (lambda p: p.write_text("x"), "is not a directory")])
def test_media_path_that_is_no_directory_is_refused_before_launch(tmp_path: Path, make: Any, what: str) -> None:
    media = tmp_path / "images"
    make(media)
    never = tmp_path / "launched"
    cfg = config(
        launch_command=[sys.executable, "-c", f"open({str(never)!r}, 'w')"],
        standard_args=False,
        allowed_local_media_path=str(media),
        port=0,
    )

    async def go() -> None:
        async with vllm_service("model", cfg, ctx(tmp_path)):
            pass

    with pytest.raises(UsageError, match=rf"^services\.model\.allowed_local_media_path: {media} {what} on this node; ") as info:
        asyncio.run(go())
    assert "\n" not in str(info.value) and not never.exists()


def test_connect_host() -> None:
    assert connect_host("0.0.0.0") == "127.0.0.1" and connect_host("node17") == "node17" and connect_host("::1") == "[::1]"


# --- launching for real -----------------------------------------------------------------------


def test_launch_health_endpoint_and_stop(tmp_path: Path) -> None:
    port = free_port()
    cfg = config(launch_command=SIM_AS_VLLM, served_model_name="smol", port=port, startup_timeout_s=30, stop_timeout_s=5)

    async def go() -> tuple[Any, str]:
        async with vllm_service("model", cfg, ctx(tmp_path)) as endpoint:
            oa = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key="unused", max_retries=0)
            models = await oa.models.list()
            done = await oa.chat.completions.create(model=endpoint.model, messages=[{"role": "user", "content": "hi"}])
            await oa.close()
            assert [m.id for m in models.data] == ["smol"]
            assert endpoint.process is not None and endpoint.process.running
            return endpoint, done.choices[0].finish_reason

    endpoint, finish = asyncio.run(go())
    assert finish == "stop"
    assert endpoint.base_url == f"http://127.0.0.1:{port}/v1" and endpoint.model == "smol"
    assert endpoint.protocol == "chat_completions"
    assert not alive(endpoint.process.pid)
    log = (tmp_path / "logs" / "vllm.log").read_text()
    assert "--served-model-name smol" in log and "listening on" in log


def test_api_key_goes_through_the_environment_not_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dump = tmp_path / "env.txt"
    script = tmp_path / "fake.py"
    script.write_text(f"import os\nopen({str(dump)!r}, 'w').write(os.environ.get('VLLM_API_KEY', ''))\nraise SystemExit(1)\n")
    monkeypatch.setenv("MY_KEY", "sk-test-123")
    cfg = config(launch_command=[sys.executable, str(script)], api_key_env="MY_KEY", port=0, startup_timeout_s=10)

    async def go() -> None:
        async with vllm_service("judge", cfg, ctx(tmp_path)):
            pass

    with pytest.raises(ShardError):
        asyncio.run(go())
    assert dump.read_text() == "sk-test-123"
    assert "sk-test-123" not in (tmp_path / "logs" / "vllm-judge.log").read_text()
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(UsageError, match="MY_KEY is not set"):
        asyncio.run(go())


def test_crash_at_start_quotes_the_log(tmp_path: Path) -> None:
    cfg = config(
        launch_command=[sys.executable, "-c", "import sys; print('ValueError: unknown model architecture', file=sys.stderr); sys.exit(1)"],
        standard_args=False,
        port=0,
    )

    async def go() -> None:
        async with vllm_service("model", cfg, ctx(tmp_path)):
            pass

    with pytest.raises(
        ShardError, match=r"service 'model' \(vllm\): exited during start-up \(exit status 1\)[\s\S]*unknown model architecture"
    ):
        asyncio.run(go())


def test_slow_start_past_the_deadline(tmp_path: Path) -> None:
    cfg = config(
        launch_command=[sys.executable, "-c", "import time; time.sleep(60)"],
        standard_args=False,
        port=0,
        startup_timeout_s=1.5,
        stop_timeout_s=2,
    )

    async def go() -> None:
        async with vllm_service("model", cfg, ctx(tmp_path)):
            pass

    t0 = time.monotonic()
    with pytest.raises(ShardError, match="not healthy .* after 1.5 s"):
        asyncio.run(go())
    assert time.monotonic() - t0 < 8
    log = (tmp_path / "logs" / "vllm.log").read_text()
    assert "stopped" in log  # the exit path ran: the server was stopped, not left behind


def test_port_taken_fails_clearly_or_picks_a_free_one(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]

        async def go(cfg: VllmServiceConfig) -> str:
            async with vllm_service("model", cfg, ctx(tmp_path)) as endpoint:
                return endpoint.base_url

        with pytest.raises(ShardError, match=rf"port {port} on 127.0.0.1 is already in use"):
            asyncio.run(go(config(launch_command=SIM_AS_VLLM, port=port)))
        url = asyncio.run(go(config(launch_command=SIM_AS_VLLM, port=port, port_conflict="pick_free", startup_timeout_s=30)))
        assert url.startswith("http://127.0.0.1:") and f":{port}/" not in url


def test_stop_on_exception_inside_the_context(tmp_path: Path) -> None:
    cfg = config(launch_command=SIM_AS_VLLM, port=0, startup_timeout_s=30)
    seen: list[Any] = []

    async def go() -> None:
        async with vllm_service("model", cfg, ctx(tmp_path)) as endpoint:
            seen.append(endpoint)
            raise RuntimeError("the runner failed")

    with pytest.raises(RuntimeError, match="the runner failed"):
        asyncio.run(go())
    assert not alive(seen[0].process.pid)
