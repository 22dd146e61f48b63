"""The `type: vllm` service section.

The command line is `launch_command` + the model + the standard flags + `extra_args`:

    vllm serve MODEL --served-model-name NAME --host HOST --port PORT --tensor-parallel-size N ...

- `launch_command` defaults to `["vllm", "serve"]`. The model is appended to it, unless a token
  contains `{model}`, which is then replaced instead. So the CPU recipe
  `["python", "-m", "vllm.entrypoints.openai.api_server", "--model"]` works as written.
- `{model}`, `{served_model_name}`, `{host}`, `{port}` and `{tensor_parallel_size}` are replaced in
  `launch_command` and `extra_args`; with `standard_args: false` nothing is appended, so a
  different server can be launched with a fully written-out command.
- `port_conflict`: when `port` is taken before launch, `fail` (default, with a clear message) or
  `pick_free`; `port: 0` always picks a free port.
- `revision`, `dtype`, `quantization`, `max_model_len`, `pipeline_parallel_size` and
  `generation_config` are vLLM's flags of the same names, passed only when set (the same flags in
  `extra_args` work as before).
- Images (docs/images.md): `limit_mm_per_prompt` (`{image: 4}`, or `{image: {count: 4, width: 512,
  height: 512}}`) and `allowed_local_media_path` (a directory vLLM may read `file://` images
  under), both declared for every service, and `mm_processor_kwargs` (the model's HF image
  processor overrides), this service's own, become
  `--limit-mm-per-prompt`, `--mm-processor-kwargs` (both canonical JSON, the form vLLM 0.32 parses)
  and `--allowed-local-media-path`, when set. A text-only model ignores all three.
- Reasoning models (docs/reasoning.md): `reasoning_parser` becomes `--reasoning-parser` (vLLM then
  sends the thinking in the reply's `reasoning` field) and `chat_template` `--chat-template` (a
  file on the node, or a template in one line), each when set. vLLM 0.32 takes every
  `generation.reasoning` key per request (`chat_template_kwargs.enable_thinking`,
  `reasoning_effort`, `thinking_token_budget`), but it answers a request carrying
  `thinking_token_budget` 400 unless it was started with a reasoning parser (or
  `--reasoning-config`): `reasoning_request` refuses `budget_tokens` at config load for a server
  started without one.

`identity()` lists what changes the model's answers; those keys are part of the run's identity,
so a resume or a merge across a change of any of them is refused.
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Annotated, Any, Literal

import msgspec

from shardeval.api.plugin import Count, NonNegativeSeconds, Seconds, UsageError
from shardeval.api.service import ReasoningConfig, ServiceConfig

DEFAULT_LAUNCH_COMMAND = ("vllm", "serve")


class VllmServiceConfig(ServiceConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    model: str
    served_model_name: str | None = None  # default: `model`
    host: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8000  # 0: pick a free port
    port_conflict: Literal["fail", "pick_free"] = "fail"
    tensor_parallel_size: Count = 1
    pipeline_parallel_size: Count | None = None
    revision: str | None = None  # a Hugging Face repo's branch, tag or commit
    dtype: str | None = None
    quantization: str | None = None
    max_model_len: Count | None = None
    generation_config: str | None = None  # `auto` (the model's generation_config.json), `vllm`, or a folder
    # HF processor overrides for the model's images (`{num_crops: 4}`, `{max_pixels: 1003520}`): they
    # change how an image is tokenised, so they change answers.
    mm_processor_kwargs: dict[str, Any] | None = None
    # Reasoning models: vLLM's --reasoning-parser (deepseek_r1, qwen3, olmo3, openai_gptoss, ...),
    # which moves the thinking into the reply's `reasoning` field, and --chat-template (a file on
    # the node, or a template in one line) in place of the model's own.
    reasoning_parser: str | None = None
    chat_template: str | None = None
    node_pool: str | None = None  # which node pool runs it; read by orchestrators
    extra_args: list[str] = []
    env: dict[str, str] = {}
    launch_command: list[str] | None = None
    standard_args: bool = True
    health_path: str = "/health"
    startup_timeout_s: Seconds = 1800.0
    stop_timeout_s: NonNegativeSeconds = 30.0

    def check(self) -> None:
        """When the config is read (ServiceConfig.check); the media folder is the node's, checked
        when the server starts (check_media_path)."""
        if not self.launch_command and self.launch_command is not None:
            raise UsageError("launch_command: must not be empty (default: vllm serve)")

    def served_model(self) -> str:
        return self.served_model_name or self.model

    def managed(self) -> bool:
        return True

    def launch_line(self, command: list[str]) -> str:
        """The `vllm serve` command line as the shard runs it, secrets redacted."""
        from shardeval.api.service import redact

        where = " (port 0: a free port picked on the node)" if self.port == 0 else ""
        return shlex.join(redact(vllm_argv(self, self.port))) + where

    def identity(self) -> dict[str, Any]:
        """The weights (path or repo id and revision), the name they are served under, every
        engine setting that changes outputs (precision, quantization, parallelism, context length,
        the generation defaults vLLM applies) and the extra engine args. With `standard_args:
        false` the whole launch command is the engine's command line, so it counts too."""
        keys = (
            "model",
            "served_model_name",
            "revision",
            "dtype",
            "quantization",
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "max_model_len",
            "generation_config",
            "extra_args",
        )
        identity = {key: getattr(self, key) for key in keys} | {"served_model_name": self.served_model()}
        # Only when set, so a config written before images (and reasoning parsers) keeps its hash.
        identity |= {key: value for key in (*_IMAGE_KEYS, *_REASONING_KEYS) if (value := getattr(self, key)) is not None}
        if not self.standard_args:
            identity["launch_command"] = self.launch_command
        return identity

    def reasoning_request(self, reasoning: ReasoningConfig) -> dict[str, Any]:
        """vLLM's dialect (ServiceConfig.reasoning_request), less `budget_tokens` on a server started
        without a reasoning parser: vLLM 0.32 answers every request carrying `thinking_token_budget`
        400 there ("reasoning_config is not configured"), so it is one line at config load instead."""
        if reasoning.budget_tokens is not None and not self.parses_reasoning():
            raise UsageError(
                f"reasoning.budget_tokens is {reasoning.budget_tokens}, which vLLM takes only from a server started with "
                "a reasoning parser; set reasoning_parser on the service (or --reasoning-config in extra_args), "
                "or leave reasoning.budget_tokens out"
            )
        return super().reasoning_request(reasoning)

    def parses_reasoning(self) -> bool:
        """The server is started with a reasoning parser or config: the key (appended with the
        standard args), or the flag written in extra_args or the launch command."""
        if self.reasoning_parser and self.standard_args:
            return True
        flags = ("--reasoning-parser", "--reasoning-config")
        return any(
            arg in flags or arg.startswith(tuple(f + "=" for f in flags)) for arg in (*(self.launch_command or ()), *self.extra_args)
        )

    def gpus(self) -> int:
        """One GPU per tensor- and pipeline-parallel rank."""
        return self.tensor_parallel_size * (self.pipeline_parallel_size or 1)

    def port_override(self) -> dict[str, Any] | None:
        """`port: 0` picks a free port when the server starts (see ServiceConfig.port_override)."""
        return {"port": 0} if self.port != 0 else None


