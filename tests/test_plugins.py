"""Plugin loading: built-ins come through entry points, a broken plugin is named once and the rest
keep working, and the fast paths (--help, --version) import neither aiohttp nor msgspec."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import shardeval_cmd


def test_builtins_register_through_entry_points():
    result = shardeval_cmd("plugins")
    assert result.returncode == 0, result.stderr
    for name, registers in [("api", "service api"), ("sim", "service sim"), ("benchmarks", "benchmark arith"),
                            ("local", "orchestrator local"), ("slurm", "orchestrator slurm"), ("vllm", "service vllm")]:
        assert f"{name} " in result.stdout and registers in result.stdout
    assert "entry point (shardeval" in result.stdout


def test_a_plugin_that_fails_to_import_is_named_and_the_rest_still_work(tmp_path, sim):
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "hooky_plugin.py").write_text(
        textwrap.dedent(
            """
            from shardeval.hookspecs import hookimpl

            @hookimpl
            def register_benchmarks(register):
                raise ValueError("boom in a hook")
            """
        )
    )
    env = {"SHARDEVAL_PLUGINS": "broken_plugin,hooky_plugin", "PYTHONPATH": str(tmp_path)}
    listing = shardeval_cmd("plugins", env=env)
    assert listing.returncode == 0
    warnings = [line for line in listing.stderr.splitlines() if "warning" in line]
    assert any("'broken_plugin'" in w and "boom at import" in w for w in warnings)
    assert any("'hooky_plugin'" in w and "register_benchmarks" in w for w in warnings)
    assert "benchmark arith" in listing.stdout  # the built-ins are unaffected
    # and a real run still works with the broken plugins present
    run = shardeval_cmd(
        "run", "--bench", "arith", "--model-url", sim, "--model-id", "sim", "--max-problems", "3",
        "-o", str(tmp_path / "out"), env=env,
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
