"""Decoding a benchmark's `params` (or a BYO mapping file) into a msgspec Struct, with the config's errors.

Reuses the config loader's explanation of msgspec errors, so a wrong key reads like one in the
main config: one line naming the key and the closest valid one.
"""

from __future__ import annotations

from typing import Any, TypeVar
from collections.abc import Mapping

import msgspec

from shardeval.errors import UsageError
from shardeval.explain import Where, decode  # the config loader's error wording, shared on purpose

T = TypeVar("T", bound=msgspec.Struct)


class ParamsStruct(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """Base for params Structs: unknown keys are errors, as in the main config."""


class DataParams(ParamsStruct):
    """Where a benchmark's rows are (see `open_from_params`); subclass it to add your own params."""

    path: str | None = None
    url: str | None = None
    hf: str | None = None
    sha256: str | None = None
    format: str | None = None


def decode_params(data: Mapping[str, Any] | Any, type_: type[T], *, source: str, prefix: str = "params") -> T:
    """`data` as `type_`; a mistake is a UsageError like `SOURCE: unknown key 'params.shot'; did you mean 'shots'?`."""
    if not isinstance(data, Mapping):
        raise UsageError(f"{source}: {prefix or 'the mapping'} must be a mapping of keys to values, not {type(data).__name__}")
    return decode(dict(data), type_, Where(source=source), [prefix] if prefix else [])
