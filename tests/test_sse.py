"""The bytes-level SSE parser: same events whatever the chunk boundaries, per the SSE rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardeval.run.sse import SSEParser


def parse(*chunks: bytes) -> list[bytes]:
    parser = SSEParser()
    events: list[bytes] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    return events


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(data)) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


# A value inside one data line: any text without line breaks, multibyte characters welcome.
line_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
    max_size=30,
) | st.sampled_from(['{"choices":[{"delta":{"content":"caf\u00e9 \u2713 \U0001f600"}}]}', "[DONE]", "", " lead", ":colon"])
event = st.lists(line_text, min_size=1, max_size=3)  # one event: its data lines
eol = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A valid SSE byte stream (random line endings, comments, spacing) and its expected events."""
    out = bytearray()
    expected: list[bytes] = []

    def line(content: bytes) -> None:
        end = draw(eol)
        if end == b"\n" and out.endswith(b"\r") and not content:
            end = b"\r"  # CR then LF would read as one CRLF line end, not two
        out.extend(content + end)

    if draw(st.booleans()):
        out += b"\xef\xbb\xbf"
    for lines in draw(st.lists(event, max_size=8)):
        if draw(st.booleans()):
            line(b": ping")
        if draw(st.booleans()):
            line(b"event: message")
            line(b"id: 7")
        for value in lines:
            raw = value.encode()
            # `data:` without the space only when the value does not itself start with one
            sep = b":" if draw(st.booleans()) and not raw.startswith(b" ") else b": "
            line(b"data" + sep + raw)
        line(b"")
        expected.append("\n".join(lines).encode())
    return bytes(out), expected


@settings(max_examples=400, deadline=None)
@given(streams(), st.lists(st.integers(min_value=0, max_value=2000), max_size=40))
def test_any_chunking_yields_the_same_events(stream: tuple[bytes, list[bytes]], cuts: list[int]) -> None:
    data, expected = stream
    assert parse(data) == expected
    assert parse(*split_at(data, cuts)) == expected


@settings(max_examples=100, deadline=None)
@given(streams())
def test_byte_by_byte(stream: tuple[bytes, list[bytes]]) -> None:
    data, expected = stream
    assert parse(*(data[i : i + 1] for i in range(len(data)))) == expected


def test_vllm_shaped_stream() -> None:
    data = b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n'
    assert parse(data) == [b'{"a":1}', b'{"a":2}', b"[DONE]"]


def test_comment_only_and_empty_feeds() -> None:
    parser = SSEParser()
    assert parser.feed(b"") == []
    assert parser.feed(b": ping\n\n: ping\n\n") == []
    assert not parser.pending


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    assert parse(b"data: a\r", b"\n\r", b"\n") == [b"a"]
    assert parse(b"data: a\r", b"\r") == [b"a"]  # lone CRs are line ends too


def test_multiline_data_joined_with_lf() -> None:
    assert parse(b"data: one\ndata:two\ndata:  three\n\n") == [b"one\ntwo\n three"]


def test_field_without_colon_and_empty_data() -> None:
    assert parse(b"data\n\n") == [b""]
    assert parse(b"data:\n\n") == [b""]
    assert parse(b"retry: 10\nid\n\n") == []  # no data line: nothing dispatched


def test_split_multibyte_utf8_is_reassembled() -> None:
    payload = "data: caf\u00e9 \U0001f600\n\n".encode()
    for i in range(len(payload)):
        assert parse(payload[:i], payload[i:]) == ["caf\u00e9 \U0001f600".encode()]


def test_bom_only_at_start() -> None:
    assert parse(b"\xef\xbb", b"\xbfdata: x\n\n") == [b"x"]
    assert parse(b"data: x\n\n\xef\xbb\xbfdata: y\n\n") == [b"x"]  # later BOM: an unknown field


def test_finish_flushes_complete_lines_and_drops_a_cut_one() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: whole\n") == []
    assert parser.pending
    assert parser.finish() == [b"whole"]
    parser = SSEParser()
    assert parser.feed(b'data: {"cut') == []
    assert parser.pending
    assert parser.finish() == []
    assert not parser.pending


def test_memoryview_and_bytearray_chunks() -> None:
    parser = SSEParser()
    assert parser.feed(memoryview(b"data: a\n")) == []
    assert parser.feed(bytearray(b"\ndata: b\n\n")) == [b"a", b"b"]


def test_tail_stays_small() -> None:
    """Only the unterminated line is kept between feeds, never the stream so far."""
    parser = SSEParser()
    for i in range(1000):
        parser.feed(b'data: {"i":%d}\n\ndata: {"par' % i)
        parser.feed(b'tial":1}\n\n')
        assert len(parser._tail) == 0
