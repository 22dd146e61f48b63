"""The model Inspect asks: its OpenAI-compatible provider (`openai-api`) pointed at the service.

One place makes it, for a shard's solver, the merge's log header and the preflight that checks it
can be made at all (Inspect leaves the `openai` package it needs optional).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from shardeval.api.plugin import UsageError

if TYPE_CHECKING:
    from inspect_ai.model import GenerateConfig, Model

PROVIDER = "openai-api/shardeval"  # Inspect's OpenAI-compatible provider; `shardeval` names the service
SOURCE = "benchmark inspect"


def inspect_model(served: str, base_url: str, api_key: str, config: GenerateConfig | None = None) -> Model:
    """Inspect's OpenAI-compatible model for `served` at `base_url` (a key it never writes to its log)."""
    from inspect_ai.model import GenerateConfig, get_model

    return get_model(f"{PROVIDER}/{served}", base_url=base_url, api_key=api_key or "none", config=config or GenerateConfig(), memoize=False)


def check_provider() -> None:
    """Inspect's OpenAI-compatible provider, made as a shard makes it, before any request: it needs
    the `openai` package, an optional dependency of Inspect's. Without it every sample ended an
    `internal` error quoting Inspect's rich markup, exit 3; now one line naming the extra, exit 2."""
    try:
        inspect_model("preflight", "http://127.0.0.1:9/v1", "")  # made, never asked
    except Exception as exc:
        said = " ".join(re.sub(r"\[/?[a-z]+\]", "", str(exc)).split())
        if "requires" in said or isinstance(exc, ImportError):
            raise UsageError(
                f"{SOURCE}: Inspect's OpenAI-compatible provider cannot be made here: {said} (pip install 'shardeval[inspect]' brings it)"
            ) from None
        raise
