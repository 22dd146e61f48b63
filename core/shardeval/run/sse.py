"""Incremental Server-Sent Events parser that works on bytes.

Network reads split a stream anywhere: inside a line, inside a CRLF pair, inside a multibyte
UTF-8 character. The parser therefore never decodes text: it splits each chunk on LF in bytes
(one C call), keeps only the unterminated last line between feeds (appended to in place while no
LF arrives, joined once when one does: never a growing buffer re-sliced per chunk), and hands out
each event's `data` payload as bytes, which msgspec decodes straight to Structs.

Follows the WHATWG SSE rules that matter for LLM servers: lines end in LF, CRLF or CR; lines
starting with `:` are comments (llama.cpp's `: ping`); `data:` with or without one leading space;
several `data` lines in one event are joined with LF; a blank line dispatches the event; a leading
UTF-8 BOM is ignored. Other fields (`event`, `id`, `retry`) are ignored: OpenAI-style streams
carry everything in `data`.
"""

from __future__ import annotations

__all__ = ["SSEParser"]

_BOM = b"\xef\xbb\xbf"


class SSEParser:
    """Feed it byte chunks of any size; get back the data payloads of the events they complete."""

    __slots__ = ("_tail", "_lines", "_skip_lf", "_at_start")

    def __init__(self) -> None:
        self._tail = bytearray()  # the unterminated last line, at most one line long
        self._lines: list[bytes] = []  # data lines of the event being built
        self._skip_lf = False  # the previous chunk ended in CR: a LF starting this one is its pair
        self._at_start = True  # no line seen yet: a BOM may still be stripped

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[bytes]:
        """Consume one chunk; return the data of every event a blank line completed in it."""
        if not chunk:
            return []
        if type(chunk) is not bytes:
            chunk = bytes(chunk)
        if self._skip_lf:
            chunk = self._after_cr(chunk)
        if b"\r" in chunk:
            # Rare (LF-only servers are the norm): normalise CRLF and lone CR to LF. A CR at the end
            # may be the first half of a CRLF, so remember to drop a LF starting the next chunk.
            self._skip_lf = chunk[-1] == 13
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        tail = self._tail
        if tail or self._at_start:
            if b"\n" not in chunk:  # still inside the same line: append, nothing to parse yet
                tail += chunk
                return []
            if tail:  # the pending line completes here: join it once
                tail += chunk
                chunk = bytes(tail)
                tail.clear()
            if self._at_start:
                self._at_start = False
                if chunk.startswith(_BOM):
                    chunk = chunk[3:]

        lines = chunk.split(b"\n")
        last = lines.pop()  # unterminated: kept for the next feed
        if last:
            tail += last
        events: list[bytes] = []
        data = self._lines
        for line in lines:
            if not line:  # blank line: dispatch
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
            elif line.startswith(b"data: "):  # the common case first
                data.append(line[6:])
            elif line[:1] != b":" and (value := _other_data(line)) is not None:
                data.append(value)
        return events

    def _after_cr(self, chunk: bytes) -> bytes:
        """The chunk after one that ended in CR: a LF starting it is that CR's pair (a CRLF split
        across chunks), not a blank line. Rare, so off feed's path."""
        self._skip_lf = False
        return chunk[1:] if chunk[0] == 10 else chunk

    def finish(self) -> list[bytes]:
        """End of stream: return an event whose data lines arrived but whose blank line did not.

        Lenient on purpose (the spec discards it): a server that omits the final blank line still
        delivered complete lines. An unterminated last line is dropped, since it may be cut.
        """
        lines, self._lines = self._lines, []
        self._tail.clear()
        self._skip_lf = False
        return [b"\n".join(lines)] if lines else []

    @property
    def pending(self) -> bool:
        """True while an event or line has started but not been completed."""
        return bool(self._lines or self._tail)


def _other_data(line: bytes) -> bytes | None:
    """The data of a line that is not `data: ...`: `data:` without its space, else None (a field
    ignored on purpose: `event`, `id`, `retry`, unknown). Rare, so off feed's path."""
    name, _, value = line.partition(b":")
    if name != b"data":
        return None
    return value[1:] if value[:1] == b" " else value
