"""Images in bring-your-own rows, end to end against a real simulator behind a recording proxy:
what goes on the wire (chat parts in marker order, base64 or file:// URLs), what the records and
trajectories keep (digests, never bytes), the thumbnails a shard keeps, identity (an image replaced
under its name is other data), and bad input refused in one line before any request."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import urllib.request
from pathlib import Path
from urllib.parse import unquote

import msgspec
import pytest

from conftest import running_sim, shardeval_cmd
from served import Recording, app_in_thread, recording_proxy

PIL = pytest.importorskip("PIL")
from PIL import Image, ImageDraw  # noqa: E402

FAST = ("--ttft-ms", "0", "--itl-ms", "0")


def draw(path: Path, n: int, size: int = 48, fmt: str = "PNG") -> bytes:
    """A small picture with n red dots (a distinct file per n)."""
    im = Image.new("RGB", (size, size), "white")
    d = ImageDraw.Draw(im)
    for k in range(n):
        d.ellipse((2 + 9 * k, 20, 8 + 9 * k, 26), fill="red")
    im.save(path, format=fmt)
    return path.read_bytes()


def make_data(tmp: Path, rows: list[dict] | None = None) -> Path:
    """A JSONL benchmark with images beside it in img/: one image per row with a marker, one row with
    two markers, one without any (images first)."""
    (tmp / "img").mkdir(exist_ok=True)
    for n in range(1, 4):
        draw(tmp / "img" / f"dots{n}.png", n)
    rows = (
        rows
        if rows is not None
        else [
            {"id": "a", "question": "How many dots? <image> Answer with a number.", "answer": "1", "images": ["img/dots1.png"]},
            {
                "id": "b",
                "question": "Left <image> right <image>: which has more?",
                "answer": "right",
                "images": ["img/dots1.png", "img/dots2.png"],
            },
            {"id": "c", "question": "How many dots?", "answer": "3", "images": ["img/dots3.png"]},
        ]
    )
    path = tmp / "vqa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config(tmp: Path, url: str, data: Path, *, service: str = "", bench: str = "", repeats: int = 2, out: str = "out") -> Path:
    cfg = tmp / "run.yaml"
    cfg.write_text(
        f"services:\n  model:\n    type: api\n    url: {url}\n    model: sim\n{service}"
        f"benchmarks:\n  - name: {data}\n    repeats: {repeats}\n{bench}"
        f"output: {{dir: {tmp / out}}}\n"
    )
    return cfg


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def image_parts(body: dict) -> list[dict]:
    return [p for p in body["messages"][-1]["content"] if p["type"] == "image_url"]


def test_rows_images_go_on_the_wire_in_marker_order_and_records_keep_digests(tmp_path):
    data = make_data(tmp_path)
    digests = {n: hashlib.sha256((tmp_path / "img" / f"dots{n}.png").read_bytes()).hexdigest() for n in (1, 2, 3)}
    with running_sim(*FAST) as sim, recording_proxy(sim, Recording("")) as rec:
        result = shardeval_cmd("run", str(config(tmp_path, rec.url, data)), "--shard", "0/1")
    assert result.returncode == 0, result.stderr
    assert len(rec.bodies) == 6
    by_text = {}
    for body in rec.bodies:
        content = body["messages"][-1]["content"]
        assert isinstance(content, list) and body["messages"][-1]["role"] == "user"
        for part in content:
            assert set(part) == ({"type", "text"} if part["type"] == "text" else {"type", "image_url"})
            if part["type"] == "image_url":
                assert set(part["image_url"]) == {"url"}  # no `detail`: vLLM ignores it with a warning
        shape = [p["type"] for p in content]
        by_text["".join(p.get("text", "") for p in content)] = (shape, [p["image_url"]["url"] for p in image_parts(body)])
    assert by_text["How many dots?  Answer with a number."][0] == ["text", "image_url", "text"]
    assert by_text["Left  right : which has more?"][0] == ["text", "image_url", "text", "image_url", "text"]
    assert by_text["How many dots?"][0] == ["image_url", "text"]  # no marker: the image first
    shape, urls = by_text["Left  right : which has more?"]
    for url, n in zip(urls, (1, 2)):
        head, payload = url.split(",", 1)
        assert head == "data:image/png;base64"
        assert base64.b64decode(payload) == (tmp_path / "img" / f"dots{n}.png").read_bytes()

    out = tmp_path / "out" / "shard_0" / "vqa"
    records = lines(out / "results.jsonl")
    assert len(records) == 6 and all(r["status"] == "ok" for r in records)
    b = next(r for r in records if r["problem_idx"] == 1)
    assert b["images"] == [
        {"sha256": digests[1], "bytes": (tmp_path / "img/dots1.png").stat().st_size, "width": 48, "height": 48},
        {"sha256": digests[2], "bytes": (tmp_path / "img/dots2.png").stat().st_size, "width": 48, "height": 48},
    ]
    trajectories = (out / "trajectories.jsonl").read_text()
    assert "base64" not in trajectories and "data:image" not in trajectories  # digests, never bytes
    first = lines(out / "trajectories.jsonl")[0]["messages"][0]["content"]
    assert f"[image sha256:{digests[1][:12]} 48x48" in first
    no_marker = next(t for t in lines(out / "trajectories.jsonl") if t["problem_idx"] == 2)["messages"][0]["content"]
    assert no_marker.startswith(f"[image sha256:{digests[3][:12]} 48x48") and no_marker.endswith(" B]\nHow many dots?")
    thumbs = lines(out / "images.jsonl")
    assert sorted(t["sha256"] for t in thumbs) == sorted(digests.values())  # one line per distinct image
    for t in thumbs:
        assert t["thumbnail"].startswith("data:image/") and len(t["thumbnail"]) < 12_000 and t["name"].startswith("img/dots")
    log = (tmp_path / "out" / "shard_0" / "logs" / "shard.log").read_text()
    assert (
        "vqa: images: 3 encoded, 5 reused, 3 read" in log
    )  # 4 image parts x 2 repeats = 8 uses, 3 distinct images: each read and encoded once

    # a rescore scores the saved answers again and keeps the images' records and thumbnails
    rescored = shardeval_cmd("rescore", str(tmp_path / "out"), "-o", str(tmp_path / "rescored"))
    assert rescored.returncode == 0, rescored.stderr
    again_dir = tmp_path / "rescored" / "shard_0" / "vqa"
    assert [r["images"] for r in lines(again_dir / "results.jsonl")] == [r["images"] for r in records]
    assert (again_dir / "images.jsonl").read_bytes() == (out / "images.jsonl").read_bytes()

    # a rerun resumes: nothing asked, no thumbnail written twice
    with running_sim(*FAST) as sim, recording_proxy(sim, Recording("")) as rec:
        again = shardeval_cmd("run", str(config(tmp_path, rec.url, data)), "--shard", "0/1")
    assert again.returncode == 0, again.stderr
    assert rec.bodies == [] and len(lines(out / "images.jsonl")) == 3


def test_file_urls_when_the_service_reads_the_folder_itself(tmp_path):
    data = make_data(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(tmp_path / "img" / "dots3.png", elsewhere / "dots3.png")
    (tmp_path / "img" / "link.png").symlink_to(elsewhere / "dots3.png")  # resolves outside the folder: base64
    rows = [
        {"id": "in", "question": "q <image>", "answer": "1", "images": ["img/dots1.png"]},
        {"id": "out", "question": "q <image>", "answer": "1", "images": ["img/link.png"]},
    ]
    make_data(tmp_path, rows)
    service = f"    allowed_local_media_path: {tmp_path / 'img'}\n"
    # the simulator reads file:// images only under its own --allowed-local-media-path, as vLLM does
    with running_sim(*FAST, "--allowed-local-media-path", str(tmp_path / "img")) as sim, recording_proxy(sim, Recording("")) as rec:
        result = shardeval_cmd("run", str(config(tmp_path, rec.url, data, service=service, repeats=1)), "--shard", "0/1")
    assert result.returncode == 0, result.stderr
    urls = {image_parts(b)[0]["image_url"]["url"] for b in rec.bodies}
    file_urls = [u for u in urls if u.startswith("file://")]
    assert [unquote(u.removeprefix("file://")) for u in file_urls] == [os.path.realpath(tmp_path / "img" / "dots1.png")]
    assert sum(u.startswith("data:image/png;base64,") for u in urls) == 1  # the symlink leaving the folder


# (the service's lines, the benchmark's lines, what the one error line says) of configs that refuse good rows
REFUSED_BY_CONFIG = {
    "limit": (
        "    limit_mm_per_prompt: {image: 1}\n",
        "",
        "problem 1 (id 1): 2 images, more than the service's limit_mm_per_prompt image 1",
    ),
    "too_big": ("    max_image_bytes: 100\n", "", "image img/dots1.png is"),
    "completions": (
        "    protocol: completions\n",
        "",
        "has images, which only chat requests carry, but service 'model' uses protocol completions",
    ),
    "loglikelihood": ("", "    solver: {type: loglikelihood}\n", "has images, but solver.type loglikelihood scores text only"),
}


@pytest.mark.parametrize("case", ["missing", "undecodable", "truncated", "markers", "limit", "too_big", "completions", "loglikelihood"])
def test_bad_images_are_one_line_before_any_request(tmp_path, case):
    data = make_data(tmp_path)
    rows = lines(data)
    service, bench, want = "", "", ""
    if case == "missing":
        rows[2]["images"] = ["img/nope.png"]
        want = "row 2 (id 2): images[0] 'img/nope.png': cannot read it: No such file"
    elif case == "undecodable":
        (tmp_path / "img" / "junk.png").write_bytes(b"this is not a picture")
        rows[1]["images"][1] = "img/junk.png"
        want = "row 1 (id 1): images[1] 'img/junk.png': cannot decode it as an image"
    elif case == "truncated":  # a header that opens, pixels that do not: only a full decode sees it
        whole = (tmp_path / "img" / "dots3.png").read_bytes()
        (tmp_path / "img" / "cut.png").write_bytes(whole[: len(whole) // 2])
        rows[0]["images"] = ["img/cut.png"]
        want = "row 0 (id 0): images[0] 'img/cut.png': cannot decode it as an image"
    elif case == "markers":
        rows[0]["question"] = "<image> and <image>"
        want = "row 0 (id 0): the prompt has 2 <image> marker(s) for 1 image(s)"
    elif case in REFUSED_BY_CONFIG:
        service, bench, want = REFUSED_BY_CONFIG[case]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with running_sim(*FAST) as sim, recording_proxy(sim, Recording("")) as rec:
        result = shardeval_cmd("run", str(config(tmp_path, rec.url, data, service=service, bench=bench)), "--shard", "0/1")
        with urllib.request.urlopen(sim.removesuffix("/v1") + "/sim/stats", timeout=10) as reply:
            stats = json.loads(reply.read())
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    err = errors[0] if errors else ""
    assert len(errors) == 1 and err.startswith("shardeval: error: ") and "Traceback" not in err and want in err, err
    assert str(data) in err or "benchmarks[0]" in err  # names the data (or the config entry)
    assert " at 0x" not in err
    assert rec.bodies == [] and stats["requests"] == 0  # refused before any request: the simulator counted none


def outside_file(tmp: Path) -> Path:
    """A picture beside the dataset's folder, not in it: what a row must not reach."""
    (tmp / "secret").mkdir(exist_ok=True)
    draw(tmp / "secret" / "private.png", 2)
    return tmp / "secret" / "private.png"


