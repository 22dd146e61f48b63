"""Typed JSON decoding in one validating pass over the bytes: msgspec's exact-error path.

The fast path (`_decode`) parses with the stdlib `json` module; when that rejects the input (or
the input holds something it reads differently: lone surrogate escapes, invalid UTF-8, NaN,
numbers out of float range, repeated keys), this decodes it again, validating against the type
as it goes, so the first problem reported is the one msgspec reports, with its byte offset.
"""

from __future__ import annotations

from typing import Any

from ._containers import MISSING, StructPart
from ._errors import Invalid
from ._nodes import TypeNode
from ._reader import Reader


class TypedReader(Reader):
    """Builds the value of a type node from the bytes, container by container."""

    def value(self, node: TypeNode) -> Any:
        c = self.peek()
        if c == 0x22:
            content = self.string()
            if not node.takes_str:
                raise Invalid(f"Expected `{node.desc}`, got `str`")
            return node.conv(content.decode("utf-8"))
        if c == 0x7B:
            self.pos += 1
            return self.object(node)
        if c == 0x5B:
            self.pos += 1
            return self.array(node)
        if c == 0x74:
            self.literal(b"rue")
            return node.conv(True)
        if c == 0x66:
            self.literal(b"alse")
            return node.conv(False)
        if c == 0x6E:
            self.literal(b"ull")
            return node.conv(None)
        return node.conv(self.number_value())

    def object(self, node: TypeNode) -> Any:
        if node.is_any:
            out: dict[Any, Any] = {}
            for _, raw in self.members():
                key = raw.decode("utf-8")
                self.colon()
                try:
                    out[key] = self.value(node)
                except Invalid as exc:
                    exc.path.append("[...]")
                    raise
            return out
        part = node.obj
        if part is None:
            raise Invalid(f"Expected `{node.desc}`, got `object`")
        if isinstance(part, StructPart):
            return self.struct(part)
        result: dict[Any, Any] = {}
        errors = "strict" if part.key_node.takes_str else "surrogateescape"  # an int key is never decoded
        for _, raw in self.members():
            key = part.key(raw.decode("utf-8", errors))
            self.colon()
            try:
                result[key] = self.value(part.value_node)
            except Invalid as exc:
                exc.path.append("[...]")
                raise
        return part.finish(result)

    def struct(self, part: StructPart) -> Any:
        values = [MISSING] * len(part.segs)
        for _, raw in self.members():
            self.colon()
            i = part.lookup.get(raw.decode("utf-8", "surrogateescape"))
            if i is None:
                if part.forbid:
                    part.unknown(raw.decode("utf-8"))
                self.skip()
                continue
            try:
                values[i] = self.value(part.nodes[i])
            except Invalid as exc:
                exc.path.append(part.segs[i])
                raise
        return part.finish(values)

    def array(self, node: TypeNode) -> Any:
        if node.is_any:
            out: list[Any] = []
            for _ in self.items():
                try:
                    out.append(self.value(node))
                except Invalid as exc:
                    exc.path.append(f"[{len(out)}]")
                    raise
            return out
        part = node.arr
        if part is None:
            raise Invalid(f"Expected `{node.desc}`, got `array`")
        items: list[Any] = []
        fixed = part.kind == "fixed"
        for _ in self.items():
            if fixed and len(items) == len(part.items):
                raise Invalid(f"Expected `array` of length {len(part.items)}")
            item = part.items[len(items)] if fixed else part.items[0]
            try:
                items.append(self.value(item))
            except Invalid as exc:
                exc.path.append(f"[{len(items)}]")
                raise
        return part.finish(items)


def decode(buf: bytes, node: TypeNode) -> Any:
    """Decode `buf` as `node` in one validating pass (the exact-error path)."""
    reader = TypedReader(buf)
    try:
        value = reader.value(node)
    except Invalid as exc:
        raise exc.public() from None
    reader.trailing()
    return value
