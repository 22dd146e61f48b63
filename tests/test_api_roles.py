"""The SDK by role (issue 41, point 1): shardeval.api is a package of role modules whose names are
listed once (shardeval/api/roles.py). Each role keeps to a budget of names, every name has a user
outside the core, the type checkers' imports and docs/plugins.md's table are made from the list,
the built-ins import nothing from the flat form, and the flat form still works for one release,
with a warning naming the new home."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from conftest import REPO
from shardeval.api import roles

ROOT = Path(REPO)
# The most names each role may publish (the count when the roles were drawn, issue 41): a new name
# means a user outside the core needs it, and raising a budget says so in review.
BUDGET = {
    "plugin": 19,
    "benchmark": 39,  # issue 43: PrepareContext, prepared_folder, preparing, PREPARE_HINT
    "service": 9,
    "solver": 10,
    "orchestrator": 26,  # issue 43: portable_preparation, PortablePreparation (a preparation copied onto a Kubernetes claim)
    "exporter": 4,
    "metric": 7,  # issue 44: GateRule (the gate_verdicts hook)
    "records": 24,  # issue 44: read_plan, model_roots, scores_digest (a gate.json names the answers it decided on); (`shardeval gate SWEEP_DIR` walks a sweep as merge does)
    "pages": 8,
}


def rewrite_script():
    spec = importlib.util.spec_from_file_location("api_roles_rewrite", ROOT / "scripts" / "dev" / "api_roles_rewrite.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sources_outside_core() -> dict[str, str]:
    """{where: Python source} of the SDK's users: the built-in plugins, the example plugin, and the
    code samples of docs/ (worked plugins, and `load_run` in a notebook)."""
    out = {}
    for folder in (ROOT / "plugins", ROOT / "examples"):
        for path in sorted(folder.rglob("*.py")):
            if not {"vendor", "__pycache__", "build"} & set(path.parts):  # build/: a wheel's copy, made by tests
                out[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs").glob("*.md")):
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)):
            out[f"{page.relative_to(ROOT)} sample {i}"] = block
    return out


def sdk_imports(source: str) -> list[ast.ImportFrom]:
    return [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[:2] == ["shardeval", "api"]
    ]


def test_each_role_keeps_to_its_name_budget():
    counts = {role: len(names) for role, names in roles.ROLES.items()}
    over = {role: (n, BUDGET.get(role, 0)) for role, n in counts.items() if n > BUDGET.get(role, 0)}
    assert over == {}, f"(names, budget) of the roles over their budget: {over}"
    assert sum(counts.values()) <= sum(BUDGET.values())


def test_a_name_is_published_once_and_never_retired_at_the_same_time():
    published = [name for names in roles.ROLES.values() for name in names]
    assert len(published) == len(set(published))
    assert set(published) & set(roles.RETIRED) == set()


def test_every_published_name_has_a_user_outside_the_core():
    """A built-in plugin, the example plugin or a docs sample imports it (from its role module, or
    still from the flat form); a name nobody outside the core imports is not published."""
    used = {alias.name for source in sources_outside_core().values() for node in sdk_imports(source) for alias in node.names}
    unused = {role: sorted(set(names) - used) for role, names in roles.ROLES.items() if set(names) - used}
    assert unused == {}


def test_no_built_in_imports_from_the_flat_form():
    """The built-ins, the example plugin and the docs' samples import each name from its role
    module (`hookimpl` may come from shardeval.api itself)."""
    flat = []
    for where, source in sources_outside_core().items():
        flat += [
            f"{where}:{node.lineno}: {alias.name}"
            for node in sdk_imports(source)
            if node.module == "shardeval.api"
            for alias in node.names
            if alias.name != "hookimpl"
        ]
    assert flat == []


def test_each_role_module_declares_its_names_for_type_checkers():
    """The `if TYPE_CHECKING:` imports of each role module are its list, each re-exported (`X as X`)."""
    for role, served in roles.ROLES.items():
        path = ROOT / "core" / "shardeval" / "api" / f"{role}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guarded = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
        declared = {
            (node.module, alias.name, alias.asname) for node in guarded.body if isinstance(node, ast.ImportFrom) for alias in node.names
        }
        assert declared == {(module, name, name) for name, module in served.items()}, role
        assert rewrite_script().type_block(role) in path.read_text(encoding="utf-8"), f"rerun the script with --blocks ({role})"


def test_docs_plugins_table_is_made_from_the_lists():
    script = rewrite_script()
    page = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    start, end = page.index(script.TABLE_START) + len(script.TABLE_START), page.index(script.TABLE_END)
    assert page[start:end].strip() == script.docs_table().strip(), "rerun scripts/dev/api_roles_rewrite.py --docs"


def test_each_role_module_serves_its_names_lazily():
    """A role module imports nothing of shardeval until a name is used; then that name is its core
    module's own object."""
    probe = (
        "import sys, importlib\n"
        "mods = [importlib.import_module(f'shardeval.api.{r}') for r in sys.argv[1:]]\n"
        "print(sorted(m for m in sys.modules if m.startswith('shardeval')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, *roles.ROLES], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(
        sorted(["shardeval", "shardeval.api", "shardeval.api.roles", *(f"shardeval.api.{r}" for r in roles.ROLES)])
    )
    for role, served in roles.ROLES.items():
        module = importlib.import_module(f"shardeval.api.{role}")
        assert sorted(module.__all__) == sorted(served) == dir(module)
        for name, core in served.items():
            assert getattr(module, name) is getattr(importlib.import_module(core), name)
        with pytest.raises(AttributeError, match="has no attribute 'NotAName'"):
            _ = module.NotAName