# Each: (what the row names, given the data in tmp/data/ and a picture in tmp/secret/; the words of the one line;
# params for the jsonl benchmark). Issue 40, points 1 and 2: a row's file is read as the data file is
# (store.regular: a regular file, never waited on, a bounded read), and it lies in the dataset.
ROW_FILES = {
    "fifo": (lambda d: os.mkfifo(d / "img" / "fifo.png") or "img/fifo.png", "is a FIFO (named pipe), not a regular file", {}),
    "directory": (lambda d: (d / "img" / "dir.png").mkdir() or "img/dir.png", "is a directory", {}),
    "dev_zero_inside_a_root": (
        lambda d: (d / "img" / "zero.png").symlink_to("/dev/zero") or "img/zero.png",
        "is a character device, not a regular file",
        {"images_root": "/dev"},
    ),
    "over_the_bound": (
        lambda d: os.truncate(d / "img" / "huge.png", (256 << 20) + 1) or "img/huge.png",
        "more than 268435456 bytes, over max_image_bytes",
        {},
    ),
    "dotdot": (lambda d: "../secret/private.png", "is {secret}, outside the dataset", {}),
    "absolute": (lambda d: str(d.parent / "secret" / "private.png"), "is {secret}, outside the dataset", {}),
    "symlink_out": (
        lambda d: (d / "img" / "link.png").symlink_to(d.parent / "secret" / "private.png") or "img/link.png",
        "is {secret}, outside the dataset",
        {},
    ),
    "symlinked_folder_out": (
        lambda d: (d / "img" / "sub").symlink_to(d.parent / "secret") or "img/sub/private.png",
        "is {secret}, outside the dataset",
        {},
    ),
}


