"""The `type: sim` service section: the simulator's behaviour keys plus how long to wait for it."""

from __future__ import annotations

from typing import Any, ClassVar

from shardeval.config import ServiceConfig
from shardeval_sim.settings import SIM_DEFAULTS as D


class SimServiceConfig(ServiceConfig, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """Keys mirror `shardeval sim` flags (`ttft_ms` is `--ttft-ms`); the service picks the port."""

    # What the simulated "model" answers depends on these; latency and fault knobs change no answer.
    RESULT_KEYS: ClassVar[tuple[str, ...]] = ("model", "bench", "bench_params", "accuracy", "output_tokens", "seed")

    model: str = D.model
    bench: str | None = None
    bench_params: dict[str, Any] = {}
    accuracy: float = D.accuracy
    ttft_ms: float = D.ttft_ms
    itl_ms: float = D.itl_ms
    output_tokens: int = D.output_tokens
    fail_429: float = D.fail_429
    retry_after: float = D.retry_after
    fail_5xx: float = D.fail_5xx
    fail_5xx_statuses: str = D.fail_5xx_statuses
    reset: float = D.reset
    stall: float = D.stall
    stall_s: float = D.stall_s
    error_200: float = D.error_200
    truncate_json: float = D.truncate_json
    max_inflight: int = D.max_inflight
    seed: int = D.seed
    root: str | None = D.root  # what /v1/models reports as the loaded weights (default: model)
    max_model_len: int = D.max_model_len
    startup_timeout_s: float = 60.0

    def identity(self) -> dict[str, Any]:
        """The answer-shaping keys. `root` is left out on purpose: like a vLLM's weights behind an
        `api` service, it is checked from what the server reports, not from the config."""
        return {key: getattr(self, key) for key in self.RESULT_KEYS}
