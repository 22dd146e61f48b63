"""`shardeval plugins install/uninstall` with real pip and no network.

Target mode (the zipapp's: pip --target into SHARDEVAL_PLUGIN_DIR, pinned to the bundled versions)
is forced with SHARDEVAL_INSTALL_MODE=target; "bundled" is then the venv's site-packages, where
shardeval's own dist-info lives, just as it is the extracted site-packages inside the zipapp.
Every pip run is offline: local project directories (built with the venv's setuptools through
--no-build-isolation), local wheels, --no-index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest

from conftest import shardeval_cmd
from test_example_plugin import EXAMPLE, can_build_wheels

OFFLINE = ("--no-index", "--no-build-isolation")
PIP_ENV = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_FIND_LINKS": ""}


@pytest.fixture(autouse=True)
def _can_build():
    reason = can_build_wheels()
    if reason:
        pytest.skip(f"cannot build plugins offline: {reason}")


@pytest.fixture
def target(tmp_path):
    """A fresh plugin directory and the environment of a zipapp-like (target mode) shardeval."""
    plugin_dir = tmp_path / "plugins"
    env = {**PIP_ENV, "SHARDEVAL_PLUGIN_DIR": str(plugin_dir), "SHARDEVAL_INSTALL_MODE": "target"}
    return plugin_dir, env


def project(root, name: str, version: str = "1.0", deps=(), entry_point: str | None = "", code: str = "", scripts=None) -> str:
    """A minimal setuptools project `name` with one package `<name>_pkg`."""
    package = name.replace("-", "_") + "_pkg"
    src = root / f"{name}-{version}"
    (src / package).mkdir(parents=True)
    (src / package / "__init__.py").write_text(code)
    ep = f'\n[project.entry-points.shardeval]\n{entry_point or name} = "{package}"\n' if entry_point is not None else ""
    script = "".join(f'\n[project.scripts]\n{k} = "{v}"\n' for k, v in (scripts or {}).items())
    (src / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "{name}"
            version = "{version}"
            dependencies = {json.dumps(list(deps))}
            [tool.setuptools]
            packages = ["{package}"]
            """
        )
        + ep
        + script
    )
    return str(src)


def tree(path) -> dict[str, bytes]:
    """Every file under path with its content (an absent directory is empty)."""
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            full = os.path.join(root, n)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    return out