@pytest.mark.timeout(90)  # a FIFO hung the preflight forever, /dev/zero read until memory ran out: fail, never hang
@pytest.mark.parametrize("case", list(ROW_FILES))
def test_a_file_a_row_names_is_read_as_the_data_file_is_and_lies_in_the_dataset(tmp_path, case):
    make_name, want, params = ROW_FILES[case]
    secret = outside_file(tmp_path)
    (tmp_path / "data").mkdir()
    if case == "over_the_bound":
        (tmp_path / "data" / "img").mkdir()
        (tmp_path / "data" / "img" / "huge.png").touch()
    data = make_data(tmp_path / "data")
    rows = lines(data)
    rows[1]["images"][1] = make_name(tmp_path / "data")
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bench = "    params: {" + ", ".join(f"{k}: {v}" for k, v in params.items()) + "}\n" if params else ""
    with running_sim(*FAST) as sim, recording_proxy(sim, Recording("")) as rec:
        result = shardeval_cmd("run", str(config(tmp_path, rec.url, data, bench=bench)), "--shard", "0/1", timeout=60)
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "error" in line]
    assert line.startswith("shardeval: error: ") and "Traceback" not in result.stderr
    assert "row 1 (id 1): images[1]" in line and want.format(secret=secret) in line, line
    assert rec.bodies == []  # before any request
    assert not (tmp_path / "out" / "vqa").exists() or not list((tmp_path / "out").rglob("results.jsonl"))


