"""No code tests a service or orchestrator type name outside the plugin that registers it.

Orchestrators and the core ask a service's config (managed(), launch_line(), gpus(), ...) and a
cluster's config (runs_in_process()) instead, and a plugin never imports another plugin: what
they share lives in the core. The scan is over the source (ast), so it covers code no test runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

ROOT = Path(REPO)
HOOKS = ("register_services", "register_orchestrators")


def owner(path: Path) -> str:
    """The plugin package a source file belongs to, or "core"."""
    rel = path.relative_to(ROOT)
    return rel.parts[1] if rel.parts[0] == "plugins" else "core"


def sources() -> list[Path]:
    return sorted(p for top in ("core", "plugins") for p in (ROOT / top).rglob("*.py"))


def registered_types() -> dict[str, str]:
    """Type name -> the plugin that registers it, from `register("name", ...)` in its hooks."""
    names: dict[str, str] = {}
    for path in (ROOT / "plugins").glob("*/__init__.py"):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef) and fn.name in HOOKS:
                for call in ast.walk(fn):
                    if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant):
                        names[call.args[0].value] = owner(path)
    return names


def is_type_read(node: ast.AST, aliases: set[str]) -> bool:
    """`x.type`, `x["type"]`, `x.get("type", ...)`, or a name assigned from one of those."""
    if isinstance(node, ast.Attribute):
        return node.attr == "type"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "type"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "type"
    return isinstance(node, ast.Name) and node.id in aliases


def literals(node: ast.AST) -> list[str]:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def type_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, literal) for every comparison of a type read with a string literal."""
    aliases = {
        t.id
        for a in ast.walk(tree)
        if isinstance(a, ast.Assign) and any(is_type_read(n, set()) for n in ast.walk(a.value))
        for t in a.targets
        if isinstance(t, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(is_type_read(o, aliases) for o in operands):
                found += [(node.lineno, s) for o in operands for s in literals(o)]
    return found


def test_registered_types_are_found() -> None:
    names = registered_types()
    assert names["vllm"] == "shardeval_vllm" and names["slurm"] == "shardeval_slurm"
    assert {"sim", "api", "local", "ray", "kubernetes", "compose"} <= set(names)


def test_the_scan_sees_a_type_test() -> None:
    tree = ast.parse('if s.type == "vllm" or cfg.get("type") in ("sim", "x"):\n    k = c["type"]\n    k != "ray"')
    assert sorted(type_tests(tree)) == [(1, "sim"), (1, "vllm"), (1, "x"), (3, "ray")]


def test_no_type_name_is_tested_outside_its_plugin() -> None:
    names = registered_types()
    offences = []
    for path in sources():
        rel, here = str(path.relative_to(ROOT)), owner(path)
        for line, literal in type_tests(ast.parse(path.read_text())):
            if names.get(literal, here) != here:
                offences.append(f"{rel}:{line} tests type {literal!r} (registered by {names[literal]})")
    assert offences == []


def test_no_plugin_imports_another() -> None:
    offences = []
    for path in sources():
        here = owner(path)
        for node in ast.walk(ast.parse(path.read_text())):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module]
            for module in modules:
                top = module.split(".")[0]
                if top.startswith("shardeval_") and top != here:
                    offences.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {module}")
    assert offences == []
