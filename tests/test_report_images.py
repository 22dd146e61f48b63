"""report.html shows the images an item showed the model: thumbnails read back from the shards'
images.jsonl (only the digests the page needs), drawn only from their own data: URLs, named as text
whatever the name holds, at most a few per item and a bounded number of bytes per page; and in
headless chromium they render, while a hostile name stays text.

Shard directories come from tests/shard_factory.py with records that carry `images` and an
images.jsonl written beside them (real WebP thumbnails made with Pillow); the last test runs an
image benchmark against the simulator and merges it, as a user would.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import tracemalloc
from pathlib import Path

import msgspec
import pytest

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from conftest import running_sim, shardeval_cmd
from shard_factory import make_shard, record
from shardeval.api.records import ImageInfo, ImageThumbnail, merge_run
from shardeval.results.images import read_thumbnails
from shardeval.store.records import IMAGES_FILE
from shardeval.store.records import run_id
import shardeval_pages.report_page as report_page

PIL = pytest.importorskip("PIL")
from PIL import Image, ImageDraw  # noqa: E402

READY = "document.body.dataset.charts"
HOSTILE_NAMES = [
    '"><img src=x onerror=alert(1)>.png',
    'it\'s "quoted"\n<script>window.pwned=1</script>\nsecond line.png',
    "\u202eevil\u202c <svg onload=alert(3)> 'single' & \"double\".webp",
]


def webp(seed: int, size: tuple[int, int] = (96, 64), noise: bool = False) -> tuple[str, int, int]:
    """A real WebP thumbnail as a shard writes one: (data URL, width, height). `noise` makes one
    near the 8 KiB limit (96 x 96 random pixels, which do not compress)."""
    if noise:
        im = Image.frombytes("RGB", (96, 96), hashlib.shake_256(str(seed).encode()).digest(96 * 96 * 3))
    else:
        im = Image.new("RGB", size, ((seed * 67) % 256, (seed * 131) % 256, 200))
        ImageDraw.Draw(im).ellipse((4, 4, 4 + 8 * (seed % 8 + 1), 40), fill="black")
    out = io.BytesIO()
    im.save(out, format="WEBP", quality=80)
    return "data:image/webp;base64," + base64.b64encode(out.getvalue()).decode(), im.width, im.height


def digest(seed: int) -> str:
    return hashlib.sha256(f"image {seed}".encode()).hexdigest()


def thumb_line(seed: int, name: str | None = None, *, thumbnail: str | None | bool = True, noise: bool = False) -> ImageThumbnail:
    """images.jsonl's line of image `seed`: its own thumbnail (True), none (None), or the given text."""
    url, w, h = webp(seed, noise=noise) if thumbnail is True else (thumbnail, 0, 0)
    return ImageThumbnail(
        sha256=digest(seed),
        name=name or f"img/picture {seed}.png",
        bytes=1000 + seed,
        width=640,
        height=480,
        mime="image/png",
        thumbnail=url,
        thumb_width=w,
        thumb_height=h,
    )


def info(seed: int) -> ImageInfo:
    return ImageInfo(sha256=digest(seed), bytes=1000 + seed, width=640, height=480)


def write_lines(path: Path, lines: list[ImageThumbnail | bytes]) -> None:
    with open(path, "ab") as f:
        for line in lines:
            f.write(line if isinstance(line, bytes) else msgspec.json.encode(line) + b"\n")


def image_run(root: Path, *, n: int = 12, shards: int = 2, images_of=lambda p: [p], lines_of=None, score=lambda p, r: 0.0) -> Path:
    """`shards` shards of an image benchmark `arith` (n problems x 2 repeats, every answer wrong so
    every item is one to read); problem p showed the images `images_of(p)`; each shard's
    images.jsonl holds `lines_of(shard, problems)` (default: a thumbnail of each image it sent)."""
    config_hash = "sha256:images"
    for idx in range(shards):
        lo, hi = idx * n // shards, (idx + 1) * n // shards

        def records(lo: int = lo, hi: int = hi, idx: int = idx):
            for p in range(lo, hi):
                for r in range(2):
                    yield record("arith", p, r, idx, score=score(p, r), run=run_id(config_hash), images=[info(s) for s in images_of(p)])

        out = Path(
            make_shard(str(root), idx, shards, n_problems=n, repeats=2, config_hash=config_hash, records=records(), metrics=["accuracy"])
        )
        sent = list(dict.fromkeys(s for p in range(lo, hi) for s in images_of(p)))
        write_lines(out / "arith" / IMAGES_FILE, lines_of(idx, sent) if lines_of else [thumb_line(s) for s in sent])
    return root