def one_error_line(result) -> str:
    """The command failed the shardeval way: exit 2, no traceback, ending in one error line."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("shardeval: error: "), result.stderr
    return last


def test_install_list_use_reinstall_and_uninstall_the_example(tmp_path, target):
    plugin_dir, env = target
    src = tmp_path / "example"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (src / "shardeval_example" / "only_in_010.py").write_text("X = 1\n")

    installed = shardeval_cmd("plugins", "install", *OFFLINE, str(src), env=env)
    assert installed.returncode == 0, installed.stderr
    assert f"installed shardeval-example 0.1.0 into {plugin_dir}" in installed.stdout
    assert "registers: benchmark capitals" in installed.stdout
    assert "Successfully installed shardeval-example-0.1.0" in installed.stderr  # pip's output: stderr
    assert (plugin_dir / "shardeval_example" / "only_in_010.py").is_file()

    listed = shardeval_cmd("plugins", env=env)
    line = next(x for x in listed.stdout.splitlines() if x.startswith("example "))
    assert line.split()[:3] == ["example", "shardeval_example", "0.1.0"]
    assert f"plugin dir ({plugin_dir})" in line and "entry point (shardeval-example 0.1.0)" in line
    assert "bundled" in next(x for x in listed.stdout.splitlines() if x.startswith("sim "))
    benchmarks = shardeval_cmd("benchmarks", env=env)
    assert next(x for x in benchmarks.stdout.splitlines() if x.startswith("capitals ")).split()[1:3] == ["example", "24"]

    # Reinstalling a new version replaces the old one: no stale module, one dist-info.
    # (a fresh copy: setuptools would put the old module back from the first build's build/lib)
    src = tmp_path / "example-0.2.0"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (src / "pyproject.toml").write_text((src / "pyproject.toml").read_text().replace('version = "0.1.0"', 'version = "0.2.0"'))
    again = shardeval_cmd("plugins", "install", *OFFLINE, str(src), env=env)
    assert again.returncode == 0, again.stderr
    assert "installed shardeval-example 0.2.0" in again.stdout and "(replacing 0.1.0)" in again.stdout
    assert not (plugin_dir / "shardeval_example" / "only_in_010.py").exists()
    assert not any(f.endswith(".pyc") and "only_in_010" in f for f in tree(plugin_dir))
    assert sorted(p.name for p in plugin_dir.glob("*.dist-info")) == ["shardeval_example-0.2.0.dist-info"]
    assert not list(tmp_path.glob(".install-*"))  # the staging area is gone

    removed = shardeval_cmd("plugins", "uninstall", "shardeval-example", env=env)
    assert removed.returncode == 0, removed.stderr
    assert f"removed shardeval-example 0.2.0 from {plugin_dir}" in removed.stdout
    assert tree(plugin_dir) == {} and list(plugin_dir.iterdir()) == []
    assert not any(x.startswith("example ") for x in shardeval_cmd("plugins", env=env).stdout.splitlines())


def test_dependencies_use_the_bundled_versions_and_only_the_rest_is_installed(tmp_path, target):
    plugin_dir, env = target
    wheels = tmp_path / "wheels"
    dep = project(
        tmp_path,
        "tinydep",
        "2.0",
        deps=["click>=8", "pluggy", "not-installable-anywhere; python_version < '3'"],
        entry_point=None,
        code="def main():\n    print('hi')\n",
        scripts={"tinydep-hello": "tinydep_pkg:main"},
    )
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *OFFLINE, "-w", str(wheels), dep],
        capture_output=True,
        text=True,
        env={**os.environ, **PIP_ENV},
        timeout=120,
    )
    assert build.returncode == 0, build.stderr
    plugin = project(
        tmp_path,
        "uses-dep",
        deps=["tinydep>=1", "shardeval>=0.1"],
        code="import tinydep_pkg\nfrom shardeval.hookspecs import hookimpl\n\n@hookimpl\ndef register_metrics(register):\n"
        "    register('uses_dep_metric', object())\n",
    )

    result = shardeval_cmd("plugins", "install", *OFFLINE, "-f", str(wheels), plugin, env=env)
    assert result.returncode == 0, result.stderr
    assert "installed uses-dep 1.0" in result.stdout and "with: tinydep 2.0" in result.stdout
    assert "registers: metric uses_dep_metric" in result.stdout
    names = sorted(p.name for p in plugin_dir.glob("*.dist-info"))
    assert names == ["tinydep-2.0.dist-info", "uses_dep-1.0.dist-info"]  # click, pluggy, shardeval: bundled
    assert (plugin_dir / "bin" / "tinydep-hello").is_file()

    # a plain library is not a plugin: refused, nothing changes
    before = tree(plugin_dir)
    refused = shardeval_cmd("plugins", "install", *OFFLINE, str(next(wheels.glob("*.whl"))), env=env)
    assert "is not a shardeval plugin" in one_error_line(refused)
    assert tree(plugin_dir) == before

    removed = shardeval_cmd("plugins", "uninstall", "uses_dep", "tinydep", env=env)
    assert removed.returncode == 0, removed.stderr
    assert tree(plugin_dir) == {}  # the console script under bin/ included


def test_a_plugin_needing_another_version_of_a_bundled_package_is_refused(tmp_path, target):
    plugin_dir, env = target
    plugin_dir.mkdir()
    (plugin_dir / "keep.txt").write_text("untouched")
    bad = project(tmp_path, "needs-old-click", deps=["click<1"])
    result = shardeval_cmd("plugins", "install", *OFFLINE, bad, env=env)
    line = one_error_line(result)
    assert "needs-old-click 1.0 requires click<1" in line
    assert f"bundles click {__import__('importlib.metadata').metadata.version('click')}" in line
    assert tree(plugin_dir) == {"keep.txt": b"untouched"}
    assert not list(tmp_path.glob(".install-*"))


def test_a_dependency_needing_another_version_of_a_bundled_package_is_refused(tmp_path, target):
    """pip's resolver sees the whole graph: a requirement two levels down is named just the same."""
    plugin_dir, env = target
    wheels = tmp_path / "wheels"
    dep = project(tmp_path, "olddep", "2.0", deps=["click<1"], entry_point=None)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *OFFLINE, "-w", str(wheels), dep],
        capture_output=True,
        text=True,
        env={**os.environ, **PIP_ENV},
        timeout=120,
    )
    assert build.returncode == 0, build.stderr
    line = one_error_line(
        shardeval_cmd("plugins", "install", *OFFLINE, "-f", str(wheels), project(tmp_path, "p", deps=["olddep"]), env=env)
    )
    assert "olddep 2.0 requires click<1, but this shardeval bundles click" in line and "nothing installed" in line
    assert not plugin_dir.exists() and not list(tmp_path.glob(".install-*"))


