"""The `type: sim` service section: the simulator's behaviour keys plus how long to wait for it."""

from __future__ import annotations

import json
import shlex
from typing import Annotated, Any, Literal

import msgspec

from shardeval.api.plugin import Count, NonNegativeFloat, NonNegativeInt, NonNegativeSeconds, Probability, Seconds
from shardeval.api.service import ServiceConfig
from shardeval_sim.settings import BEHAVIOUR_KEYS, SIM_DEFAULTS as D, SimSettings, bench_names

# Knobs passed only when they differ from the default, so the command line of a sim that does not
# judge is what it was, and a node with an older shardeval still starts it.
ONLY_WHEN_SET = ("judge_quality", "judge_garbage", "reasoning_form", "reasoning_tokens", "usage_reasoning_tokens", "vary_unseeded")
# The keys of reasoning mode that change what the simulated model says (usage_reasoning_tokens
# changes only what usage reports, as fault knobs change only how a reply arrives).
REASONING_IDENTITY = ("reasoning_form", "reasoning_tokens", "reasoning_tokens_tail")


class ScriptedToolCall(msgspec.Struct, forbid_unknown_fields=True):
    """One call of a `tool_calls` script: the tool's name and its arguments (an object)."""

    name: Annotated[str, msgspec.Meta(min_length=1)]
    arguments: dict[str, Any] = {}


