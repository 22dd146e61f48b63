"""Plugin loading: built-ins come through entry points, hooks run through pluggy (wrappers and
tryfirst take effect), a broken plugin is named once and the rest keep working, and the fast paths
(--help, --version, `import shardeval.api`) import neither aiohttp nor msgspec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import shardeval_cmd


def _path(tmp_path: Path) -> str:
    """PYTHONPATH with the test's plugin modules first (and this checkout's, when set, after)."""
    return os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))


def test_builtins_register_through_entry_points():
    result = shardeval_cmd("plugins")
    assert result.returncode == 0, result.stderr
    for name, registers in [
        ("api", "service api"),
        ("sim", "service sim"),
        ("benchmarks", "benchmark arith"),
        ("local", "orchestrator local"),
        ("slurm", "orchestrator slurm"),
        ("vllm", "service vllm"),
    ]:
        assert f"{name} " in result.stdout and registers in result.stdout
    assert "entry point (shardeval" in result.stdout


def test_a_plugin_that_fails_to_import_is_named_and_the_rest_still_work(tmp_path, sim):
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "hooky_plugin.py").write_text(
        textwrap.dedent(
            """
            from shardeval.api import hookimpl

            @hookimpl
            def register_benchmarks(register):
                register("half-registered", object)
                raise ValueError("boom in a hook")
            """
        )
    )
    env = {"SHARDEVAL_PLUGINS": "broken_plugin,hooky_plugin", "PYTHONPATH": _path(tmp_path)}
    listing = shardeval_cmd("plugins", env=env)
    assert listing.returncode == 0
    warnings = [line for line in listing.stderr.splitlines() if "warning" in line]
    assert any("'broken_plugin'" in w and "boom at import" in w for w in warnings)
    assert any("'hooky_plugin'" in w and "register_benchmarks" in w for w in warnings)
    assert "benchmark arith" in listing.stdout  # the built-ins are unaffected
    assert "half-registered" not in listing.stdout  # nothing of the failed call stands
    # and a real run still works with the broken plugins present
    run = shardeval_cmd(
        "run",
        "--bench",
        "arith",
        "--model-url",
        sim,
        "--model-id",
        "sim",
        "--max-problems",
        "3",
        "-o",
        str(tmp_path / "out"),
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("boom at import") == 1  # named once, not per use


def test_help_and_version_do_not_import_heavy_packages():
    probe = textwrap.dedent(
        """
        import sys
        from shardeval.cli import main
        try:
            main(sys.argv[1:])
        except SystemExit:
            pass
        heavy = sorted(m for m in ("aiohttp", "msgspec", "yaml") if m in sys.modules)
        print("HEAVY:" + ",".join(heavy))
        """
    )
    for args in (["--version"], ["--help"], ["run", "--help"], ["sim", "--help"]):
        out = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().endswith("HEAVY:"), (args, out.stdout[-200:])


SITE_ARITH = """
from shardeval.api import hookimpl
from shardeval.api.benchmark import Benchmark, Problem, Score

class SiteArith(Benchmark):
    name = "arith"

    def __init__(self, params):
        pass

    def size(self):
        return 2

    def problem(self, idx):
        return Problem(idx=idx, id=f"site-{idx}", prompt=f"What is {idx} + 1?", reference=str(idx + 1))

    def score(self, problem, response):
        return Score(score=0.0)

@hookimpl(tryfirst=True)
def register_benchmarks(register):
    register("arith", SiteArith)
"""

WRAPPER = """
from shardeval.api import hookimpl
from shardeval.api.benchmark import Benchmark

@hookimpl(wrapper=True)
def register_benchmarks(register):
    result = yield  # every other plugin has registered by now
    if register.registered["arith"].plugin == "site_arith":
        register("wrapper-saw-site-arith", Benchmark)
    return result
"""

OLD_STYLE_WRAPPER = """
from shardeval.api import hookimpl
from shardeval.api.benchmark import Benchmark