def report(run: Path) -> str:
    return report_page.render_report_html(merge_run(str(run))).decode()


def drawn_sources(html: str) -> list[str]:
    """The sources of the page's own <img> elements (Vega's code, after the body, holds the string too)."""
    return re.findall(r'<img src="([^"]*)"', html.split("<script>", 1)[0])


# --- the reader ----------------------------------------------------------------------------------


def test_reader_returns_only_the_asked_digests_and_passes_over_what_it_cannot_read(tmp_path):
    a, b = tmp_path / "shard_0" / "arith", tmp_path / "shard_1" / "arith"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    write_lines(
        a / IMAGES_FILE,
        [
            thumb_line(1),
            b"not json at all\n",
            b'{"sha256": 5}\n',
            thumb_line(2, thumbnail=None),
            b"\n",
            b'{"sha256": "' + digest(3).encode() + b'", "name": "missing every other field"}\n',  # its digest, but no thumbnail line
            thumb_line(4),
            b'{"sha256": "' + digest(3).encode() + b'", "name": "torn',  # a torn last line
        ],
    )
    write_lines(b / IMAGES_FILE, [thumb_line(2, "img/from shard 1.png"), thumb_line(3), thumb_line(4, "img/second copy.png")])
    (tmp_path / "shard_2").mkdir()  # a shard without images.jsonl: none there, no error

    dirs = [tmp_path / "shard_0", tmp_path / "shard_1", tmp_path / "shard_2"]
    got = read_thumbnails(dirs, "arith", {digest(s) for s in (1, 2, 3, 4, 9)})
    assert sorted(got) == sorted(digest(s) for s in (1, 2, 3, 4))  # 9 is nowhere
    assert got[digest(1)] == thumb_line(1)
    assert got[digest(2)].name == "img/from shard 1.png"  # the line with a thumbnail beats shard 0's line without one
    assert got[digest(3)] == thumb_line(3)  # shard 0's broken and torn lines of it are passed over
    assert got[digest(4)].name == "img/picture 4.png"  # two good lines: the first stands
    assert read_thumbnails(dirs, "arith", {digest(1)}) == {digest(1): thumb_line(1)}
    assert read_thumbnails(dirs, "arith", set()) == {}
    assert read_thumbnails(dirs, "other bench", {digest(1)}) == {}


def test_reader_of_a_merge_reads_its_shards_and_an_image_without_any_thumbnail_is_still_named(tmp_path):
    run = image_run(tmp_path / "run", lines_of=lambda idx, sent: [thumb_line(s, thumbnail=None if s == 0 else True) for s in sent])
    got = read_thumbnails(merge_run(str(run)), "arith", {digest(0), digest(7)})
    assert got[digest(0)].thumbnail is None and got[digest(0)].name == "img/picture 0.png"
    assert got[digest(7)] == thumb_line(7)


def test_reader_holds_the_asked_thumbnails_not_the_file(tmp_path):
    """4,000 thumbnails near the 8 KiB limit (36 MB of lines); three asked for: the read's peak
    memory is a few lines', not the file's."""
    folder = tmp_path / "shard_0" / "arith"
    folder.mkdir(parents=True)
    big = thumb_line(0, noise=True)
    assert len(big.thumbnail) > 8000
    with open(folder / IMAGES_FILE, "wb") as f:
        for s in range(4000):
            f.write(msgspec.json.encode(msgspec.structs.replace(big, sha256=digest(s))) + b"\n")
    size = (folder / IMAGES_FILE).stat().st_size
    assert size > 30_000_000
    tracemalloc.start()
    try:
        got = read_thumbnails([tmp_path / "shard_0"], "arith", {digest(5), digest(2500), digest(3999)})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sorted(got) == sorted(digest(s) for s in (5, 2500, 3999))
    assert peak < 1_000_000, f"peak {peak} bytes reading a {size}-byte images.jsonl"


