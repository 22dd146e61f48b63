"""Parameters and returns typed `Any` (or not typed) at the plugin boundary, per built-in plugin:
`python scripts/dev/plugin_boundary_any.py [ROOT] [PLUGIN ...]`.

The boundary is what the core calls: every `@hookimpl` function; every target a hook registers
(`register(name, target)` or `register(name, Lazy("module:attr"))`: a function whole, a class's
`__init__` and the methods its role names); and every method of a plugin class that overrides a
method of a shardeval.api class it derives from (Benchmark, RowsBenchmark, ServiceConfig, ...).
Read from the files alone (nothing is imported), so it runs on any checkout. `dict[str, Any]` is
counted apart: acceptable where the core's own signature says the mapping is free-form.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

Function = ast.FunctionDef | ast.AsyncFunctionDef
# What a registered class is called for, by role, where the role is a Protocol rather than a base.
ROLE_METHODS = {"solve", "solve_pairs"}


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def api_modules(root: Path) -> dict[str, str]:
    """Each shardeval.api name -> the core module that defines it (from the flat SDK's `_LAZY`, or
    the role modules' lists)."""
    flat = root / "core" / "shardeval" / "api.py"
    where: dict[str, str] = {}
    sources = [flat] if flat.exists() else sorted((root / "core" / "shardeval" / "api").glob("*.py"))
    for source in sources:
        for module, names in re.findall(r'\("(shardeval[\w.]*)",\s*((?:"[^"]*"\s*)+)\)', source.read_text(encoding="utf-8")):
            for name in " ".join(re.findall(r'"([^"]*)"', names)).split():
                where[name] = module
    return where


def core_class_methods(root: Path) -> dict[str, tuple[set[str], list[str]]]:
    """Every core class by name: its own method names and its base names (last component)."""
    classes: dict[str, tuple[set[str], list[str]]] = {}
    for path in (root / "core" / "shardeval").rglob("*.py"):
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ClassDef):
                methods = {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
                bases = [ast.unparse(b).split(".")[-1].split("[")[0] for b in node.bases]
                classes.setdefault(node.name, (methods, bases))
    return classes


def inherited(name: str, classes: dict[str, tuple[set[str], list[str]]], seen: set[str] | None = None) -> set[str]:
    seen = seen if seen is not None else set()
    if name in seen or name not in classes:
        return set()
    seen.add(name)
    methods, bases = classes[name]
    return methods | set().union(*(inherited(b, classes, seen) for b in bases))


def is_loose(annotation: ast.expr | None) -> bool:
    return annotation is None or ast.unparse(annotation).strip("'\"") in ("Any", "typing.Any")


def mentions_any(annotation: ast.expr | None) -> bool:
    return annotation is not None and re.search(r"\bAny\b", ast.unparse(annotation)) is not None


def parameters(function: Function) -> list[ast.arg]:
    a = function.args
    every = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, [a.vararg, a.kwarg])]
    return [p for p in every if p.arg not in ("self", "cls")]


