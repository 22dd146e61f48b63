"""A stdlib-only stand-in for the subset of msgspec that shardeval and its plugins use.

Installed as `msgspec` by `shardeval.msgspec_compat` only where the compiled msgspec cannot
load. Encoding is byte-identical to msgspec and validation errors use its wording and `$.path`
format; it is several times slower.

Supported: Struct (kw_only, frozen, forbid_unknown_fields, omit_defaults, rename, order, eq,
repr_omit_defaults; gc and friends accepted), field, Meta constraints, json.encode/decode/format,
json.Encoder/Decoder, convert (strict and lax), to_builtins, structs.fields/replace/asdict/
astuple/force_setattr. Decodes into None, bool, int, float, str, bytes, Literal, Enum, unions,
list/tuple/set/frozenset, dict, Any and Structs, with Annotated constraints; encodes those plus
dates, times, durations, UUIDs, decimals and dataclasses. Not supported: msgpack, yaml, toml,
JSON schema, Raw, defstruct, tagged unions, array_like, dec_hook/float_hook/from_attributes, and
decoding into datetime/uuid/decimal types.
"""

from __future__ import annotations

from . import json, structs
from ._builtins import to_builtins
from ._convert import convert
from ._errors import DecodeError, EncodeError, MsgspecError, ValidationError
from ._fields import field
from ._meta import Meta
from ._sentinels import NODEFAULT, UNSET, UnsetType
from ._struct import Struct, StructMeta

__version__ = "0+stdlib.fallback"
FALLBACK = True  # lets callers tell this module from the real msgspec

__all__ = [
    "NODEFAULT", "UNSET", "DecodeError", "EncodeError", "Meta", "MsgspecError", "Struct", "StructMeta",
    "UnsetType", "ValidationError", "convert", "field", "json", "structs", "to_builtins",
]
