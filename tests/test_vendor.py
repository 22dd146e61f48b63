"""plugins/shardeval_pages/vendor.py, the fetch of the pages' JavaScript, against the real npm
registry and the tarball cache scripts/setup/vega.sh filled: files written once and then left
alone, each checked against the lock, and a tarball that is not the locked one refused in one
line with nothing written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO
from shardeval_pages import vendor

PAGES = Path(REPO) / "plugins" / "shardeval_pages"


def tree(tmp: Path, lock: dict | None = None) -> Path:
    """A pages folder holding only the lock (the repo's, or `lock`)."""
    root = tmp / "pages"
    root.mkdir()
    if lock is None:
        shutil.copy(PAGES / vendor.LOCK, root / vendor.LOCK)
    else:
        (root / vendor.LOCK).write_text(json.dumps(lock))
    return root


def test_fetch_writes_the_locked_files_once(tmp_path):
    root = tree(tmp_path)
    first = vendor.fetch(root)  # the default cache: offline after scripts/setup/vega.sh
    assert first == [
        "vega 6.2.0: vendor/vega.min.js written",
        "vega-lite 6.4.1: vendor/vega-lite.min.js written",
        "vega-embed 7.0.2: vendor/vega-embed.min.js written",
    ]
    for name in ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js"):
        assert (root / "vendor" / name).read_bytes() == (PAGES / "vendor" / name).read_bytes()
    assert all(line.endswith("up to date") for line in vendor.fetch(root))
    (root / "vendor" / "vega.min.js").write_text("tampered")  # a file that is not the tarball's is put back
    assert vendor.fetch(root)[0] == "vega 6.2.0: vendor/vega.min.js written"
    assert (root / "vendor" / "vega.min.js").read_bytes() == (PAGES / "vendor" / "vega.min.js").read_bytes()


def test_a_tarball_whose_hash_is_not_the_locks_is_refused(tmp_path):
    lock = json.loads((PAGES / vendor.LOCK).read_text())
    vega, embed = lock["packages"][0], lock["packages"][2]
    vega["integrity"] = embed["integrity"]  # the registry's vega 6.2.0 is not this
    root = tree(tmp_path, lock)
    cache = tmp_path / "cache"  # empty: the real registry is asked
    try:
        vendor.fetch(root, cache)
    except vendor.IntegrityMismatch as refused:
        line = str(refused)
    else:
        raise AssertionError("a tarball that is not the locked one was taken")
    assert "\n" not in line and line.startswith("vega 6.2.0: downloaded sha512-") and embed["integrity"] in line
    assert not (root / "vendor").exists() and not list(cache.glob("*.tgz"))


def test_javascript_is_the_three_files_in_load_order():
    """vega-lite's build needs the global `vega`, vega-embed's both: the page's one script holds
    them in that order, each file whole."""
    files = [(PAGES / "vendor" / name).read_text() for name in ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js")]
    assert vendor.javascript() == "\n".join(files)
    assert ".vega={}" in files[0] and ".vegaLite={}" in files[1] and ".vegaEmbed=" in files[2]


def test_the_command_line_says_what_it_did(tmp_path):
    proc = subprocess.run([sys.executable, str(PAGES / "vendor.py"), "fetch"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"vendor: {line}"
        for line in (
            "vega 6.2.0: vendor/vega.min.js up to date",
            "vega-lite 6.4.1: vendor/vega-lite.min.js up to date",
            "vega-embed 7.0.2: vendor/vega-embed.min.js up to date",
        )
    ]
