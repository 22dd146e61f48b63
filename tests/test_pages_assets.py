"""The pages' scripts and styles are files of their own (issue 41, point 4).

About 300 lines of JavaScript and CSS lived in Python strings, where no tool reads them as what they
are. They are plugins/shardeval_pages/assets/*.js and *.css, shipped as package data (the fresh-venv
test writes report.html from an installed wheel), each script checked by Node's parser here, and
drawn in headless Chromium by the page tests as before. A string of script or style creeping back
into a module of core or plugins fails below.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

ASSETS = Path(REPO) / "plugins" / "shardeval_pages" / "assets"
SOURCES = [*sorted((Path(REPO) / "core").rglob("*.py")), *sorted((Path(REPO) / "plugins").rglob("*.py"))]
# What marks a text as script or style: a function, an arrow, a DOM call, a CSS rule with a property.
SCRIPT_OR_STYLE = re.compile(r"function\s*\(|=>\s*[{(]|document\.\w+\(|^[\w.#,:\s>-]+\{[\w-]+:[^}]*\}", re.M)


@pytest.mark.parametrize("name", sorted(p.name for p in ASSETS.glob("*.js")))
def test_each_script_parses(name: str) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/setup/vega.sh installs it with npm)")
    done = subprocess.run([node, "--check", str(ASSETS / name)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_the_assets_are_package_data_and_every_one_is_used() -> None:
    import tomllib

    data = tomllib.loads((Path(REPO) / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["shardeval_pages"]
    assert {"assets/*.js", "assets/*.css"} <= set(data)
    used = "".join(p.read_text() for p in (Path(REPO) / "plugins" / "shardeval_pages").glob("*.py"))
    assert all(f'asset("{p.name}")' in used for p in ASSETS.iterdir()), sorted(p.name for p in ASSETS.iterdir())


def test_no_module_holds_script_or_style_in_a_string() -> None:
    found = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and node.value.count("\n") >= 3
                and SCRIPT_OR_STYLE.search(node.value)
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, found


def test_the_check_would_see_a_script_in_a_string() -> None:
    assert SCRIPT_OR_STYLE.search("var x = 1;\nfunction (a) {\n  return a;\n}\n")
    assert SCRIPT_OR_STYLE.search("body{font:14px}\nh1{margin:0}\n")
    assert not SCRIPT_OR_STYLE.search("one line of prose,\nand another: {placeholders} kept\n")
