"""What a shard records about where it ran and what answered it: provenance and served identity.

Provenance (versions, build, Python, host, plugins) is for people reading a report; the served
identity (the weights and context length the endpoint reports) is also enforced: a resume or a
merge across different served weights is refused (shardeval.run.resume, shardeval.store.discover).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import socket
import sys
from typing import Any

from shardeval import __version__, app, plugins
from shardeval.errors import UsageError
from shardeval.store.records import Provenance, ServedModel

log = logging.getLogger("shardeval")

BUILD_ID_ENV = "SHARDEVAL_BUILD_ID"  # set by the one-file app's entry (shims/zipapp/entry.py)


def collect_provenance() -> Provenance:
    return Provenance(
        shardeval=__version__,
        build_id=os.environ.get(BUILD_ID_ENV) if app.zipapp_path() else None,
        python=f"{platform.python_implementation()} {platform.python_version()}",
        platform=f"{sys.platform}-{platform.machine()}",
        host=socket.gethostname(),
        plugins={p.name: f"{p.dist or p.module} {p.version or '?'}" for p in plugins.load().loaded},
    )


async def read_served(client: Any, base_url: str, model: str, service: str | None = None) -> ServedModel:
    """Ask the endpoint what it serves: `/v1/models` (vLLM reports `root`, the weights it loaded,
    and `max_model_len`) and `/version` where it exists.

    A server without these routes is recorded as unknown, and requests go on (they record their
    own errors). But when the endpoint answers the question, a model it does not serve is a stop
    before the evaluation's first request, not a run of `client` errors (issue 24): a `/models`
    list without the model whose endpoint also refuses a one-token request naming it (servers such
    as TGI and llama.cpp answer for any model name: they go on), or (the base URL lacking its /v1,
    or under a wrong path) no list at the base URL while `<origin>/v1/models` answers one and the
    URL as given refuses that request, raises UsageError naming what it serves and the fix.
    """
    served = ServedModel(model=model)
    base = base_url.rstrip("/")
    where = f"service {service!r}" if service else "the service"
    entries: list[Any] | None = None
    try:
        entries = _model_list(await client.get_json(base + "/models"))
        if entries is None:
            raise ValueError("no `data` list in the reply")
        entry = next((e for e in entries if isinstance(e, dict) and e.get("id") == model), None)
        if entry is None:
            if entries and await _refuses(client, model):
                raise UsageError(
                    f"{where}: {base_url} does not serve model {model!r}: its /models lists {_ids(entries)}, and a "
                    "one-token request naming it was refused; set the service's `model` (quick mode: --model-id) "
                    "to one of them"
                )
            raise ValueError(f"it lists no model {model!r} (it serves: {_ids(entries)})")
        served.root = _text(entry.get("root"))
        length = entry.get("max_model_len")
        served.max_model_len = length if isinstance(length, int) and not isinstance(length, bool) else None
        served.owned_by = _text(entry.get("owned_by"))
    except ValueError as exc:
        served.error = f"/v1/models: {exc}"
        # no list here, one at <origin>/v1, and the URL as given refuses a request: the URL is wrong
        if entries is None and (better := await _openai_base(client, base)) is not None and await _refuses(client, model):
            url, entries = better
            serves = f"it serves {_ids(entries)}" + (
                "" if any(isinstance(e, dict) and e.get("id") == model for e in entries) else f", not {model!r}"
            )
            raise UsageError(
                f"{where}: {base_url} is not an OpenAI-compatible base URL ({base}/models: {exc}), but {url}/models "
                f"answers ({serves}); set the service's url (quick mode: --model-url) to {url}"
            ) from None
        log.warning("cannot read what %s serves (%s); its served identity is not recorded", base_url, served.error)
    with contextlib.suppress(ValueError):  # not every server has /version
        version = await client.get_json(base.removesuffix("/v1") + "/version", timeout_s=5.0)
        served.server_version = _text(version.get("version")) if isinstance(version, dict) else None
    return served


async def _refuses(client: Any, model: str) -> bool:
    """Whether the endpoint refuses (a 4xx: `client`) one request naming `model`, one token long.
    Any other outcome (an answer, a 5xx, no connection) is left to the run to meet and record."""
    chat = client.endpoint.protocol == "chat_completions"
    turns = {"messages": [{"role": "user", "content": "Say OK."}]} if chat else {"prompt": "Say OK."}
    answer = await client.request({"model": model, **turns, "max_tokens": 1, "temperature": 0.0}, stream=False)
    if answer.status == "ok":
        log.warning("the endpoint does not list model %r in /models but answers for it; going on", model)
    return answer.error_kind == "client"


def _model_list(listing: Any) -> list[Any] | None:
    """The `data` list of a /models reply, or None when it is not one."""
    entries = listing.get("data") if isinstance(listing, dict) else None
    return entries if isinstance(entries, list) else None


def _ids(entries: list[Any]) -> str:
    return ", ".join(str(e.get("id")) for e in entries if isinstance(e, dict))[:200] or "no model"


async def _openai_base(client: Any, base: str) -> tuple[str, list[Any]] | None:
    """`<origin>/v1` and its model list when `base` is not it but that answers /models with a
    list (a URL without /v1, or under a wrong path prefix); else None."""
    from urllib.parse import urlsplit

    parts = urlsplit(base)
    origin = f"{parts.scheme}://{parts.netloc}"
    if not parts.scheme or not parts.netloc or base == origin + "/v1":
        return None
    try:
        entries = _model_list(await client.get_json(origin + "/v1/models"))
    except ValueError:
        return None
    return (origin + "/v1", entries) if entries is not None else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