def test_reader_skips_an_overlong_line_and_a_fifo_without_holding_or_waiting(tmp_path):
    folder = tmp_path / "shard_0" / "arith"
    folder.mkdir(parents=True)
    huge = b'{"sha256": "' + digest(1).encode() + b'", "name": "' + b"x" * 3_000_000 + b'"}\n'
    write_lines(folder / IMAGES_FILE, [huge, thumb_line(2)])
    tracemalloc.start()
    try:
        got = read_thumbnails([tmp_path / "shard_0"], "arith", {digest(1), digest(2)})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == {digest(2): thumb_line(2)} and peak < 1_500_000
    fifo = tmp_path / "shard_1" / "arith"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / IMAGES_FILE)  # no writer ever comes: an open that waited would hang here
    assert read_thumbnails([tmp_path / "shard_1"], "arith", {digest(1)}) == {}


# --- the page --------------------------------------------------------------------------------------


def test_items_show_their_thumbnails_from_the_data_urls_and_their_names_as_text(tmp_path):
    run = image_run(tmp_path / "run", images_of=lambda p: [p, 100 + p])
    html = report(run)
    sources = drawn_sources(html)
    expected = {webp(s)[0] for p in range(12) for s in (p, 100 + p)}
    assert len(sources) == 24 and set(sources) == expected  # every item's two images, each its own line's data URL
    detail = html.split('id="i-arith-3"', 1)[1].split("</details>", 1)[0]
    url, w, h = webp(103)
    assert f'<img src="{url}" width="{w}" height="{h}" alt="img/picture 103.png">' in detail
    assert "640×480, 1.1 KiB, sha256 " + digest(103)[:12] in detail
    assert detail.index(webp(3)[0]) < detail.index(webp(103)[0])  # in the order the problem showed them


def test_a_text_benchmark_page_has_no_images_part():
    from shardeval_pages.report_page import gallery, ThumbnailBudget

    assert gallery([], {}, ThumbnailBudget()) == ""


def test_at_most_four_thumbnails_per_item_and_the_rest_counted(tmp_path):
    run = image_run(tmp_path / "run", n=2, shards=1, images_of=lambda p: list(range(10 * p, 10 * p + 7)))
    html = report(run)
    for p in range(2):
        detail = html.split(f'id="i-arith-{p}"', 1)[1].split("</details>", 1)[0]
        assert drawn_sources(detail) == [webp(s)[0] for s in range(10 * p, 10 * p + 4)]
        assert '<span class="muted thumbs-more">+3 more</span>' in detail


def test_missing_or_foreign_thumbnails_are_text_placeholders_never_fetched_sources(tmp_path):
    """No line, a null thumbnail, or a line whose `thumbnail` is not an embedded raster image (a
    path, an http URL, SVG, script, markup): each image is named as text, nothing is drawn from it."""
    odd = {
        1: None,
        2: "/etc/passwd",
        3: "http://127.0.0.1:9/x.png",
        4: "data:image/svg+xml;base64,PHN2Zz4=",
        5: "javascript:alert(1)",
        6: 'data:image/png;base64,AAAA" onerror="alert(1)',
        7: "data:text/html;base64,PGI+",
        8: "data:image/webp;base64," + "A" * 20_000,
    }
    run = image_run(
        tmp_path / "run",
        n=10,
        images_of=lambda p: [p],
        lines_of=lambda idx, sent: [thumb_line(s, thumbnail=odd.get(s, True)) for s in sent if s != 9],
    )
    html = report(run)
    assert set(drawn_sources(html)) == {webp(0)[0]}
    for s in range(1, 10):
        detail = html.split(f'id="i-arith-{s}"', 1)[1].split("</details>", 1)[0]
        assert "<img" not in detail and 'class="thumb-missing"' in detail
        assert "sha256 " + digest(s)[:12] in detail
        if s != 9:
            assert "img/picture " + str(s) + ".png" in detail  # named as the data named it
    assert "no thumbnail in the shards" in html.split('id="i-arith-9"', 1)[1].split("</details>", 1)[0]
    for bad in ("/etc/passwd", "http://127.0.0.1:9", "svg+xml", "javascript:", "onerror", "text/html"):
        assert bad not in html.split("<script>", 1)[0], bad


