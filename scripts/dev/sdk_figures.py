"""The figures issue 41 asks for, measured on a source tree: `python scripts/dev/sdk_figures.py [ROOT]`.

Each is read from the files (no import of the code but the SDK lists), so the same command runs on
an old checkout: SDK names (per role where the SDK has roles), parameters typed `Any` or not typed
(core, plugins, and at the plugin boundary: hook specs and hook implementations), the longest core
function, JavaScript/CSS lines inside Python strings, and the places a built-in plugin is named in
pyproject.toml. The type checker's and radon's counts come from their own commands (printed).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

JS_OR_CSS = re.compile(r"(\bfunction\s*\(|=>|\bconst\s+\w+\s*=|document\.|^\s*[.#]?[\w-]+\s*\{|;\s*}$|:\s*[\w#-]+;\s*$)")


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    args = function.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, [args.vararg, args.kwarg])]
    return [a for a in every if a.arg not in ("self", "cls")]


def is_any(annotation: ast.expr | None) -> bool:
    """Not typed, or typed `Any` (bare or as a string)."""
    if annotation is None:
        return True
    text = ast.unparse(annotation).strip("'\"")
    return text in ("Any", "typing.Any")


def is_hook(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(d).split("(")[0].endswith(("hookimpl", "hookspec")) for d in function.decorator_list)


def any_share(files: list[Path], only_hooks: bool = False) -> tuple[int, int]:
    loose = total = 0
    for path in files:
        for function in functions(ast.parse(path.read_text(encoding="utf-8"))):
            if only_hooks and not is_hook(function):
                continue
            for arg in parameters(function):
                total += 1
                loose += is_any(arg.annotation)
    return loose, total


def longest_function(files: list[Path], root: Path) -> tuple[int, str]:
    best = (0, "")
    for path in files:
        for function in functions(ast.parse(path.read_text(encoding="utf-8"))):
            lines = (function.end_lineno or function.lineno) - function.lineno + 1
            best = max(best, (lines, f"{path.relative_to(root)}:{function.lineno} {function.name}"))
    return best


def js_css_lines_in_strings(files: list[Path]) -> int:
    """Lines of string constants (of 3 lines or more) that read as JavaScript or CSS."""
    count = 0
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.count("\n") >= 2:
                lines = node.value.splitlines()
                code = [line for line in lines if JS_OR_CSS.search(line)]
                if len(code) * 3 >= len(lines):  # mostly code, not a docstring that mentions some
                    count += len(lines)
    return count


def sdk_names(root: Path) -> dict[str, int]:
    """Names per role: the role modules' lists where the SDK is a package, else the flat list's groups."""
    package = root / "core" / "shardeval" / "api"
    if package.is_dir():
        sys.path[:0] = [str(root / "core")]
        from shardeval.api import roles  # type: ignore[import-not-found,unused-ignore]

        return {role: len(names) for role, names in roles.ROLES.items()}
    source = (root / "core" / "shardeval" / "api.py").read_text(encoding="utf-8")
    block = source[source.index("_LAZY") : source.index("_WHERE")]
    per_group: dict[str, int] = {}
    group = "hookimpl"
    for line in block.splitlines():
        comment = re.match(r"\s*# ([^:]+?)(:|$)", line)
        if comment:
            group = comment.group(1)
        for text in re.findall(r'"([^"]*)"', line):
            if not text.startswith("shardeval"):
                per_group[group] = per_group.get(group, 0) + len(text.split())
    return per_group


def main(root: Path) -> None:
    core, plugins = python_files(root / "core" / "shardeval"), python_files(root / "plugins")
    names = sdk_names(root)
    print(f"SDK names: {sum(names.values())} in all")
    for role, count in names.items():
        print(f"  {count:4d}  {role}")
    for label, files in (("core", core), ("plugins", plugins)):
        loose, total = any_share(files)
        print(f"parameters Any or untyped, {label}: {loose}/{total} = {loose / total:.1%}")
    hooks = [p for p in core if p.name == "hookspecs.py"] + plugins
    loose, total = any_share(hooks, only_hooks=True)
    print(f"hook parameters Any or untyped (specs and implementations): {loose}/{total}")
    lines, where = longest_function(core, root)
    print(f"longest core function: {lines} lines ({where})")
    print(f"JS/CSS lines in Python strings: {js_css_lines_in_strings(core + plugins)}")
    project = (root / "pyproject.toml").read_text(encoding="utf-8")
    built_ins = sorted(p.name for p in (root / "plugins").iterdir() if (p / "__init__.py").exists())
    named = {name: len(re.findall(rf'"{name}"', project)) for name in built_ins}
    print(f"places a built-in is named in pyproject.toml: {max(named.values())} (each of {len(built_ins)} built-ins)")
    print(
        "type errors: python -m mypy (see tests/test_static_types.py); "
        "radon D or worse: radon cc -s -n D core plugins | grep -c ' - [D-F] '"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