@hookimpl(hookwrapper=True)
def register_benchmarks(register):
    register(f"hookwrapper-before-{len(register.registered)}", Benchmark)
    yield
    register(f"hookwrapper-after-gsm8k-{'gsm8k' in register.registered}", Benchmark)
"""


def _plugins(tmp_path: Path, **sources: str) -> dict[str, str]:
    for name, source in sources.items():
        (tmp_path / f"{name}.py").write_text(source)
    return {"SHARDEVAL_PLUGINS": ",".join(sources), "PYTHONPATH": _path(tmp_path)}


def test_wrappers_and_a_tryfirst_override_of_a_builtin_take_effect(tmp_path, sim):
    fallback = "from shardeval.api import hookimpl\nfrom shardeval.api.benchmark import Benchmark\n\n@hookimpl(trylast=True)\ndef register_benchmarks(register):\n    register('gsm8k', Benchmark)\n"
    env = _plugins(tmp_path, site_arith=SITE_ARITH, wrap_new=WRAPPER, wrap_old=OLD_STYLE_WRAPPER, fallback=fallback)
    listing = shardeval_cmd("plugins", env=env)
    assert listing.returncode == 0, listing.stderr
    assert "warning" not in listing.stderr and "FAILED" not in listing.stdout  # on purpose: no clash reported
    lines = listing.stdout.splitlines()
    site = lines[next(i for i, x in enumerate(lines) if x.startswith("site_arith ")) + 1]
    assert site.split("registers: ")[1] == "benchmark arith (tryfirst: replaces plugin 'benchmarks')"
    builtin = lines[next(i for i, x in enumerate(lines) if x.startswith("benchmarks ")) + 1]
    assert "benchmark gsm8k (replaces the trylast default of plugin 'fallback')" in builtin
    assert "benchmark arith" not in builtin
    assert "registers: benchmark wrapper-saw-site-arith" in listing.stdout  # the wrapper saw the others' result
    assert "benchmark hookwrapper-before-0, benchmark hookwrapper-after-gsm8k-True" in listing.stdout
    run = shardeval_cmd("run", "--bench", "arith", "--model-url", sim, "--model-id", "sim", "-o", str(tmp_path / "out"), env=env)
    assert run.returncode == 0, run.stderr
    records = [json.loads(x) for x in (tmp_path / "out" / "arith" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["problem_id"] for r in records) == ["site-0", "site-1"]  # the site's arith is the one that ran


def test_a_clash_without_intent_is_one_warning_naming_both(tmp_path):
    clash = "from shardeval.api import hookimpl\nfrom shardeval.api.benchmark import Benchmark\n\n@hookimpl\ndef register_benchmarks(register):\n    register('arith', Benchmark)\n"
    listing = shardeval_cmd("plugins", env=_plugins(tmp_path, clash=clash))
    assert listing.returncode == 0, listing.stderr
    warnings = [line for line in listing.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "shardeval: warning: plugin 'clash' registers benchmark 'arith', already registered by 'benchmarks'; the first one is kept"
    ]
    builtin = listing.stdout.splitlines()[next(i for i, x in enumerate(listing.stdout.splitlines()) if x.startswith("benchmarks ")) + 1]
    assert "benchmark arith" in builtin  # the plugin loaded first keeps the name


def test_the_api_is_complete_and_cheap_to_import():
    """Every role module's every name resolves, and importing them all loads nothing heavy."""
    probe = (
        "import importlib, sys, shardeval.api as api\n"
        "roles = [importlib.import_module(f'shardeval.api.{r}') for r in api.ROLE_MODULES]\n"
        "heavy = sorted(m for m in ('aiohttp', 'msgspec', 'yaml', 'numpy') if m in sys.modules)\n"
        "missing = [f'{r.__name__}.{n}' for r in roles for n in r.__all__ if getattr(r, n, None) is None]\n"
        "print('HEAVY:' + ','.join(heavy), 'MISSING:' + ','.join(missing))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["HEAVY:", "MISSING:"]