def test_a_file_below_an_explicit_images_root_is_read(tmp_path):
    """images_root opens one more folder, as vLLM's allowed_local_media_path does: an absolute path
    and a relative one leading below it are read and sent; the data's own folder stays open."""
    secret = outside_file(tmp_path)
    (tmp_path / "data").mkdir()
    data = make_data(tmp_path / "data")
    rows = lines(data)
    rows[0]["images"] = [str(secret)]
    rows[1]["images"][1] = "../secret/private.png"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bench = f"    params: {{images_root: {tmp_path / 'secret'}}}\n"
    with running_sim(*FAST) as sim, recording_proxy(sim, Recording("")) as rec:
        result = shardeval_cmd("run", str(config(tmp_path, rec.url, data, bench=bench, repeats=1)), "--shard", "0/1", timeout=60)
    assert result.returncode == 0, result.stderr
    sent = {base64.b64decode(p["image_url"]["url"].split(",", 1)[1]) for body in rec.bodies for p in image_parts(body)}
    assert secret.read_bytes() in sent and (tmp_path / "data" / "img" / "dots1.png").read_bytes() in sent


def test_a_byo_mapping_holds_its_rows_to_the_dataset_too(tmp_path):
    """The custom (YAML mapping) benchmark reads rows' images through the same rule; its
    `images_root` is relative to the mapping file, as `data` is."""
    secret = outside_file(tmp_path)
    (tmp_path / "data").mkdir()
    data = make_data(tmp_path / "data")
    rows = lines(data)
    rows[2]["images"] = ["../secret/private.png"]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mapping = tmp_path / "data" / "vqa.yaml"
    mapping.write_text("data: vqa.jsonl\nscorer: exact\n")
    cfg = tmp_path / "run.yaml"
    with running_sim(*FAST) as sim:
        cfg.write_text(
            f"services:\n  model: {{type: api, url: {sim}, model: sim}}\nbenchmarks:\n  - name: {mapping}\n"
            f"output: {{dir: {tmp_path / 'out'}}}\n"
        )
        refused = shardeval_cmd("run", str(cfg), "--shard", "0/1", timeout=60)
        mapping.write_text("data: vqa.jsonl\nscorer: exact\nimages_root: ../secret\n")
        allowed = shardeval_cmd("run", str(cfg), "--shard", "0/1", timeout=60)
    assert refused.returncode == 2 and f"row 2 (id 2): images[0] '../secret/private.png' is {secret}, outside the dataset" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert allowed.returncode == 0, allowed.stderr