def test_a_plugin_that_does_not_load_leaves_the_previous_install_in_place(tmp_path, target):
    plugin_dir, env = target
    good = project(tmp_path / "v1", "flaky", "1.0", code="")
    assert shardeval_cmd("plugins", "install", *OFFLINE, good, env=env).returncode == 0
    before = tree(plugin_dir)
    broken = project(tmp_path / "v2", "flaky", "2.0", code="raise RuntimeError('boom at import')\n")
    line = one_error_line(shardeval_cmd("plugins", "install", *OFFLINE, broken, env=env))
    assert "plugin 'flaky' (flaky_pkg) failed to load: RuntimeError: boom at import" in line
    assert tree(plugin_dir) == before
    taken = project(tmp_path / "v3", "flaky", "3.0", entry_point="sim")
    line = one_error_line(shardeval_cmd("plugins", "install", *OFFLINE, taken, env=env))
    assert "entry point 'sim' of flaky 3.0 is taken by shardeval_sim" in line
    assert tree(plugin_dir) == before


def test_user_mistakes_are_one_line_and_exit_2(tmp_path, target):
    plugin_dir, env = target
    missing = one_error_line(shardeval_cmd("plugins", "install", str(tmp_path / "nope"), env=env))
    assert "no such file or directory" in missing and str(tmp_path / "nope") in missing
    unknown = one_error_line(shardeval_cmd("plugins", "install", "--no-index", "shardeval-no-such-plugin", env=env))
    assert "pip failed" in unknown and "shardeval-no-such-plugin" in unknown
    bundled = one_error_line(shardeval_cmd("plugins", "uninstall", "sim", env=env))
    assert "'sim' is part of the app" in bundled and "cannot be uninstalled" in bundled
    assert "cannot be uninstalled" in one_error_line(shardeval_cmd("plugins", "uninstall", "click", env=env))
    nothing = one_error_line(shardeval_cmd("plugins", "uninstall", "never-installed", env=env))
    assert "no installed plugin 'never-installed'" in nothing and f"plugin dir {plugin_dir}: none" in nothing
    mode = one_error_line(shardeval_cmd("plugins", "install", "x", env={**env, "SHARDEVAL_INSTALL_MODE": "sideways"}))
    assert "SHARDEVAL_INSTALL_MODE" in mode
    assert not plugin_dir.exists()  # failed installs do not even create it


def test_a_plugin_dir_that_cannot_be_written_is_one_line_and_exit_2(tmp_path, target):
    _, env = target
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for plugin_dir in (blocker / "plugins", blocker):  # under a file, and a file itself
        result = shardeval_cmd("plugins", "install", *OFFLINE, str(EXAMPLE), env={**env, "SHARDEVAL_PLUGIN_DIR": str(plugin_dir)})
        line = one_error_line(result)
        assert str(plugin_dir) in line and "SHARDEVAL_PLUGIN_DIR" in line, line
    assert blocker.read_text() == ""


