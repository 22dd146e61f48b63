"""shardeval without the charts' JavaScript, as a source tree that never ran the fetch
(plugins/shardeval_pages/vendor.py): a copy of the pages plugin without its vendor/ folder, first
on a child's PYTHONPATH. No knob in the code: the child imports a package that lacks the files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import shardeval_pages

# What the one line names: the command that fetches the files.
FETCH_HINT = "vendor.py fetch"


def without_javascript(tmp: Path) -> dict[str, str]:
    """Environment for a child process whose pages plugin has no vendor/ files."""
    source = Path(shardeval_pages.__file__).resolve().parent
    folder = tmp / "no-javascript"
    shutil.copytree(source, folder / source.name, ignore=shutil.ignore_patterns("vendor", "__pycache__"), dirs_exist_ok=True)
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