def test_an_image_replaced_under_its_name_is_other_data_and_resume_refuses(tmp_path):
    data = make_data(tmp_path)
    with running_sim(*FAST) as sim:
        cfg = config(tmp_path, sim, data)
        first = shardeval_cmd("run", str(cfg), "--shard", "0/1", "--max-problems", "2")
        assert first.returncode == 0, first.stderr
        manifest = json.loads((tmp_path / "out" / "shard_0" / "manifest.json").read_text())
        before = manifest["benchmarks"][0]["dataset_fingerprint"]
        draw(tmp_path / "img" / "dots3.png", 4)  # same path, other pixels (a row outside the 2 asked, even)
        again = shardeval_cmd("run", str(cfg), "--shard", "0/1", "--max-problems", "2")
    assert again.returncode == 2 and "data changed" in again.stderr, again.stderr
    assert before in again.stderr
    # the jsonl rows themselves did not change: only the image's bytes moved the identity
    assert data.read_text() == "".join(json.dumps(r) + "\n" for r in lines(data))


def test_http_images_are_fetched_once_into_the_download_cache(tmp_path):
    from aiohttp import web

    png = draw(tmp_path / "served.png", 2)
    hits = []

    async def serve(request):
        hits.append(request.path)
        return web.Response(body=png, content_type="image/png")

    app = web.Application()
    app.router.add_get("/pic.png", serve)
    with app_in_thread(app) as origin:
        rows = [{"id": "h", "question": "dots? <image>", "answer": "2", "images": [f"{origin}/pic.png"]}]
        data = make_data(tmp_path, rows)
        env = {"SHARDEVAL_CACHE_DIR": str(tmp_path / "cache")}
        with running_sim(*FAST) as sim, recording_proxy(sim, Recording("")) as rec:
            result = shardeval_cmd("run", str(config(tmp_path, rec.url, data)), "--shard", "0/1", env=env)
    assert result.returncode == 0, result.stderr
    assert len(hits) == 1  # preflight fetched it; the requests read the cached copy
    assert all(base64.b64decode(image_parts(b)[0]["image_url"]["url"].split(",", 1)[1]) == png for b in rec.bodies)
    record = lines(tmp_path / "out" / "shard_0" / "vqa" / "results.jsonl")[0]
    assert record["images"][0]["sha256"] == hashlib.sha256(png).hexdigest()