def test_the_flat_form_still_works_and_warns_naming_the_new_home():
    import shardeval.api as api
    from shardeval.benchmark import Benchmark

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert api.Benchmark is Benchmark
    assert [str(w.message) for w in caught] == [
        "shardeval.api.Benchmark is deprecated: import it from shardeval.api.benchmark (from shardeval.api.benchmark import Benchmark)"
    ]
    assert all(w.category is DeprecationWarning for w in caught)
    with pytest.warns(
        DeprecationWarning,
        match=r"shardeval.api.counts is deprecated: it is no longer published "
        r"\(internal: shardeval.results.report\)",
    ):
        from shardeval.api import counts  # noqa: F401
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # hookimpl stays in shardeval.api, undeprecated
        from shardeval.api import hookimpl
    from shardeval.hookspecs import hookimpl as the_mark

    assert hookimpl is the_mark
    with pytest.raises(ImportError):
        from shardeval.api import NotAName  # noqa: F401


def test_every_name_of_the_flat_form_still_resolves():
    """The 178 names of the previous release's flat shardeval.api: published by a role, or retired
    (internal, served with a warning for one release)."""
    import shardeval.api as api

    added = {
        "ReportView",
        "BenchmarkView",
        "LiveStatus",
        "AddExportFlag",  # the pages' views, the exporter's callback
        "CellOutcome",
        "orchestrate",
        "load_request",
        "run_cell",
        "PrepareContext",
        "prepared_folder",  # issue 43's `Benchmark.prepare`
        "preparing",
        "PREPARE_HINT",  # issue 43: a run being prepared; what a failed fetch tells a node without internet
        "read_plan",
        "model_roots",  # issue 44: `shardeval gate SWEEP_DIR` walks a sweep as merge does
        "GateRule",
        "scores_digest",  # issue 44: the gate_verdicts hook's rule; the answers a gate.json decided on
        "portable_preparation",
        "PortablePreparation",  # issue 43: a preparation an orchestrator copies onto a Kubernetes claim
    }  # the orchestrator lifecycle's, new with it
    flat = sorted({*roles.HOME, *roles.RETIRED} - added)
    assert len(flat) == 178
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert [n for n in flat if getattr(api, n, None) is None] == []


def test_the_rewrite_script_splits_a_flat_import_by_role():
    script = rewrite_script()
    source = (
        "def f():\n"
        "    from shardeval.api import (Benchmark, hookimpl,\n"
        "                               UsageError as Oops, counts)  # why\n"
        "    return Benchmark\n"
    )
    assert script.rewrite_source(source, "x.py") == (
        "def f():\n"
        "    from shardeval.api.benchmark import Benchmark  # why\n"
        "    from shardeval.api.plugin import hookimpl, UsageError as Oops\n"
        "    from shardeval.api import counts\n"
        "    return Benchmark\n"
    )
    assert "from shardeval.results.report import counts" in script.rewrite_source(source, "x.py", internal=True)


def _callables(obj: object) -> list:
    import inspect

    if inspect.isfunction(obj):
        return [obj]
    if inspect.isclass(obj):
        return [m for k, m in vars(obj).items() if inspect.isfunction(m) and not k.startswith("_")]
    return []


def test_no_parameter_of_the_sdk_is_any():
    """Issue 41, point 2: `Any` at the plugin boundary is gone. Every parameter of a published
    function (and of a published class's public methods) names its type; a value that may be
    anything says `object`. The hook payloads are held by mypy over hookspecs.py."""
    import inspect

    loose = [
        f"shardeval.api.{role}.{name}: {f.__qualname__}({p.name}: {p.annotation})"
        for role, names in roles.ROLES.items()
        for name in names
        for f in _callables(getattr(importlib.import_module(f"shardeval.api.{role}"), name))
        for p in inspect.signature(f).parameters.values()
        if p.name not in ("self", "cls") and str(p.annotation).replace("typing.", "") in ("Any", "Any | None", "Optional[Any]")
    ]
    checked = sum(len(_callables(getattr(importlib.import_module(f"shardeval.api.{r}"), n))) for r, ns in roles.ROLES.items() for n in ns)
    assert checked > 100  # the published functions and methods were read
    assert loose == []


def test_no_hook_takes_any():
    hookspecs = ast.parse((ROOT / "core" / "shardeval" / "hookspecs.py").read_text())
    loose = [
        f"{fn.name}({a.arg})"
        for fn in ast.walk(hookspecs)
        if isinstance(fn, ast.FunctionDef)
        for a in fn.args.args + fn.args.kwonlyargs
        if a.arg != "self" and (a.annotation is None or "Any" in ast.unparse(a.annotation))
    ]
    assert len([f for f in ast.walk(hookspecs) if isinstance(f, ast.FunctionDef)]) > 20
    assert loose == []