def test_the_page_embeds_at_most_its_thumbnail_budget_whatever_the_run_size(tmp_path):
    """60 items (20 lowest, 20 of most disagreement, 20 with errors) x 4 near-8-KiB thumbnails is
    about 2.6 MB of thumbnails; the page draws 1 MiB of them and names the rest as text."""

    def score(p: int, r: int) -> float:
        return [0.0, 1.0][r] if p < 40 else 0.0

    n = 200
    run = image_run(
        tmp_path / "run",
        n=n,
        images_of=lambda p: [4 * p + k for k in range(4)],
        score=score,
        lines_of=lambda idx, sent: [thumb_line(s, noise=True) for s in sent],
    )
    html = report(run)
    sources = drawn_sources(html)
    figures = html.count('<figure class="thumb"')
    assert figures == 4 * len(re.findall(r'<details class="item"', html)) >= 4 * 40
    drawn = sum(map(len, sources))
    assert 0 <= report_page.PAGE_THUMBNAIL_BYTES - drawn < max(map(len, sources))  # spent, to within one thumbnail
    left_out = html.count("left out: the page holds its")
    assert left_out == figures - len(sources) > 0
    assert len(html.split("<script>", 1)[0]) < report_page.PAGE_THUMBNAIL_BYTES + 600_000


# --- in the browser --------------------------------------------------------------------------------


def open_items(v) -> None:
    v.page.evaluate("() => document.querySelectorAll('details.item').forEach(d => { d.open = true; })")
    v.page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=10_000)


def test_thumbnails_render_in_chromium_and_hostile_names_stay_text(tmp_path, browser):
    names = {0: HOSTILE_NAMES[0], 1: HOSTILE_NAMES[1], 2: HOSTILE_NAMES[2], 5: HOSTILE_NAMES[0] + " (no thumbnail)"}
    run = image_run(
        tmp_path / "run",
        n=6,
        images_of=lambda p: [p],
        lines_of=lambda idx, sent: [thumb_line(s, names.get(s), thumbnail=s != 5 or None) for s in sent],
    )
    assert shardeval_cmd("merge", str(run), "-q").returncode == 0
    page = run / "merged" / "report.html"
    with visit(browser, page.as_uri(), ready=READY) as v:
        dialogs: list[str] = []
        v.page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        open_items(v)
        assert v.page.evaluate(READY) == "drawn" and v.errors() == [] and v.foreign_requests() == []
        images = v.page.evaluate(
            "() => Array.from(document.images).map(i => [i.currentSrc.slice(0, 23), i.naturalWidth, i.naturalHeight, i.alt])"
        )
        assert len(images) == 5  # image 5 has no thumbnail: a placeholder
        for (src, w, h, alt), s in zip(images, range(5)):
            assert src == "data:image/webp;base64," and (w, h) == (96, 64)
            assert alt == names.get(s, f"img/picture {s}.png")  # the attribute holds the whole hostile name, as text
        assert v.page.evaluate("() => window.pwned") is None and dialogs == []
        assert (
            v.page.evaluate(
                "() => document.querySelectorAll('.thumbs svg, .thumbs script, .thumbs img:not([src^=\"data:image/webp\"])').length"
            )
            == 0
        )
        assert v.page.evaluate("() => document.querySelectorAll('script').length") == 3  # the page's own
        captions = v.page.evaluate("() => Array.from(document.querySelectorAll('.thumb-name')).map(e => e.textContent)")
        assert captions == [names.get(s, f"img/picture {s}.png") for s in range(6)]
        titles = v.page.evaluate("() => Array.from(document.querySelectorAll('figure.thumb')).map(e => e.title)")
        assert titles[1] == HOSTILE_NAMES[1] + f"\n640×480, 1001 B, sha256 {digest(1)[:12]}"
        missing = v.page.evaluate("() => document.querySelector('[id=\"i-arith-5\"] figure.thumb').textContent")
        assert missing.startswith("no thumbnail") and names[5] in missing  # a placeholder, too, names its image as text
    assert dialogs == []


