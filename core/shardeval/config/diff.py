"""What differs between two runs' configs, key by key, in the words a config file uses.

A resume refused for a changed config hash should say what changed
(`benchmarks[0].solver.generation.top_p: unset -> 0.9`), not only that two hashes differ.
`changes` compares any two plain values (nested dicts and lists; a missing key and null both
read `unset`); shardeval.identity.identity_changes applies it to the part of two configs that the
config hash covers, so a changed URL or timeout, which a resume accepts, is never named as the
reason. The configs compared are a manifest's recorded `config` and the new one.
"""

from __future__ import annotations

import json
from typing import Any

UNSET = object()
MAX_SHOWN = 6  # changes named in one line; the rest are counted
MAX_VALUE = 60  # characters of one value shown


def changes(old: Any, new: Any, path: str = "") -> list[str]:
    """Every leaf where `old` and `new` differ, as `path: old -> new`, in key order (dict keys
    sorted, list items by index). A key that is missing or null on one side is `unset` there."""
    old, new = _unset(old), _unset(new)
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            out += changes(old.get(key, UNSET), new.get(key, UNSET), f"{path}.{key}" if path else str(key))
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = []
        for i in range(max(len(old), len(new))):
            out += changes(old[i] if i < len(old) else UNSET, new[i] if i < len(new) else UNSET, f"{path}[{i}]")
        return out
    if old is UNSET and new is UNSET or (old is not UNSET and new is not UNSET and _same(old, new)):
        return []
    return [f"{path or '(the whole config)'}: {_show(old)} -> {_show(new)}"]


def summary(found: list[str]) -> str:
    """The changes for one line: the first MAX_SHOWN, then how many more."""
    shown = "; ".join(found[:MAX_SHOWN])
    return shown + (f"; and {len(found) - MAX_SHOWN} more" if len(found) > MAX_SHOWN else "")


def _unset(value: Any) -> Any:
    return UNSET if value is None else value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def _pruned(value: Any) -> Any:
    """A value as shown: unset (null) keys left out, as a config file leaves them out."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _show(value: Any) -> str:
    if value is UNSET:
        return "unset"
    text = json.dumps(_pruned(value), sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"