class SimServiceConfig(ServiceConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """Keys mirror `shardeval sim` flags (`ttft_ms` is `--ttft-ms`); the service picks the port."""

    model: str = D.model
    bench: str | Annotated[list[str], msgspec.Meta(min_length=1)] | None = None  # one benchmark, or several
    bench_params: dict[str, Any] = {}
    accuracy: Probability = D.accuracy
    ttft_ms: NonNegativeFloat = D.ttft_ms
    itl_ms: NonNegativeFloat = D.itl_ms
    output_tokens: Count = D.output_tokens
    output_tokens_tail: Annotated[float, msgspec.Meta(gt=0)] | None = D.output_tokens_tail
    fail_429: Probability = D.fail_429
    retry_after: NonNegativeSeconds = D.retry_after
    fail_5xx: Probability = D.fail_5xx
    fail_5xx_statuses: str = D.fail_5xx_statuses
    reset: Probability = D.reset
    stall: Probability = D.stall
    stall_s: NonNegativeSeconds = D.stall_s
    error_200: Probability = D.error_200
    truncate_json: Probability = D.truncate_json
    max_inflight: NonNegativeInt = D.max_inflight  # 0: no limit
    seed: int = D.seed
    root: str | None = D.root  # what /v1/models reports as the loaded weights (default: model)
    max_model_len: Count = D.max_model_len
    judge_quality: Probability = D.judge_quality  # judge mode: probability of the right verdict
    judge_garbage: Probability = D.judge_garbage  # judge replies with no verdict (a fault: not identity)
    tool_calls: list[ScriptedToolCall] | None = None  # answers to requests offering tools (None: the default script)
    # A reasoning model (docs/reasoning.md). Named reasoning_form, not reasoning: every service's
    # `reasoning` section is what requests ask of the model (ServiceConfig.reasoning).
    reasoning_form: Literal["none", "field", "reasoning_content", "inline"] = "none"
    reasoning_tokens: Count = D.reasoning_tokens
    reasoning_tokens_tail: Annotated[float, msgspec.Meta(gt=0)] | None = D.reasoning_tokens_tail
    usage_reasoning_tokens: bool = D.usage_reasoning_tokens
    vary_unseeded: bool = D.vary_unseeded  # a request without a seed is drawn afresh each time it is asked
    log_requests: str | None = None  # a JSONL file of every request body (for tests; not identity)
    weights_log: str | None = None  # read `root` at start-up, append its files' digests here (for tests; not identity)
    # limit_mm_per_prompt and allowed_local_media_path are ServiceConfig's (every service declares
    # them); the sim is started with them and refuses images as vLLM would. They change no answer,
    # only which requests are refused, so they are not part of the identity.
    startup_timeout_s: Seconds = 60.0

    def identity(self) -> dict[str, Any]:
        """What the simulated "model" answers depends on; latency and fault knobs change no answer.
        `root` is left out on purpose: like a vLLM's weights behind an `api` service, it is checked
        from what the server reports, not from the config.
        `output_tokens_tail` changes the replies' words (and completion_tokens) as `output_tokens`
        does; it counts only when set, so runs from before it existed keep their identity, and so
        does `judge_quality` (the verdicts of judge mode) when it is not the default, and
        `tool_calls` (what an agent is made to run) when it is set. A reasoning model's keys
        (REASONING_IDENTITY) count when `reasoning_form` is not "none", each when not its default."""
        keys = ("model", "bench", "bench_params", "accuracy", "output_tokens", "seed")
        tail = {} if self.output_tokens_tail is None else {"output_tokens_tail": self.output_tokens_tail}
        judge = {} if self.judge_quality == D.judge_quality else {"judge_quality": self.judge_quality}
        tools = {} if self.tool_calls is None else {"tool_calls": msgspec.to_builtins(self.tool_calls)}
        vary = {"vary_unseeded": True} if self.vary_unseeded else {}
        think = (
            {}
            if self.reasoning_form == D.reasoning_form
            else {key: getattr(self, key) for key in REASONING_IDENTITY if getattr(self, key) != getattr(D, key)}
        )
        return {**{key: getattr(self, key) for key in keys}, **tail, **judge, **tools, **think, **vary}

    def check(self) -> None:
        """The checks `shardeval sim` makes of its flags (shardeval_sim.command.check_settings),
        made of these keys when the config is read, before any shard starts the simulator."""
        from shardeval_sim.command import check_settings

        keys = {key: getattr(self, key) for key in BEHAVIOUR_KEYS}
        check_settings(SimSettings(**keys | {"tool_calls": msgspec.to_builtins(self.tool_calls)}), lambda key: key)

    def served_model(self) -> str:
        return self.model

    def managed(self) -> bool:
        return True

    def launch_line(self, command: list[str]) -> str:
        """The `shardeval sim` command line, run as `command` on the node."""
        from shardeval.api.service import redact

        return shlex.join(redact(sim_argv(self, command)))


def sim_argv(config: SimServiceConfig, command: list[str] | None = None) -> list[str]:
    """The `shardeval sim` command line that realises a service config (always port 0), run as
    `command` (default: this process's own command)."""
    from shardeval.api.service import self_command  # process plumbing, loaded when a sim is launched, not at registration

    argv = [*(command or self_command()), "sim", "--host", "127.0.0.1", "--port", "0"]
    for key in BEHAVIOUR_KEYS:
        value = getattr(config, key)
        if key == "bench":
            for name in bench_names(value):
                argv += ["--bench", name]
        elif key == "bench_params":
            for k, v in sorted(value.items()):
                argv += ["--bench-param", f"{k}={json.dumps(v)}"]  # JSON is YAML: the type survives
        elif key == "tool_calls":
            if value is not None:
                argv += ["--tool-calls", json.dumps(msgspec.to_builtins(value))]
        elif key == "limit_mm_per_prompt":
            if value is not None:
                argv += ["--limit-mm-per-prompt", json.dumps(value, sort_keys=True, separators=(",", ":"))]
        elif key == "usage_reasoning_tokens":
            if not value:
                argv += ["--no-usage-reasoning-tokens"]
        elif key == "vary_unseeded":
            if value:
                argv += ["--vary-unseeded"]
        elif value is not None and not (key in ONLY_WHEN_SET and value == getattr(D, key)):
            argv += ["--" + key.replace("_", "-"), str(value)]
    return argv
