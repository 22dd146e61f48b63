"""What the simulator does, as one plain value shared by the CLI, the server and the service.

Stdlib only, so the `sim` command can be registered (and `--help` shown) without loading aiohttp
or msgspec.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class SimSettings:
    """Every knob of `shardeval sim`; a field `foo_bar` is the flag `--foo-bar`."""

    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "sim"
    bench: str | list[str] | None = None  # the benchmark(s) whose answers it knows (a list: several)
    bench_params: dict[str, Any] = field(default_factory=dict)
    accuracy: float = 0.7
    ttft_ms: float = 50.0
    itl_ms: float = 5.0
    output_tokens: int = 32
    output_tokens_tail: float | None = None  # Pareto shape of per-prompt reply lengths (None: fixed)
    fail_429: float = 0.0
    retry_after: float = 1.0
    fail_5xx: float = 0.0
    fail_5xx_statuses: str = "500,503"  # the statuses --fail-5xx cycles through
    reset: float = 0.0
    stall: float = 0.0
    stall_s: float = 30.0
    error_200: float = 0.0
    truncate_json: float = 0.0
    max_inflight: int = 0
    seed: int = 0
    root: str | None = None  # reported by /v1/models as the loaded weights, as vLLM does (None: the model name)
    max_model_len: int = 1 << 20  # reported by /v1/models
    judge_quality: float = 0.8  # a judge prompt's verdict is the right one with this probability, else random
    judge_garbage: float = 0.0  # rate of judge replies with no verdict in them (drawn per attempt)
    # The scripted tool calls answering requests that offer `tools`, [{"name", "arguments"}, ...]
    # (None: the default script, see shardeval_sim.tools).
    tool_calls: list[dict[str, Any]] | None = None
    # Images, as vLLM takes them: at most this many per prompt ({"image": 4}, vLLM's
    # --limit-mm-per-prompt; None: no limit), and the folder file:// images may be read from
    # (vLLM's --allowed-local-media-path; None: file:// URLs are refused).
    limit_mm_per_prompt: dict[str, Any] | None = None
    allowed_local_media_path: str | None = None
    # A reasoning model served by vLLM (shardeval_sim.reasoning): where the thinking goes, one of
    # REASONING_FORMS ("none": a model that does not think, the replies of before), its mean
    # length in tokens, and the Pareto shape of per-prompt lengths (None: fixed).
    reasoning_form: str = "none"
    reasoning_tokens: int = 64
    reasoning_tokens_tail: float | None = None
    usage_reasoning_tokens: bool = True  # usage.completion_tokens_details.reasoning_tokens (false: the client must count)
    # A request without a seed (and temperature not 0) is drawn afresh each time it is asked, as a
    # sampling server without a seed draws (Inspect's epochs ask the same body again); off: it gets
    # the same reply every time.
    vary_unseeded: bool = False
    log_requests: str | None = None  # a JSONL file every request body is appended to as it arrives (for tests)
    # At start-up, read every file under `root` and append one JSON line of their digests to this
    # file (shardeval_sim.weights): which weights each simulator was started on, for tests.
    weights_log: str | None = None

    def fault_rates(self) -> dict[str, float]:
        """Per-attempt probabilities of each fault; they are exclusive, so they must sum to <= 1."""
        return {
            "429": self.fail_429,
            "5xx": self.fail_5xx,
            "reset": self.reset,
            "stall": self.stall,
            "error_200": self.error_200,
            "truncate_json": self.truncate_json,
        }


def bench_names(bench: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """The benchmarks a `bench` setting names: none, one (a string) or several (a list)."""
    return [] if not bench else [bench] if isinstance(bench, str) else list(bench)


REASONING_FORMS = ("none", "field", "reasoning_content", "inline")
SIM_DEFAULTS = SimSettings()
# Behaviour keys a `type: sim` service config shares with the CLI (the service picks host/port).
BEHAVIOUR_KEYS = tuple(f.name for f in fields(SimSettings) if f.name not in ("host", "port"))
