"""`json.format`: re-indent JSON text, keeping every number and string exactly as written."""

from __future__ import annotations

from ._reader import Reader


class _Formatter(Reader):
    """Reads like msgspec (same errors) and writes each token back with the requested layout."""

    def __init__(self, buf: bytes, indent: int) -> None:
        super().__init__(buf)
        self.indent = indent
        self.out: list[bytes] = []

    def separator(self, depth: int, first: bool) -> bytes:
        """What goes before an item: a newline and indentation, or `, ` / `,` on one line."""
        if self.indent > 0:
            return (b"\n" if first else b",\n") + b" " * (self.indent * depth)
        if first:
            return b""
        return b", " if self.indent == 0 else b","

    def closing(self, depth: int, bracket: bytes) -> bytes:
        return (b"\n" + b" " * (self.indent * depth) + bracket) if self.indent > 0 else bracket

    def emit(self, depth: int) -> None:
        out, buf = self.out, self.buf
        c = self.peek()
        start = self.pos
        if c == 0x22:
            self.string(skip=True)
            out.append(buf[start : self.pos])
        elif c == 0x7B:
            self.pos += 1
            out.append(b"{")
            empty = True
            for key_start, _ in self.members(skip=True):
                out.append(self.separator(depth + 1, empty))
                out.append(buf[key_start : self.pos])
                self.colon()
                out.append(b":" if self.indent < 0 else b": ")
                empty = False
                self.emit(depth + 1)
            out.append(b"}" if empty else self.closing(depth, b"}"))
        elif c == 0x5B:
            self.pos += 1
            out.append(b"[")
            empty = True
            for _ in self.items():
                out.append(self.separator(depth + 1, empty))
                empty = False
                self.emit(depth + 1)
            out.append(b"]" if empty else self.closing(depth, b"]"))
        else:
            self.skip_scalar(c)
            out.append(buf[start : self.pos])


def format_json(buf: bytes, indent: int) -> bytes:
    formatter = _Formatter(buf, indent)
    formatter.emit(0)
    formatter.trailing()
    return b"".join(formatter.out)
