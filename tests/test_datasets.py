"""The data loader: every file format, URL download and cache, the hub route, package data, errors.

Servers are real (http.server on 127.0.0.1); concurrency is real (separate processes sharing one
cache directory). Fixtures are written here; nothing is read from outside the repository.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from shardeval.errors import UsageError
from shardeval.benchmark.datasets import JsonlRows, canonical_row, open_from_params, open_rows, package_data

ROWS = [
    {"id": "r0", "question": "plain", "answer": "1"},
    {"id": "r1", "question": 'has "quotes", commas', "answer": "2"},
    {"id": "r2", "question": "two\nlines", "answer": "3"},
    {"id": "r3", "question": "unicode: café ✓", "answer": "-4.5"},
]


def expected_fingerprint(rows: list[dict]) -> str:
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
        h.update(b"\n")
    return "sha256:" + h.hexdigest()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_all_formats(tmp: Path, rows: list[dict]) -> dict[str, Path]:
    files = {"jsonl": write_jsonl(tmp / "d.jsonl", rows)}
    files["jsonl.gz"] = tmp / "d.jsonl.gz"
    files["jsonl.gz"].write_bytes(gzip.compress(files["jsonl"].read_bytes()))
    files["json"] = tmp / "d.json"
    files["json"].write_text(json.dumps(rows))
    files["json-data"] = tmp / "d2.json"
    files["json-data"].write_text(json.dumps({"data": rows, "version": 1}))
    files["csv"] = tmp / "d.csv"
    with open(files["csv"], "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), quoting=csv.QUOTE_MINIMAL)
        writer.writeheader()
        writer.writerows(rows)
    return files


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "json", "json-data", "csv"])
def test_every_format_gives_the_same_rows_and_fingerprint(tmp_path, fmt):
    path = write_all_formats(tmp_path, ROWS)[fmt]
    rows = open_rows(str(path))
    assert len(rows) == 4
    assert [rows.row(i) for i in range(4)] == ROWS
    assert list(rows.rows(range(1, 3))) == ROWS[1:3]
    assert list(rows.rows([3, 0])) == [ROWS[3], ROWS[0]]
    assert rows.fingerprint() == expected_fingerprint(ROWS)  # same data, same fingerprint, any format
    assert str(path) in rows.origin
    with pytest.raises(IndexError):
        rows.row(4)


def test_csv_quoting_and_bom(tmp_path):
    path = tmp_path / "q.csv"
    path.write_bytes('\ufeffid,text\n1,"a, b"\n2,"say ""hi"""\n3,"line1\nline2"\n'.encode())
    rows = open_rows(str(path))
    assert [r["text"] for r in rows.rows(range(3))] == ["a, b", 'say "hi"', "line1\nline2"]
    assert rows.row(0) == {"id": "1", "text": "a, b"}  # the BOM is not part of the first column's name


def test_jsonl_rows_are_read_from_disk_not_memory(tmp_path):
    rows_data = [{"q": f"question {i:03d}", "a": str(i)} for i in range(300)]
    path = write_jsonl(tmp_path / "big.jsonl", rows_data)
    rows = open_rows(str(path))
    assert isinstance(rows, JsonlRows) and not hasattr(rows, "_rows")
    # Rewrite row 150 in place with same-length text: a reader holding rows in memory would miss it.
    text = path.read_text()
    path.write_text(text.replace("question 150", "QUESTION 150"))
    assert rows.row(150)["q"] == "QUESTION 150"
    assert [r["a"] for r in rows.rows(range(298, 300))] == ["298", "299"]