_IMAGE_KEYS = ("limit_mm_per_prompt", "mm_processor_kwargs", "allowed_local_media_path")
_REASONING_KEYS = ("reasoning_parser", "chat_template")


def canonical_json(value: Any) -> str:
    """One spelling per value (sorted keys, no spaces), so the command line, and the log that
    quotes it, is the same for the same config."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def check_media_path(name: str, config: VllmServiceConfig) -> None:
    """`allowed_local_media_path` names a directory on this node, where vLLM reads `file://` images:
    on one that is not, vLLM starts (after minutes, on a big model) and then fails every image request."""
    path = config.allowed_local_media_path
    if path is None:
        return
    if not os.path.isdir(path):
        what = "does not exist" if not os.path.lexists(path) else "is not a directory"
        raise UsageError(
            f"services.{name}.allowed_local_media_path: {path} {what} on this node; "
            "name the directory that holds the images (or leave the key out to send them inline)"
        )


def vllm_argv(config: VllmServiceConfig, port: int) -> list[str]:
    """The full server command line for `config` listening on `port` (see the module doc for the rules)."""
    values = {
        "{model}": config.model,
        "{served_model_name}": config.served_model(),
        "{host}": config.host,
        "{port}": str(port),
        "{tensor_parallel_size}": str(config.tensor_parallel_size),
    }

    def fill(arg: str) -> str:
        for placeholder, value in values.items():
            arg = arg.replace(placeholder, value)
        return arg

    launch = list(config.launch_command or DEFAULT_LAUNCH_COMMAND)
    argv = [fill(a) for a in launch]
    if not any("{model}" in a for a in launch):
        argv.append(config.model)
    if config.standard_args:
        argv += [
            "--served-model-name", config.served_model(),
            "--host", config.host,
            "--port", str(port),
            "--tensor-parallel-size", str(config.tensor_parallel_size),
        ]  # fmt: skip
        for key in ("revision", "dtype", "quantization", "max_model_len", "pipeline_parallel_size", "generation_config", *_REASONING_KEYS):
            if (value := getattr(config, key)) is not None:
                argv += [f"--{key.replace('_', '-')}", str(value)]
        for key in _IMAGE_KEYS:
            if (value := getattr(config, key)) is not None:
                argv += [f"--{key.replace('_', '-')}", value if isinstance(value, str) else canonical_json(value)]
    argv += [fill(a) for a in config.extra_args]
    return argv