def test_an_image_that_cannot_be_had_at_run_time_is_an_image_error_never_sent(tmp_path):
    """The solver's side of a run-time failure (an http(s) image gone from the cache and the server,
    a file changed since the problem was built): an error of kind `image`, and no request."""
    import asyncio

    from shardeval.benchmark import Problem
    from shardeval.benchmark.images import describe
    from shardeval.config import SolverConfig
    from shardeval.run.service import Endpoint
    from shardeval.run.solver import ServiceHandle, SimpleSolver

    path = tmp_path / "x.png"
    ref = describe(draw(path, 1), str(path), "x.png")
    draw(path, 2)  # changed after the problem was built
    # never described in this process: read by its name, a URL nothing answers (port 9, discard)
    url_ref = msgspec.structs.replace(ref, name="http://127.0.0.1:9/gone.png", sha256="0" * 64)

    class NoClient:  # the request must never be made: a call fails the test
        config = None

        async def request(self, *args, **kwargs):
            raise AssertionError("a request was made")

    handle = ServiceHandle(endpoint=Endpoint(base_url="http://127.0.0.1:9/v1", model="m", protocol="chat_completions"), client=NoClient())
    solver = SimpleSolver(SolverConfig(), handle)
    for r, why in ((ref, "changed since the problem was built"), (url_ref, "gone.png")):
        problem = Problem(idx=0, id="p", prompt="look <image>", images=[r])
        attempt = asyncio.run(solver.solve(problem, 1))
        assert attempt.completion.status == "error" and attempt.completion.error_kind == "image"
        assert why in attempt.completion.error


def test_store_encodes_each_image_once_within_its_bounds(tmp_path):
    from shardeval.benchmark.images import ImageStore, describe

    refs = [describe(draw(tmp_path / f"{n}.png", n % 5, size=32 + n), str(tmp_path / f"{n}.png"), f"{n}.png") for n in range(10)]
    store = ImageStore(max_entries=4)
    for n, ref in enumerate(refs):
        store.locate(ref, str(tmp_path / f"{n}.png"))
    for ref in refs:  # problem-major: each image's repeats back to back
        urls = {store.data_url(ref) for _ in range(3)}
        assert len(urls) == 1
    assert store.stats() == {"encodes": 10, "hits": 20, "reads": 10}
    assert len(store._urls) == 4  # bounded


def test_fingerprints_hold_digests_not_where_the_data_is_mounted(tmp_path):
    """Two nodes mount the data at different paths: their problems, and so the prompt fingerprint
    that shards of one run must share, are the same."""
    from shardeval.identity import prompt_fingerprint
    from shardeval_benchmarks.jsonl import JsonlBenchmark

    fingerprints = set()
    for mount in ("node_a", "node_b"):
        (tmp_path / mount).mkdir()
        data = make_data(tmp_path / mount)
        bench = JsonlBenchmark({"path": str(data)})
        bench.preflight()
        fingerprints.add((prompt_fingerprint(bench, bench.size()), bench.fingerprint()))
        assert str(tmp_path) not in msgspec.json.encode(bench.problem(0)).decode()
    assert len(fingerprints) == 1


def test_file_url_cache_key_carries_the_digests(tmp_path):
    from shardeval.benchmark import Problem
    from shardeval.benchmark.images import describe
    from shardeval.run.solver import image_salt

    path = tmp_path / "a.png"
    ref = describe(draw(path, 1), str(path), "a.png")
    problem = Problem(idx=0, id="p", prompt="<image>", images=[ref])
    as_file = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"file://{path}"}}]}]}
    as_data = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]}
    assert image_salt(as_file, problem) == ref.sha256
    assert image_salt(as_data, problem) is None  # the bytes are in the body already


