"""report.html from the one file: the archive carries the pages' JavaScript (Vega, Vega-Lite,
vega-embed, pinned in plugins/shardeval_pages/vega.lock.json), and `shardeval.pyz merge` in a
fresh HOME, with no vl-convert anywhere, writes a page whose charts draw in headless chromium
without a single request beyond the page itself.

Nothing is mocked: the archive is the one build/build.sh makes; the run is a real sharded
evaluation against the built-in simulator, made by the one file too.
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

import pytest

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from zipapp_support import REPO, built_zipapp, interpreters, run, write_config

pytestmark = pytest.mark.timeout(600)
LOCK = REPO / "plugins" / "shardeval_pages" / "vega.lock.json"
READY = "document.body.dataset.charts"


def vendored() -> list[str]:
    """The files the lock says a page inlines, as the archive's payload names them."""
    entries = json.loads(LOCK.read_text())["packages"]
    return [f"site-packages/shardeval_pages/vendor/{entry['file'].rsplit('/', 1)[-1]}" for entry in entries]


@pytest.fixture(scope="module")
def pyz() -> Path:
    return built_zipapp()


def test_the_archive_carries_the_vega_bundles(pyz):
    with zipfile.ZipFile(pyz) as outer:
        payload = zipfile.ZipFile(io.BytesIO(outer.read("payload.zip")))
    names = set(payload.namelist())
    assert {"vega.min.js", "vega-lite.min.js", "vega-embed.min.js"} == {name.rsplit("/", 1)[-1] for name in vendored()}
    for name in vendored():
        assert name in names, name
        text = payload.read(name).decode()
        assert len(text) > 10_000 and "globalThis" in text  # the UMD browser build, not a stub
    assert not [name for name in names if "vl_convert" in name]


def test_merge_with_the_one_file_writes_a_page_that_draws_offline(pyz, tmp_path, browser):
    python = interpreters()[f"{sys.version_info[0]}.{sys.version_info[1]}"]
    # No vl_convert: not in the archive (above), and one that refuses to import comes first on the path.
    blocker = tmp_path / "blocked" / "vl_convert"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('vl_convert blocked for this test')\n")
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "SHARDEVAL_ZIPAPP_ROOT": str(tmp_path / "root"), "PYTHONPATH": str(tmp_path / "blocked")}
    out = tmp_path / "out"
    config = write_config(tmp_path, out, n=20)
    made = run([python, str(pyz), "run", str(config)], env=env)
    assert made.returncode == 0, made.stderr[-3000:]
    (out / "merged").rename(tmp_path / "run-merge")  # the orchestrator's merge wrote one: the test is `merge`
    merged = run([python, str(pyz), "merge", str(out)], env=env)
    assert merged.returncode == 0, merged.stderr[-3000:]
    assert "not written" not in merged.stderr, merged.stderr
    page = out / "merged" / "report.html"
    assert page.is_file()
    assert not list((tmp_path / "root").rglob("vl_convert*"))  # nothing extracted it either
    url = page.as_uri()
    with visit(browser, url, ready=READY) as v:
        assert v.page.evaluate(READY) == "drawn"
        assert v.errors() == [], v.errors()
        assert [r for r in v.requests if not r.startswith(("data:", "blob:", "about:"))] == [url], v.requests
        charts = v.chart_marks()
        assert charts, "no chart on the page"
        for chart in charts:
            assert chart["svgs"] >= 1 and chart["marks"] > 0, chart
