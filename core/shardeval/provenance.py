"""What a shard records about where it ran and what answered it: provenance and served identity.

Provenance (versions, build, Python, host, plugins) is for people reading a report; the served
identity (the weights and context length the endpoint reports) is also enforced: a resume or a
merge across different served weights is refused (shardeval.resume, shardeval.discover).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import socket
import sys
from typing import Any

from shardeval import __version__
from shardeval.records import Provenance, ServedModel

log = logging.getLogger("shardeval")

BUILD_ID_ENV = "SHARDEVAL_BUILD_ID"  # set by the one-file app's entry (shims/zipapp/entry.py)


def collect_provenance() -> Provenance:
    from shardeval import app, plugins

    return Provenance(
        shardeval=__version__,
        build_id=os.environ.get(BUILD_ID_ENV) if app.zipapp_path() else None,
        python=f"{platform.python_implementation()} {platform.python_version()}",
        platform=f"{sys.platform}-{platform.machine()}",
        host=socket.gethostname(),
        plugins={p.name: f"{p.dist or p.module} {p.version or '?'}" for p in plugins.load().loaded},
    )


async def read_served(client: Any, base_url: str, model: str) -> ServedModel:
    """Ask the endpoint what it serves: `/v1/models` (vLLM reports `root`, the weights it loaded,
    and `max_model_len`) and `/version` where it exists. Never fatal: a server without these
    routes is recorded as unknown, and requests go on (they record their own errors)."""
    served = ServedModel(model=model)
    base = base_url.rstrip("/")
    try:
        listing = await client.get_json(base + "/models")
        entries = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(entries, list):
            raise ValueError("no `data` list in the reply")
        entry = next((e for e in entries if isinstance(e, dict) and e.get("id") == model), None)
        if entry is None:
            ids = ", ".join(str(e.get("id")) for e in entries if isinstance(e, dict))[:200] or "none"
            raise ValueError(f"it lists no model {model!r} (it serves: {ids})")
        served.root = _text(entry.get("root"))
        length = entry.get("max_model_len")
        served.max_model_len = length if isinstance(length, int) and not isinstance(length, bool) else None
        served.owned_by = _text(entry.get("owned_by"))
    except ValueError as exc:
        served.error = f"/v1/models: {exc}"
        log.warning("cannot read what %s serves (%s); its served identity is not recorded", base_url, served.error)
    with contextlib.suppress(ValueError):  # not every server has /version
        version = await client.get_json(base.removesuffix("/v1") + "/version", timeout_s=5.0)
        served.server_version = _text(version.get("version")) if isinstance(version, dict) else None
    return served


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