def test_blank_lines_are_skipped_and_bad_lines_named(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n')
    assert len(open_rows(str(path))) == 2
    path.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(UsageError, match=r"b\.jsonl:2: not valid JSON"):
        open_rows(str(path))
    path.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(UsageError, match=r"b\.jsonl:2: expected a JSON object per line, got a list"):
        open_rows(str(path))


def test_json_and_csv_shape_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(UsageError, match=r'list of rows or \{"data": \[rows\]\}; this object has keys rows'):
        open_rows(str(bad))
    bad.write_text(json.dumps([{"a": 1}, 2]))
    with pytest.raises(UsageError, match="row 1 is a int"):
        open_rows(str(bad))
    ragged = tmp_path / "r.csv"
    ragged.write_text("a,b\n1,2\n3\n")
    with pytest.raises(UsageError, match=r"r\.csv:3: 1 values for 2 columns"):
        open_rows(str(ragged))


def test_format_from_suffix_or_param(tmp_path):
    path = tmp_path / "data.txt"
    write_jsonl(path, ROWS)
    with pytest.raises(UsageError, match="cannot tell the data format.*params.format"):
        open_rows(str(path))
    assert len(open_rows(str(path), format="jsonl")) == 4
    with pytest.raises(UsageError, match="unknown data format 'yaml'"):
        open_rows(str(path), format="yaml")


def test_parquet_reads_when_pyarrow_is_present(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    rows = open_rows(str(path))
    assert list(rows.rows(range(4))) == ROWS and rows.fingerprint() == expected_fingerprint(ROWS)


def test_parquet_route_with_a_stand_in_for_pyarrow(tmp_path, monkeypatch):
    """Runs everywhere: the Arrow row access (batches, slices) against a minimal Table stand-in."""

    class Table:
        def __init__(self, rows: list[dict]) -> None:
            self._rows = rows
            self.num_rows = len(rows)

        def slice(self, offset: int, length: int) -> Table:
            return Table(self._rows[offset : offset + length])

        def to_pylist(self) -> list[dict]:
            return [dict(r) for r in self._rows]

    many = [{"i": i} for i in range(2500)]
    parquet = types.SimpleNamespace(read_table=lambda path: Table(many))
    monkeypatch.setitem(sys.modules, "pyarrow", types.SimpleNamespace(parquet=parquet))
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", parquet)
    path = tmp_path / "d.parquet"
    path.write_bytes(b"PAR1")
    rows = open_rows(str(path))
    assert len(rows) == 2500 and rows.row(1234) == {"i": 1234}
    assert [r["i"] for r in rows.rows(range(1020, 2100))] == list(range(1020, 2100))  # crosses batch edges
    assert rows.fingerprint() == expected_fingerprint(many)
    with pytest.raises(IndexError):
        list(rows.rows(range(2400, 2600)))


def test_parquet_without_pyarrow_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = tmp_path / "d.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(UsageError, match="Parquet needs pyarrow, which is not installed; pip install pyarrow"):
        open_rows(str(path), name_hint="demo")


def test_fingerprint_is_stable_and_content_and_order_sensitive(tmp_path):
    a = open_rows(str(write_jsonl(tmp_path / "a.jsonl", ROWS))).fingerprint()
    assert open_rows(str(write_jsonl(tmp_path / "a2.jsonl", ROWS))).fingerprint() == a
    # Key order and whitespace in the file do not matter; values and row order do.
    (tmp_path / "k.jsonl").write_text("".join(json.dumps(dict(reversed(list(r.items()))), indent=None) + "  \n" for r in ROWS))
    assert open_rows(str(tmp_path / "k.jsonl")).fingerprint() == a
    changed = [dict(r) for r in ROWS]
    changed[2]["answer"] = "30"
    assert open_rows(str(write_jsonl(tmp_path / "c.jsonl", changed))).fingerprint() != a
    assert open_rows(str(write_jsonl(tmp_path / "o.jsonl", ROWS[::-1]))).fingerprint() != a
    assert canonical_row({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()


def test_missing_data_says_where_it_looked_and_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as exc:
        open_rows("nope/test.jsonl", name_hint="gsm8k")
    message = str(exc.value)
    assert "\n" not in message and message.startswith("benchmark gsm8k: nope/test.jsonl: no such file")
    assert f"looked at {tmp_path / 'nope/test.jsonl'}" in message and "params.path" in message
    with pytest.raises(UsageError, match="benchmark b: no data given; point it at the data with params.path"):
        open_from_params({}, benchmark="b")
    with pytest.raises(UsageError, match="give one of params.path, params.url, params.hf, not path and url"):
        open_from_params({"path": "a.jsonl", "url": "http://127.0.0.1/x.jsonl"}, benchmark="b")
    with pytest.raises(UsageError, match="params.path is for local files"):
        open_from_params({"path": "https://127.0.0.1/x.jsonl"}, benchmark="b")


def test_local_sha256_is_checked(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert len(open_rows(str(path), sha256=digest)) == 4
    assert len(open_rows(str(path), sha256="sha256:" + digest.upper())) == 4
    with pytest.raises(UsageError, match="sha256 mismatch: expected 0{64}"):
        open_rows(str(path), sha256="0" * 64)
    with pytest.raises(UsageError, match="64 hex digits"):
        open_rows(str(path), sha256="abc")


def test_relative_paths_follow_base_dir(tmp_path):
    write_jsonl(tmp_path / "d.jsonl", ROWS)
    assert len(open_rows("d.jsonl", base_dir=str(tmp_path))) == 4


# --- URLs ----------------------------------------------------------------------------------------


class Server:
    """A static file server on 127.0.0.1 that counts GETs per path and can send slowly."""

    def __init__(self, files: dict[str, bytes], delay: float = 0.0) -> None:
        self.files, self.delay, self.hits = files, delay, {}
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits[self.path] = outer.hits.get(self.path, 0) + 1
                body = outer.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                half = len(body) // 2
                self.wfile.write(body[:half])
                self.wfile.flush()
                time.sleep(outer.delay)  # a partial file exists on the client side meanwhile
                self.wfile.write(body[half:])

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("SHARDEVAL_CACHE_DIR", str(path))
    return path


@pytest.fixture
def server():
    body = "".join(json.dumps(r) + "\n" for r in ROWS).encode()
    srv = Server({"/data/test.jsonl": body, "/data/test.csv": b"id,x\n1,a\n"}, delay=0.3)
    yield srv, body
    srv.close()


def test_url_downloads_once_into_the_cache(cache, server):
    srv, body = server
    url = srv.base + "/data/test.jsonl"
    first = open_rows(url, sha256=hashlib.sha256(body).hexdigest())
    second = open_rows(url)
    assert srv.hits["/data/test.jsonl"] == 1
    assert list(first.rows(range(4))) == ROWS and second.fingerprint() == first.fingerprint() == expected_fingerprint(ROWS)
    cached = cache / "datasets" / hashlib.sha256(url.encode()).hexdigest() / "test.jsonl"
    assert cached.read_bytes() == body and str(cached) in first.origin and url in first.origin
    assert open_rows(srv.base + "/data/test.csv").row(0) == {"id": "1", "x": "a"}


def test_url_sha256_mismatch_is_one_line_and_caches_nothing(cache, server):
    srv, _ = server
    url = srv.base + "/data/test.jsonl"
    with pytest.raises(UsageError) as exc:
        open_rows(url, sha256="f" * 64, name_hint="demo")
    message = str(exc.value)
    assert "\n" not in message and "sha256 mismatch: expected " + "f" * 64 in message and "nothing cached" in message
    directory = cache / "datasets" / hashlib.sha256(url.encode()).hexdigest()
    assert not [p for p in directory.iterdir() if p.name != ".lock"]


def test_cached_file_with_the_wrong_sha256_is_fetched_again(cache, server):
    srv, body = server
    url = srv.base + "/data/test.jsonl"
    open_rows(url)
    cached = cache / "datasets" / hashlib.sha256(url.encode()).hexdigest() / "test.jsonl"
    cached.write_bytes(b'{"tampered": true}\n')
    rows = open_rows(url, sha256=hashlib.sha256(body).hexdigest())
    assert srv.hits["/data/test.jsonl"] == 2 and len(rows) == 4


def test_http_errors_are_one_line(cache, server):
    srv, _ = server
    with pytest.raises(UsageError, match=r"download failed: HTTP 404 .*give params.path"):
        open_rows(srv.base + "/data/missing.jsonl", name_hint="demo")
    with pytest.raises(UsageError, match="download failed"):
        open_rows("http://127.0.0.1:9/none.jsonl")  # the discard port: connection refused


CHILD = """
import sys
from shardeval.api import open_rows
rows = open_rows(sys.argv[1])
print(len(rows), rows.fingerprint())
"""


def test_concurrent_opens_from_four_processes_download_once(cache, server):
    srv, _ = server
    url = srv.base + "/data/test.jsonl"
    env = {**os.environ, "SHARDEVAL_CACHE_DIR": str(cache)}
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, url], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert {out.strip() for out, _ in outputs} == {f"4 {expected_fingerprint(ROWS)}"}
    assert srv.hits["/data/test.jsonl"] == 1  # the lock made the other three wait and reuse the file
    directory = cache / "datasets" / hashlib.sha256(url.encode()).hexdigest()
    assert sorted(p.name for p in directory.iterdir()) == [".lock", "test.jsonl"]  # no partial files left


def test_concurrent_opens_from_threads(cache, server):
    srv, _ = server
    url = srv.base + "/data/test.jsonl"
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(open_rows(url).fingerprint())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [expected_fingerprint(ROWS)] * 4 and srv.hits["/data/test.jsonl"] == 1


# --- the hub and packages ------------------------------------------------------------------------


def test_hub_without_datasets_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(UsageError, match=r"hf://openai/gsm8k/main:test: loading from the Hugging Face hub needs the `datasets` package"):
        open_rows("hf://openai/gsm8k/main:test", name_hint="gsm8k")


def test_hub_spec_is_parsed_and_rows_read_lazily(monkeypatch):
    calls = []

    class FakeDataset:
        def __len__(self) -> int:
            return len(ROWS)

        def __getitem__(self, i: int | slice) -> dict:
            calls.append(i)
            if isinstance(i, slice):  # like datasets.Dataset: a slice gives a dict of columns
                return {k: [r[k] for r in ROWS[i]] for k in ROWS[0]}
            return dict(ROWS[i])

    seen = []

    def load_dataset(name, config, split):
        seen.append((name, config, split))
        if name == "owner/missing":
            raise FileNotFoundError("Dataset 'owner/missing' doesn't exist on the Hub")
        return FakeDataset()

    fake = types.SimpleNamespace(load_dataset=load_dataset)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    rows = open_rows("hf://openai/gsm8k/main:test")
    assert len(rows) == 4 and rows.row(2) == ROWS[2] and calls == [2]
    assert rows.fingerprint() == expected_fingerprint(ROWS) and rows.origin == "hf://openai/gsm8k/main:test"
    assert calls[-1] == slice(0, 4) and list(rows.rows([3, 1])) == [ROWS[3], ROWS[1]]
    open_rows("hf://gsm8k")
    open_rows_params = open_from_params({"hf": "owner/name:train"}, benchmark="b")
    assert len(open_rows_params) == 4
    assert seen == [("openai/gsm8k", "main", "test"), ("gsm8k", None, "test"), ("owner/name", None, "train")]
    with pytest.raises(UsageError, match=r"the hub could not load 'owner/missing'.*FileNotFoundError"):
        open_rows("hf://owner/missing")
    with pytest.raises(UsageError, match="expected hf://NAME"):
        open_rows("hf://a/b/c/d")


def test_package_data_finds_files_in_installed_packages(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "fake_bench_data"
    (pkg / "fixtures").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    write_jsonl(pkg / "fixtures" / "cases.jsonl", ROWS)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    path = package_data("fake_bench_data", "fixtures/cases.jsonl")
    assert Path(path) == pkg / "fixtures" / "cases.jsonl"
    rows = open_rows("pkg://fake_bench_data/fixtures/cases.jsonl")
    assert len(rows) == 4 and rows.origin.startswith("pkg://fake_bench_data/fixtures/cases.jsonl (")
    with pytest.raises(UsageError, match=r"package 'fake_bench_data' is installed but has no fixtures/other.jsonl"):
        package_data("fake_bench_data", "fixtures/other.jsonl")
    with pytest.raises(UsageError, match=r"the Python package 'no_such_pkg_xyz', which is not installed; pip install 'no-such-pkg==1.0'"):
        package_data("no_such_pkg_xyz", "data.jsonl", pip_name="no-such-pkg==1.0")


def test_package_data_from_a_zip_is_materialised_in_the_cache(tmp_path, monkeypatch, cache):
    import zipfile

    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped_bench_data/__init__.py", "")
        z.writestr("zipped_bench_data/cases.jsonl", "".join(json.dumps(r) + "\n" for r in ROWS))
    monkeypatch.syspath_prepend(str(archive))
    path = package_data("zipped_bench_data", "cases.jsonl")
    assert path.startswith(str(cache)) and len(open_rows(path)) == 4
    assert package_data("zipped_bench_data", "cases.jsonl") == path


def test_json_named_file_holding_json_lines(tmp_path):
    path = write_jsonl(tmp_path / "export.json", ROWS)  # what `Dataset.to_json` writes by default
    rows = open_rows(str(path))
    assert isinstance(rows, JsonlRows) and list(rows.rows(range(4))) == ROWS
    (tmp_path / "one.json").write_text(json.dumps({"data": ROWS}))  # one line, but a {"data": …} document
    assert len(open_rows(str(tmp_path / "one.json"))) == 4
