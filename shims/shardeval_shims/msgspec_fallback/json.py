"""`msgspec.json`: encode, decode, Encoder, Decoder and format, implemented with the stdlib."""

from __future__ import annotations

from typing import Any, Callable

from . import _decode
from ._encode import Writer, check_order
from ._format import format_json
from ._nodes import Mode, node_for

__all__ = ["Decoder", "Encoder", "decode", "encode", "format"]


def _no_hook(name: str, value: Any) -> None:
    if value is not None:
        raise TypeError(f"`{name}` is not supported by the stdlib msgspec fallback")


class Encoder:
    """A reusable JSON encoder (msgspec.json.Encoder)."""

    def __init__(
        self,
        *,
        enc_hook: Callable[[Any], Any] | None = None,
        decimal_format: str = "string",
        uuid_format: str = "canonical",
        order: Any = None,
    ) -> None:
        if decimal_format != "string" or uuid_format != "canonical":
            raise TypeError("only decimal_format='string' and uuid_format='canonical' are supported by the stdlib fallback")
        self.enc_hook = enc_hook
        self.decimal_format = decimal_format
        self.uuid_format = uuid_format
        self.order = check_order(order)

    def encode(self, obj: Any) -> bytes:
        return Writer(self.enc_hook, self.order).encode(obj)

    def encode_lines(self, items: Any) -> bytes:
        writer = Writer(self.enc_hook, self.order)
        return b"".join(writer.encode(item) + b"\n" for item in items)

    def encode_into(self, obj: Any, buffer: bytearray, offset: int = 0) -> None:
        data = self.encode(obj)
        if offset < 0:
            offset = len(buffer)
        buffer[offset:] = data


class Decoder:
    """A reusable JSON decoder for one type (msgspec.json.Decoder)."""

    def __init__(
        self,
        type: Any = Any,
        *,
        strict: bool = True,
        dec_hook: Callable[[type, Any], Any] | None = None,
        float_hook: Callable[[str], Any] | None = None,
    ) -> None:
        _no_hook("dec_hook", dec_hook)
        _no_hook("float_hook", float_hook)
        self.type = type
        self.strict = strict
        self.dec_hook = dec_hook
        self.float_hook = float_hook
        self._node = node_for(type, Mode(True, strict))

    def __repr__(self) -> str:
        return f"msgspec.json.Decoder({self.type!r})"

    def decode(self, buf: Any) -> Any:
        return _decode.decode(buf, self._node)

    def decode_lines(self, buf: Any) -> list[Any]:
        return _decode.decode_lines(buf, self._node)


def encode(obj: Any, *, enc_hook: Callable[[Any], Any] | None = None, order: Any = None) -> bytes:
    """Serialize an object as JSON bytes, exactly as msgspec would."""
    return Writer(enc_hook, order).encode(obj)


def decode(
    buf: Any,
    *,
    type: Any = Any,
    strict: bool = True,
    dec_hook: Callable[[type, Any], Any] | None = None,
    float_hook: Callable[[str], Any] | None = None,
) -> Any:
    """Deserialize JSON (bytes or str) into `type`, validating like msgspec."""
    _no_hook("dec_hook", dec_hook)
    _no_hook("float_hook", float_hook)
    return _decode.decode(buf, node_for(type, Mode(True, strict)))


def format(buf: Any, *, indent: int = 2) -> Any:
    """Re-indent JSON (str in, str out); numbers and strings keep their text."""
    if isinstance(buf, str):
        return format_json(buf.encode("utf-8"), indent).decode("utf-8")
    return format_json(_decode.as_bytes(buf), indent)
