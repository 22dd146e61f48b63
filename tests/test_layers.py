"""The layers are held by a contract (README "Where things live"): `lint-imports` over the
contracts in pyproject.toml passes, and breaks when an import crosses a layer; no module of the
core or a plugin is part of an import cycle; the core imports its own modules inside functions
only for the `--help`/`--version` fast path (or a heavy optional dependency).

Every check reads the source tree under test (core/, plugins/ of this checkout, or a copy of
them), never an installed copy: the subprocesses get PYTHONPATH pointing at it, which is searched
before an editable install's finder.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

CORE = Path(REPO) / "core" / "shardeval"
PLUGINS = Path(REPO) / "plugins"
# Function-level imports of shardeval modules the core may keep (issue 25: from 116; 21 since
# issue 42: cli.py's `watch` command, 22 since issue 43: `prepare`, 24 since its merge reads the preparation:
# cli.py's `merge` and launch/prepare.py's runner, which a merge must not import; each command loads its
# implementation when it runs).
MAX_FUNCTION_LEVEL = 24


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` with the contracts of `root`/pyproject.toml, over the packages under `root`."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "core"), str(root / "plugins")]),
        "COLUMNS": "300",
        "NO_COLOR": "1",
    }  # no wrapped lines: the assertions read them
    command = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", command, "pyproject.toml", "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


def root_packages() -> list[str]:
    return ["shardeval", *sorted(p.name for p in PLUGINS.iterdir() if (p / "__init__.py").exists())]


def test_the_contracts_hold() -> None:
    done = lint_imports(Path(REPO))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_every_plugin_and_core_room_is_in_the_contracts() -> None:
    """A new plugin or room of the core cannot slip past the contracts unnamed."""
    import tomllib

    project = tomllib.loads((Path(REPO) / "pyproject.toml").read_text())
    config = project["tool"]["importlinter"]
    contracts = {c["type"]: c for c in config["contracts"] if c["type"] != "forbidden"}
    forbidden = [c for c in config["contracts"] if c["type"] == "forbidden"]
    plugins = [name for name in root_packages() if name != "shardeval"]
    # One list of the built-ins, the folders under plugins/: the entry points and every contract follow it.
    assert sorted(project["project"]["entry-points"]["shardeval"].values()) == sorted(plugins)
    assert sorted(config["root_packages"]) == sorted(["shardeval", *plugins])
    assert sorted(contracts["independence"]["modules"]) == sorted(plugins)
    assert sorted(contracts["acyclic_siblings"]["ancestors"]) == sorted(["shardeval", *plugins])
    core_only, plugins_only = forbidden
    assert sorted(core_only["forbidden_modules"]) == sorted(plugins)
    assert sorted(plugins_only["source_modules"]) == sorted(plugins)
    rooms = {p.stem for p in CORE.iterdir() if p.suffix == ".py" and p.stem != "__init__"}
    rooms |= {p.name for p in CORE.iterdir() if (p / "__init__.py").exists()}
    assert sorted(m.removeprefix("shardeval.") for m in plugins_only["forbidden_modules"]) == sorted(rooms - {"api"})


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    """A copy of the tree's packages and contracts with `files` (path: source) added."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(Path(REPO) / "core", tmp_path / "core", ignore=ignore)
    shutil.copytree(PLUGINS, tmp_path / "plugins", ignore=ignore)
    shutil.copy(Path(REPO) / "pyproject.toml", tmp_path / "pyproject.toml")
    for path, source in files.items():
        (tmp_path / path).write_text(source)
    return tmp_path