# --- end to end ---------------------------------------------------------------------------------


def test_a_real_image_run_against_the_simulator_shows_its_thumbnails_after_merge(tmp_path, browser):
    """A JSONL benchmark whose rows show PNGs (one of them under a hostile file name), asked of the
    simulator in two shards, merged: report.html draws the thumbnails the shards kept."""
    (tmp_path / "img").mkdir()
    files = ["dots 1.png", "dots 2.png", HOSTILE_NAMES[0], "dots 4.png"]
    for k, file in enumerate(files):
        im = Image.new("RGB", (120, 80), "white")
        for d in range(k + 1):
            ImageDraw.Draw(im).ellipse((5 + 20 * d, 30, 20 + 20 * d, 45), fill="red")
        im.save(tmp_path / "img" / file, format="PNG")
    rows = [
        {"id": f"q{k}", "question": "How many dots? <image>", "answer": str(k + 1), "images": [f"img/{file}"]}
        for k, file in enumerate(files)
    ]
    rows.append(
        {
            "id": "pair",
            "question": "Which has more, <image> or <image>?",
            "answer": "second",
            "images": [f"img/{files[0]}", f"img/{files[3]}"],
        }
    )
    data = tmp_path / "dots.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with running_sim("--ttft-ms", "0", "--itl-ms", "0") as url:
        cfg = tmp_path / "run.yaml"
        cfg.write_text(
            f"services:\n  model: {{type: api, url: {url}, model: sim}}\n"
            f"benchmarks:\n  - name: {data}\n    repeats: 2\noutput: {{dir: {tmp_path / 'out'}, progress_interval_s: 0}}\n"
        )
        for i in range(2):
            done = shardeval_cmd("run", str(cfg), "--shard", f"{i}/2", "-o", str(tmp_path / "out" / f"shard_{i}"))
            assert done.returncode in (0, 3), done.stderr
    merged = shardeval_cmd("merge", str(tmp_path / "out"), "-q")
    assert merged.returncode in (0, 3), merged.stderr
    kept = {
        json.loads(line)["sha256"]: json.loads(line)
        for i in range(2)
        for line in (tmp_path / "out" / f"shard_{i}" / "dots" / IMAGES_FILE).read_text().splitlines()
    }
    assert len(kept) == 4 and {t["name"] for t in kept.values()} == {f"img/{f}" for f in files}
    html = (tmp_path / "out" / "merged" / "report.html").read_text()
    items = len(re.findall(r'<details class="item"', html))
    assert items >= 1
    with visit(browser, (tmp_path / "out" / "merged" / "report.html").as_uri(), ready=READY) as v:
        dialogs: list[str] = []
        v.page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        open_items(v)
        assert v.errors() == [] and v.foreign_requests() == []
        shown = v.page.evaluate("() => Array.from(document.images).map(i => [i.currentSrc, i.naturalWidth, i.alt])")
        assert shown and all(w > 0 for _, w, _ in shown)
        assert {src for src, _, _ in shown} <= {t["thumbnail"] for t in kept.values()}
        assert {alt for _, _, alt in shown} <= {t["name"] for t in kept.values()}
        captions = v.page.evaluate("() => Array.from(document.querySelectorAll('.thumb-name')).map(e => e.textContent)")
        assert len(captions) == len(shown) and f"img/{HOSTILE_NAMES[0]}" in captions
        assert v.page.evaluate("() => document.querySelectorAll('.thumbs img').length") == len(shown)
    assert dialogs == []