def test_images_held_in_parquet_rows_as_hugging_face_stores_them(tmp_path):
    """A Hugging Face VQA split saved as Parquet keeps each image in the row ({bytes, path}): sent
    as base64 with the row's bytes, named by its path, read again from the row at request time."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pngs = [draw(tmp_path / f"p{n}.png", n) for n in (1, 2)]
    table = pa.table(
        {
            "question": ["How many dots?", "And here? <image>"],
            "answer": ["1", "2"],
            "image": [{"bytes": pngs[0], "path": "val/p1.png"}, {"bytes": pngs[1], "path": None}],
        }
    )
    data = tmp_path / "vqa.parquet"
    pq.write_table(table, data)
    with running_sim(*FAST) as sim, recording_proxy(sim, Recording("")) as rec:
        result = shardeval_cmd(
            "run", str(config(tmp_path, rec.url, data, bench="    params: {images_field: image}\n", repeats=2)), "--shard", "0/1"
        )
    assert result.returncode == 0, result.stderr
    sent = sorted(base64.b64decode(image_parts(b)[0]["image_url"]["url"].split(",", 1)[1]) for b in rec.bodies)
    assert sent == sorted(pngs * 2)
    thumbs = {t["sha256"]: t["name"] for t in lines(tmp_path / "out" / "shard_0" / "vqa" / "images.jsonl")}
    assert thumbs == {hashlib.sha256(pngs[0]).hexdigest(): "val/p1.png", hashlib.sha256(pngs[1]).hexdigest(): "row 1 image 0"}


def test_byo_vqa_and_vlm_choice_scorers(tmp_path):
    """The mapping's `vqa` scorer: VQA accuracy over the row's human answers (repeats weigh);
    `vlm_choice`: a letter in any form VLMs write it, or the option's own text."""
    from shardeval_benchmarks.custom import CustomBenchmark

    make_data(tmp_path)
    humans = ["2", "2", "two", "2", "3", "2", "2", "3", "2", "2"]
    rows = [
        {"id": "v", "q": "How many? <image>", "a": humans, "images": ["img/dots2.png"]},
        {
            "id": "m",
            "q": "Which shape? <image>\n{choices}",
            "a": "B",
            "opts": ["circle", "triangle", "square"],
            "images": ["img/dots1.png"],
        },
    ]
    for r in rows:
        (tmp_path / f"{r['id']}.jsonl").write_text(json.dumps(r) + "\n")
    vqa = CustomBenchmark({"data": str(tmp_path / "v.jsonl"), "fields": {"input": "q", "target": "a"}, "scorer": "vqa"})
    p = vqa.problem(0)
    assert vqa.score(p, "#### two").score == 1.0  # eight humans said 2 ("two" normalises to it)
    assert vqa.score(p, "The answer is 3").score == pytest.approx(0.6)  # two humans said 3
    assert vqa.score(p, "5").score == 0.0
    mc = CustomBenchmark(
        {
            "data": str(tmp_path / "m.jsonl"),
            "fields": {"input": "q", "target": "a", "choices": "opts"},
            "scorer": "vlm_choice",
            "prompt": "{q}",
        }
    )
    p = mc.problem(0)
    assert p.images and p.reference == "B"
    for reply in ("B", "(B)", "B.", "The answer is B", "the triangle"):
        assert mc.score(p, reply).score == 1.0, reply
    for reply in ("A or B", "square", "C"):
        assert mc.score(p, reply).score == 0.0, reply


def test_a_node_checks_an_unchanged_file_once(tmp_path, monkeypatch):
    """The preflight's full read and decode of a file happens once per node: a later process (a
    rerun, another shard) trusts the node's record while size, mtime and inode are unchanged, and
    reads a changed file again."""
    from shardeval.benchmark import images
    from shardeval_benchmarks.jsonl import JsonlBenchmark

    monkeypatch.setenv("SHARDEVAL_CACHE_DIR", str(tmp_path / "cache"))
    data = make_data(tmp_path)
    monkeypatch.setattr(images, "CHECKED", images.CheckedFiles())
    first = JsonlBenchmark({"path": str(data)})
    first.preflight()
    reads = []
    real = images.read_source
    monkeypatch.setattr(images, "read_source", lambda source, *a: reads.append(source) or real(source, *a))
    monkeypatch.setattr(images, "CHECKED", images.CheckedFiles())  # a new process: only the node's file is shared
    second = JsonlBenchmark({"path": str(data)})
    second.preflight()
    assert reads == [] and second.fingerprint() == first.fingerprint()
    draw(tmp_path / "img" / "dots3.png", 5)  # replaced: other size and mtime
    monkeypatch.setattr(images, "CHECKED", images.CheckedFiles())
    third = JsonlBenchmark({"path": str(data)})
    third.preflight()
    assert reads == [str(tmp_path / "img" / "dots3.png")] and third.fingerprint() != first.fingerprint()
