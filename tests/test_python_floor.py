"""The one file runs on Python 3.10 (pyproject's requires-python), while the venv and the type checker
run 3.11: a name of the standard library new in 3.11 or later, used at run time by the core or a
plugin, passes every 3.11 test and breaks every shard on a 3.10 node. Only the zipapp's test on a
3.10 interpreter, deep in the slow tier, found the last one (`typing.Unpack`). This reads the code
instead, in the quick tier: names used only for the type checker (under `if TYPE_CHECKING:`) are
free, as annotations stay strings there.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO

# What 3.11, 3.12 and 3.13 added to the standard library that code would import or call by name
# (the "What's New" pages of each release).
NEWER = {
    "typing": {
        "Self", "LiteralString", "Never", "assert_never", "assert_type", "reveal_type", "dataclass_transform",
        "Unpack", "TypeVarTuple", "Required", "NotRequired", "get_overloads", "clear_overloads",
        "override", "TypeAliasType", "ReadOnly", "TypeIs", "NoDefault",
    },
    "enum": {"StrEnum", "ReprEnum", "verify", "member", "nonmember", "global_enum", "EnumCheck", "FlagBoundary"},
    "datetime": {"UTC"},
    "asyncio": {"TaskGroup", "timeout", "timeout_at", "Timeout", "Runner"},
    "hashlib": {"file_digest"},
    "itertools": {"batched"},
    "contextlib": {"chdir"},
}  # fmt: skip
NEW_MODULES = {"tomllib", "wsgiref.types"}
NEW_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}


def runtime_nodes(tree: ast.Module) -> list[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:`."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    return [n for n in ast.walk(tree) if id(n) not in skipped]


def too_new(tree: ast.Module) -> list[str]:
    found = []
    for node in runtime_nodes(tree):
        if isinstance(node, ast.ImportFrom) and node.module in NEWER:
            found += [f"from {node.module} import {a.name}" for a in node.names if a.name in NEWER[node.module]]
        elif isinstance(node, ast.ImportFrom) and node.module in NEW_MODULES:
            found.append(f"from {node.module} import …")
        elif isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name in NEW_MODULES]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr in NEWER.get(node.value.id, ()):
            found.append(f"{node.value.id}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in NEW_BUILTINS:
            found.append(node.id)
        elif isinstance(node, ast.TryStar):
            found.append("except*")
    return found


def sources() -> list[Path]:
    root = Path(REPO)
    files = [*(root / "core").rglob("*.py"), *(root / "plugins").rglob("*.py"), *(root / "shims").rglob("*.py")]
    return [f for f in files if "vendor" not in f.parts]


def test_no_standard_library_name_newer_than_3_10_at_run_time() -> None:
    files = sources()
    assert len(files) > 150  # the tree was read
    found = {str(f.relative_to(REPO)): names for f in files if (names := too_new(ast.parse(f.read_text(encoding="utf-8"))))}
    assert found == {}, "used at run time, new after Python 3.10 (import it under `if TYPE_CHECKING:`, or do without):\n" + "\n".join(
        f"{path}: {', '.join(names)}" for path, names in found.items()
    )


@pytest.mark.parametrize(
    "source, names",
    [
        ("from typing import TypedDict, Unpack\n", ["from typing import Unpack"]),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from typing import Unpack\n", []),
        ("import datetime\nx = datetime.UTC\n", ["datetime.UTC"]),
        ("import tomllib\n", ["import tomllib"]),
        ("try:\n    pass\nexcept* ValueError:\n    pass\n", ["except*"]),
        ("raise ExceptionGroup('x', [])\n", ["ExceptionGroup"]),
    ],
)
def test_the_check_finds_what_3_10_lacks_and_passes_what_the_type_checker_alone_reads(source: str, names: list[str]) -> None:
    assert too_new(ast.parse(source)) == names
