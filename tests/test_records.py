"""Record files: torn tails and bad lines are skipped and reported, never fatal, never rewritten."""

from __future__ import annotations

from shardeval.store.records import ReadReport, ResultRecord, encode_line, read_jsonl, seal_torn_tail


def rec(i: int) -> ResultRecord:
    return ResultRecord(benchmark="b", problem_idx=i, problem_id=str(i), repeat=0, seed=1, status="ok", score=1.0)


def test_round_trip_and_torn_tail(tmp_path):
    path = tmp_path / "results.jsonl"
    full = encode_line(rec(0)) + encode_line(rec(1))
    path.write_bytes(full + encode_line(rec(2))[:-10])  # the last write was cut off
    report = ReadReport(str(path))
    got = list(read_jsonl(str(path), ResultRecord, report))
    assert [r.problem_idx for r in got] == [0, 1]
    assert report.torn_tail and "torn" in report.describe()


def test_seal_keeps_the_fragment_and_appends_cleanly(tmp_path):
    path = tmp_path / "results.jsonl"
    torn = encode_line(rec(0)) + b'{"benchmark": "b", "prob'
    path.write_bytes(torn)
    assert seal_torn_tail(str(path)) is True
    assert seal_torn_tail(str(path)) is False
    with open(path, "ab") as f:
        f.write(encode_line(rec(1)))
    assert path.read_bytes().startswith(torn)  # nothing already written is lost
    report = ReadReport(str(path))
    assert [r.problem_idx for r in read_jsonl(str(path), ResultRecord, report)] == [0, 1]
    assert report.bad_lines == [2] and not report.torn_tail


def test_bad_lines_are_counted(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(encode_line(rec(0)) + b"not json\n" + b'{"benchmark": 3}\n' + encode_line(rec(1)))
    report = ReadReport(str(path))
    assert len(list(read_jsonl(str(path), ResultRecord, report))) == 2
    assert report.bad_lines == [2, 3]
