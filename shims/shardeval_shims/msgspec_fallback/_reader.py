"""Reading JSON bytes token by token, failing exactly where and how msgspec does.

msgspec reports a syntax error with its own words and the byte offset it had reached, and it
checks values it only skips (unknown fields, everything `format` reads) with a second set of
routines whose messages and offsets differ slightly; `skip=True` selects those. The typed
decoder (`_scan`) and `json.format` (`_format`) both read through this class.
"""

from __future__ import annotations

import re
from typing import Iterator

from ._errors import malformed, out_of_range, truncated

_WS = (0x20, 0x0A, 0x0D, 0x09)
_STRING_STOP = re.compile(rb'["\\\x00-\x1f]')
_SIMPLE_ESCAPES = {
    ord('"'): b'"', ord("\\"): b"\\", ord("/"): b"/", ord("b"): b"\b",
    ord("f"): b"\f", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t",
}
_HEX = {c: int(chr(c), 16) for c in b"0123456789abcdefABCDEF"}
_DIGITS = frozenset(b"0123456789")
INF = float("inf")


class Reader:
    """A position in a UTF-8 JSON document, with msgspec's error for each way it can be wrong."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)

    # --- tokens --------------------------------------------------------------------------------

    def fail(self, what: str) -> None:
        raise malformed(what, self.pos)

    def peek(self) -> int:
        """The next non-whitespace byte (not consumed); the end of input is "truncated"."""
        buf, pos, end = self.buf, self.pos, self.end
        while pos < end:
            c = buf[pos]
            if c not in _WS:
                self.pos = pos
                return c
            pos += 1
        self.pos = pos
        raise truncated()

    def trailing(self) -> None:
        buf, pos, end = self.buf, self.pos, self.end
        while pos < end:
            c = buf[pos]
            pos += 1
            if c not in _WS:
                self.pos = pos
                self.fail("trailing characters")
        self.pos = pos

    def literal(self, rest: bytes, skip: bool = False) -> None:
        """`true`/`false`/`null` from its first byte on; the rest is compared all at once."""
        pos = self.pos + 1
        if self.end - pos < len(rest):
            self.pos = pos
            raise truncated()
        if self.buf[pos : pos + len(rest)] != rest:
            self.pos = pos if skip else pos + len(rest)
            self.fail("invalid character")
        self.pos = pos + len(rest)

    def string(self, skip: bool = False) -> bytes:
        """The content of the string at `pos` with escapes resolved (still UTF-8 bytes)."""
        buf, end = self.buf, self.end
        pos = start = self.pos + 1
        chunks: list[bytes] | None = None
        while True:
            match = _STRING_STOP.search(buf, pos)
            if match is None:
                self.pos = end
                raise truncated()
            i = match.start()
            c = buf[i]
            if c == 0x22:
                self.pos = i + 1
                if chunks is None:
                    return buf[start:i]
                chunks.append(buf[pos:i])
                return b"".join(chunks)
            if c == 0x5C:
                if chunks is None:
                    chunks = []
                chunks.append(buf[pos:i])
                self.pos = i + 1
                chunks.append(self.escape(skip))
                pos = self.pos
                continue
            self.pos = i
            self.fail("invalid character")

    def escape(self, skip: bool = False) -> bytes:
        if self.pos >= self.end:
            raise truncated()
        c = self.buf[self.pos]
        simple = _SIMPLE_ESCAPES.get(c)
        if simple is not None:
            self.pos += 1
            return simple
        if c != 0x75:  # u
            if skip:
                self.fail("invalid escaped character")
            self.pos += 1
            self.fail("invalid escape character in string")
        self.pos += 1
        cp = self.hex4()
        if 0xDC00 <= cp <= 0xDFFF:
            self.fail("invalid utf-16 surrogate pair")
        if 0xD800 <= cp <= 0xDBFF:
            if self.end - self.pos < 6:
                raise truncated()
            if self.buf[self.pos] != 0x5C or self.buf[self.pos + 1] != 0x75:
                self.fail("unexpected end of hex escape" if skip else "unexpected end of escaped utf-16 surrogate pair")
            self.pos += 2
            low = self.hex4()
            if not 0xDC00 <= low <= 0xDFFF:
                self.fail("invalid utf-16 surrogate pair")
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
        return chr(cp).encode("utf-8")

    def hex4(self) -> int:
        if self.end - self.pos < 4:
            raise truncated()
        cp = 0
        for _ in range(4):
            digit = _HEX.get(self.buf[self.pos])
            self.pos += 1
            if digit is None:
                self.fail("invalid character in unicode escape")
            cp = cp * 16 + digit  # type: ignore[operator]
        return cp

    def number(self, skip: bool = False) -> tuple[int, int, bool]:
        """(start, end, is_float) of the number at `pos`, validated."""
        buf, end = self.buf, self.end
        start = pos = self.pos
        if buf[pos] == 0x2D:  # -
            pos += 1
        if pos == end:
            self.pos = pos
            self.fail("invalid character" if skip else "invalid number")
        c = buf[pos]
        if c == 0x30:  # 0
            pos += 1
            if pos < end and buf[pos] in _DIGITS:
                self.pos = pos
                self.fail("invalid number")
        elif c in _DIGITS:
            while pos < end and buf[pos] in _DIGITS:
                pos += 1
        else:
            self.pos = pos
            self.fail("invalid character")
        is_float = False
        if pos < end and buf[pos] == 0x2E:  # .
            is_float = True
            pos = self._digit_run(pos + 1)
        if pos < end and buf[pos] in (0x65, 0x45):  # e E
            is_float = True
            pos += 1
            if pos < end and buf[pos] in (0x2B, 0x2D):
                pos += 1
            pos = self._digit_run(pos)
        self.pos = pos
        return start, pos, is_float

    def _digit_run(self, pos: int) -> int:
        """The end of the digits starting at `pos`; at least one is required."""
        buf, end, digits = self.buf, self.end, pos
        while pos < end and buf[pos] in _DIGITS:
            pos += 1
        if pos == digits:
            self.pos = pos
            self.fail("invalid number")
        return pos

    def number_value(self) -> int | float:
        start, end, is_float = self.number()
        text = self.buf[start:end]
        if not is_float:
            return int(text)
        value = float(text)
        if value == INF or value == -INF:
            raise out_of_range()
        return value

    # --- containers ----------------------------------------------------------------------------

    def items(self) -> Iterator[None]:
        """After `[`: yields once per element, positioned at it."""
        first = True
        while True:
            c = self.peek()
            if c == 0x5D:  # ]
                self.pos += 1
                return
            if c == 0x2C and not first:  # ,
                self.pos += 1
                c = self.peek()
            elif first:
                first = False
            else:
                self.fail("expected ',' or ']'")
            if c == 0x5D:
                self.fail("trailing comma in array")
            yield

    def members(self, skip: bool = False) -> Iterator[tuple[int, bytes]]:
        """After `{`: yields (start offset, content) of each key; the caller reads `:` and the value."""
        first = True
        while True:
            c = self.peek()
            if c == 0x7D:  # }
                self.pos += 1
                return
            if c == 0x2C and not first:
                self.pos += 1
                c = self.peek()
            elif first:
                first = False
            else:
                self.fail("expected ',' or '}'")
            if c == 0x22:
                start = self.pos
                yield start, self.string(skip)
            elif c == 0x7D:
                self.fail("trailing comma in object")
            else:
                self.fail("expected '\"'" if skip else "object keys must be strings")

    def colon(self) -> None:
        if self.peek() != 0x3A:
            self.fail("expected ':'")
        self.pos += 1

    def skip(self) -> None:
        """Validate one value without building it (an ignored field)."""
        c = self.peek()
        if c == 0x22:
            self.string(skip=True)
        elif c == 0x7B:
            self.pos += 1
            for _ in self.members(skip=True):
                self.colon()
                self.skip()
        elif c == 0x5B:
            self.pos += 1
            for _ in self.items():
                self.skip()
        else:
            self.skip_scalar(c)

    def skip_scalar(self, c: int) -> None:
        """Validate the true/false/null/number starting with byte `c` (shared with the formatter)."""
        if c == 0x74:
            self.literal(b"rue", skip=True)
        elif c == 0x66:
            self.literal(b"alse", skip=True)
        elif c == 0x6E:
            self.literal(b"ull", skip=True)
        else:
            self.number(skip=True)