def boundary(plugin: Path, api: dict[str, str], core: dict[str, tuple[set[str], list[str]]]) -> list[tuple[str, Function]]:
    """(where, function) for every boundary function of one plugin package."""
    trees = {p: parse(p) for p in sorted(plugin.rglob("*.py")) if "vendor" not in p.parts}
    module_of = {".".join(p.relative_to(plugin.parent).with_suffix("").parts).removesuffix(".__init__"): t for p, t in trees.items()}
    classes = {n.name: n for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}
    functions = {n.name: n for t in trees.values() for n in t.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def api_ancestor_methods(cls: ast.ClassDef, seen: set[str]) -> set[str]:
        names: set[str] = set()
        for base in (ast.unparse(b).split(".")[-1].split("[")[0] for b in cls.bases):
            if base in seen:
                continue
            seen.add(base)
            if base in classes:  # a plugin base: look through it
                names |= api_ancestor_methods(classes[base], seen)
            elif base in api:
                names |= inherited(base, core)
        return names

    found: dict[int, tuple[str, Function]] = {}

    def add(where: str, f: Function) -> None:
        found.setdefault(id(f), (where, f))

    def add_target(name: str, module: str | None = None) -> None:
        tree = module_of.get(module) if module else None
        scope = (
            {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
            if tree
            else {**classes, **functions}
        )
        target = scope.get(name)
        if isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(f"registered {name}", target)
        elif isinstance(target, ast.ClassDef):
            wanted = {"__init__"} | ROLE_METHODS | api_ancestor_methods(target, set())
            for f in target.body:
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name in wanted:
                    add(f"registered {name}.{f.name}", f)

    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                ast.unparse(d).split("(")[0].endswith("hookimpl") for d in node.decorator_list
            ):
                add(f"hook {node.name}", node)
                for call in ast.walk(node):
                    if isinstance(call, ast.Call) and ast.unparse(call.func) == "register" and len(call.args) >= 2:
                        target = call.args[1]
                        if (
                            isinstance(target, ast.Call)
                            and ast.unparse(target.func) == "Lazy"
                            and target.args
                            and isinstance(target.args[0], ast.Constant)
                        ):
                            module, _, attr = str(target.args[0].value).partition(":")
                            add_target(attr, module)
                        elif isinstance(target, ast.Name):
                            add_target(target.id)
            if isinstance(node, ast.Dict):  # a name -> "module:attr" table the hook registers (BUILTIN)
                for value in node.values:
                    if isinstance(value, ast.Constant) and isinstance(value.value, str) and re.fullmatch(r"[\w.]+:\w+", value.value):
                        module, _, attr = value.value.partition(":")
                        add_target(attr, module)
    for cls in classes.values():
        overridden = api_ancestor_methods(cls, set())
        overridden |= {"__init__"} if overridden else set()
        for f in cls.body:
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name in overridden:
                add(f"{cls.name}.{f.name}", f)
    return sorted(found.values(), key=lambda item: item[0])


def loose_anywhere(plugin: Path) -> tuple[int, int]:
    """(Any or untyped, all) parameters of every function in the package, boundary or not."""
    every = [
        p
        for path in sorted(plugin.rglob("*.py"))
        if "vendor" not in path.parts
        for f in ast.walk(parse(path))
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for p in parameters(f)
    ]
    return sum(is_loose(p.annotation) for p in every), len(every)


def main(root: Path, only: list[str]) -> None:
    api, core = api_modules(root), core_class_methods(root)
    plugins = sorted(p for p in (root / "plugins").iterdir() if (p / "__init__.py").exists())
    totals = [0, 0, 0, 0, 0, 0, 0]
    print(
        f"{'':24} {'boundary: functions':>19} {'params':>6} {'Any/untyped':>11} {'returns Any/none':>16} "
        f"{'dict[str, Any] etc':>18} | {'all params':>10} {'Any/untyped':>11}"
    )
    for plugin in plugins:
        if only and plugin.name not in only:
            continue
        rows = boundary(plugin, api, core)
        params = [(w, p) for w, f in rows for p in parameters(f)]
        loose = [(w, p.arg) for w, p in params if is_loose(p.annotation)]
        returns = [w for w, f in rows if is_loose(f.returns) and f.name != "__init__"]
        partial = [(w, p.arg) for w, p in params if not is_loose(p.annotation) and mentions_any(p.annotation)]
        anywhere, every = loose_anywhere(plugin)
        counts = [len(rows), len(params), len(loose), len(returns), len(partial), every, anywhere]
        totals = [a + b for a, b in zip(totals, counts)]
        print(row(plugin.name, counts))
        if "-v" in sys.argv:
            for w, arg in loose:
                print(f"    param  {w}({arg})")
            for w in returns:
                print(f"    return {w}")
    print(row("all", totals))


def row(label: str, c: list[int]) -> str:
    return f"{label:24} {c[0]:19d} {c[1]:6d} {c[2]:11d} {c[3]:16d} {c[4]:18d} | {c[5]:10d} {c[6]:11d}"


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "-v"]
    root = Path(args[0]) if args and Path(args[0]).is_dir() else Path(".")
    main(root.resolve(), [a for a in args if a.startswith("shardeval_")])
