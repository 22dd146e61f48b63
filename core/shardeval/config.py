"""The evaluation config: YAML → msgspec Structs, with ${VAR} expansion and -O overrides.

Top-level sections are fixed here; `services.<name>` and `cluster` are decoded in a second step
with the Struct their plugin registered (a service's or orchestrator's own keys live in its
plugin), so a third-party plugin brings its own validated config section.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Protocol = Literal["chat_completions", "completions"]


class _Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """Base for config sections: unknown keys are errors, defaults stay out of hashes and dumps."""


class Generation(_Section):
    """Sampling parameters sent with every request; `extra` passes server-specific ones through."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None
    extra: dict[str, Any] = {}


class SolverConfig(_Section):
    type: str = "simple"
    service: str = "model"
    system_prompt: str | None = None
    generation: Generation = msgspec.field(default_factory=Generation)


class BenchmarkConfig(_Section):
    name: str
    solver: SolverConfig = msgspec.field(default_factory=SolverConfig)
    repeats: int = 1
    max_problems: int | None = None
    max_concurrent: int = 32
    params: dict[str, Any] = {}


class Timeouts(_Section):
    """Split client timeouts in seconds; `total` is off by default so long reasoning streams survive."""

    connect: float = 30.0
    first_token: float = 600.0
    idle: float = 120.0
    total: float | None = None


class Retries(_Section):
    """Attempts per request (first try included) and full-jitter exponential backoff bounds."""

    attempts: int = 5
    backoff_base: float = 0.5
    backoff_max: float = 30.0


class ServiceConfig(_Section):
    """Keys every service type shares; a service plugin subclasses this with its own keys."""

    type: str
    protocol: Protocol = "chat_completions"
    stream: bool = True
    api_key_env: str | None = None
    timeouts: Timeouts = msgspec.field(default_factory=Timeouts)
    retries: Retries = msgspec.field(default_factory=Retries)


class ClusterConfig(_Section):
    """Keys every orchestrator shares; an orchestrator plugin subclasses this with its own keys."""

    type: str = "local"
    shards: int | None = None


class OutputConfig(_Section):
    dir: str = "./eval_results"
    trajectories: bool = True
    progress_interval_s: float = 30.0
    drain_timeout_s: float = 10.0


class RawConfig(_Section):
    """The file as written: plugin-owned sections still undecoded."""

    services: dict[str, dict[str, Any]] = {}
    benchmarks: list[BenchmarkConfig] = []
    cluster: dict[str, Any] = {}
    output: OutputConfig = msgspec.field(default_factory=OutputConfig)
    seed: int = 0
    shuffle_seed: int | None = None


class Config(msgspec.Struct, kw_only=True):
    """The validated config: every section decoded with its plugin's Struct."""

    services: dict[str, ServiceConfig]
    benchmarks: list[BenchmarkConfig]
    cluster: ClusterConfig
    output: OutputConfig
    seed: int = 0
    shuffle_seed: int | None = None