def throwaway_venv(tmp_path, with_pip: bool = True) -> str:
    """A venv (no pip of its own: fast) that sees this venv's packages through a .pth file, so it
    runs shardeval and pip while installs land in its own site-packages. Without pip: a stub
    package hides this venv's pip, as on a Python that has none."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    with open(os.path.join(site, "_shardeval_tests.pth"), "w") as f:
        f.write(f"import site; site.addsitedir({ours!r})\n")
    if not with_pip:
        os.makedirs(os.path.join(site, "pip"))
        with open(os.path.join(site, "pip", "__init__.py"), "w") as f:
            f.write("raise ImportError('No module named pip')\n")
    return python


def run_with(python: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "shardeval", *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def test_pip_mode_installs_into_the_running_environment(tmp_path):
    python = throwaway_venv(tmp_path)
    env = {**PIP_ENV, "SHARDEVAL_PLUGIN_DIR": str(tmp_path / "plugins")}
    env.pop("SHARDEVAL_INSTALL_MODE", None)
    plugin = project(tmp_path, "pip-mode-plugin", deps=["click>=8"])
    installed = run_with(python, "plugins", "install", *OFFLINE, plugin, env=env)
    assert installed.returncode == 0, installed.stderr
    assert f"installed into the environment of {python}: pip-mode-plugin 1.0" in installed.stdout
    listed = run_with(python, "plugins", env=env)
    line = next(x for x in listed.stdout.splitlines() if x.startswith("pip-mode-plugin "))
    assert line.split()[2:] == ["1.0", "entry", "point", "(pip-mode-plugin", "1.0)"]  # plain entry point
    assert not (tmp_path / "plugins").exists()
    removed = run_with(python, "plugins", "uninstall", "pip-mode-plugin", env=env)
    assert removed.returncode == 0, removed.stderr
    assert "pip-mode-plugin " not in run_with(python, "plugins", env=env).stdout
    assert "part of the app" in one_error_line(run_with(python, "plugins", "uninstall", "shardeval", env=env))


def test_no_pip_for_the_interpreter_is_one_line(tmp_path, target):
    _, env = target
    python = throwaway_venv(tmp_path, with_pip=False)
    line = one_error_line(run_with(python, "plugins", "install", EXAMPLE, env=env))
    assert f"pip is not available for {python}" in line and "ensurepip" in line


def test_zipapp_detection_is_one_function(tmp_path, monkeypatch):
    from shardeval import app
    from shardeval.run import process

    pyz = tmp_path / "shardeval.pyz"
    with zipfile.ZipFile(pyz, "w") as z:
        z.writestr("__main__.py", "")
    monkeypatch.delenv("SHARDEVAL_INSTALL_MODE", raising=False)
    monkeypatch.setattr(sys, "argv", [str(pyz)])
    assert app.zipapp_path() == str(pyz) and app.install_mode() == "target"
    assert process.self_command() == [sys.executable, str(pyz)]
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "not-a-zip.py")])
    assert app.zipapp_path() is None and app.install_mode() == "pip"
    assert process.self_command() == [sys.executable, "-m", "shardeval"]
    monkeypatch.setenv("SHARDEVAL_INSTALL_MODE", "target")
    assert app.install_mode() == "target"


def test_pip_failures_become_their_most_telling_line():
    from shardeval.plugins.install import _pip_error

    build = """  error: subprocess-exited-with-error
  × Preparing metadata (pyproject.toml) did not run successfully.
      error: invalid command 'bdist_wheel'
      [end of output]
error: metadata-generation-failed
× Encountered error while generating package metadata.
hint: See above for details."""
    assert _pip_error(build.splitlines()) == "invalid command 'bdist_wheel' / metadata-generation-failed"
    crash = ["ERROR: Exception:", "Traceback (most recent call last):", "tomllib.TOMLDecodeError: Expected ']'"]
    assert _pip_error(crash) == "tomllib.TOMLDecodeError: Expected ']'"
    missing = [
        "ERROR: Could not find a version that satisfies the requirement x (from versions: none)",
        "ERROR: No matching distribution found for x",
    ]
    assert _pip_error(missing).endswith("/ No matching distribution found for x")


def test_what_shardevals_extras_name_may_be_installed_beside_the_plugins():
    """The file carries the plugins that need Pillow, lm-eval and inspect-ai but not those packages:
    `plugins install` takes what an extra of shardeval names (not the test extra's tools), though
    none of them declares a plugin; any other plain library stays refused (above)."""
    from shardeval.plugins.install import extra_distributions

    extras = extra_distributions()
    assert {"pillow", "lm-eval", "inspect-ai", "transformers"} <= extras
    assert not extras & {"pytest", "hypothesis", "playwright", "tinydep"}