def test_a_planted_violation_breaks_the_contracts(tmp_path: Path) -> None:
    """A core module importing a plugin (inside a function: those count too), a plugin importing
    a core internal, and a store module reaching up into run: each is named."""
    plugin = "shardeval_pages"
    root = plant(
        tmp_path,
        {
            "core/shardeval/store/planted.py": f"def draw():\n    import {plugin}\n\n    return {plugin}\n",
            "plugins/shardeval_sim/planted.py": "from shardeval.run.runner import ShardRun\n",
            "core/shardeval/store/planted_up.py": "from shardeval.run import runner\n",
        },
    )
    done = lint_imports(root)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert f"shardeval.store.planted -> {plugin}" in out
    assert "shardeval_sim.planted -> shardeval.run.runner" in out
    assert "shardeval.store.planted_up -> shardeval.run" in out
    for contract in (
        "The core never imports a plugin: it reaches them through hooks",
        "A plugin imports from shardeval only shardeval.api (and shardeval's __version__)",
        "Core in layers: a room imports only the rooms below it",
    ):
        assert re.search(re.escape(contract) + r"\s*BROKEN", out), contract


def test_a_planted_cycle_is_named(tmp_path: Path) -> None:
    """A loop through a function-level import, between a package and its own module, which the
    acyclic_siblings contract (siblings only) would not see."""
    root = plant(
        tmp_path,
        {
            "core/shardeval/store/planted.py": "def back():\n    from shardeval.store import planted_pair\n",
            "core/shardeval/store/planted_pair.py": "from shardeval.store import planted\n",
        },
    )
    with pytest.raises(
        AssertionError,
        match=r"shardeval\.store\.planted -> shardeval\.store\.planted_pair -> "
        r"shardeval\.store\.planted",
    ):
        assert_no_cycles(import_graph(root))


def import_graph(root: Path) -> dict[str, set[str]]:
    """{module: the modules it imports} for the packages under `root` (grimp, import-linter's
    graph: function-level imports included; imports under TYPE_CHECKING, annotations that never
    run, left out). Built in a subprocess, whose PYTHONPATH finds `root`'s packages."""
    code = (
        "import json, sys, grimp\n"
        f"graph = grimp.build_graph(*{root_packages()!r}, exclude_type_checking_imports=True, cache_dir=None)\n"
        "json.dump({m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}, sys.stdout)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "core"), str(root / "plugins")])}
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return {module: set(imported) for module, imported in json.loads(done.stdout).items()}


def assert_no_cycles(graph: dict[str, set[str]]) -> None:
    """Fail naming one loop of each strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:  # recursion depth is bounded by the number of modules (~150)
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    loops = [" -> ".join(one_loop(graph, group)) for group in groups]
    assert not loops, "import cycles:\n" + "\n".join(loops)


def one_loop(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for imported in sorted(graph[module] & members):
                if imported == start:
                    return [*paths[module], start]
                if imported not in paths:
                    paths[imported] = [*paths[module], imported]
                    following.append(imported)
        frontier = following
    return group


def test_no_module_is_part_of_an_import_cycle() -> None:
    assert_no_cycles(import_graph(Path(REPO)))


def function_level_imports() -> list[str]:
    """`file:line: statement` for each import of a shardeval module inside a function of the core."""
    found = []
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.ImportFrom):
                    names = [("." * node.level) + (node.module or "")]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                ours = [n for n in names if n.startswith((".", "shardeval"))]
                if ours:
                    found.append((str(path.relative_to(REPO)), node.lineno, ast.unparse(node)))
    return [f"{path}:{line}: {statement}" for path, line, statement in sorted(set(found))]


def test_few_function_level_imports_in_the_core() -> None:
    """Imports inside functions hide the layering and loops; the core keeps them for the command
    line's fast path (cli.py loads a command's implementation when it runs) and heavy optional
    dependencies only."""
    found = function_level_imports()
    assert len(found) <= MAX_FUNCTION_LEVEL, f"{len(found)} function-level imports (at most {MAX_FUNCTION_LEVEL}):\n" + "\n".join(found)
    assert found, "the count walked no file"  # cli.py keeps its lazy imports: the walk must see them


def test_no_core_module_names_a_page() -> None:
    """The pages are the shardeval_pages plugin's: the core reaches them only through the page hooks."""
    pages = re.compile(r"\b(report_html|sweep_html|status_serve|html_page|compare_html|shardeval_pages\.\w+)\b|\bimport charts\b")
    named = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in sorted(CORE.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pages.search(line)
    ]
    assert not named, "core modules that name a page module:\n" + "\n".join(named)
