"""`shardeval plugins install` and `shardeval plugins uninstall`, in two modes (`app.install_mode`);
docs/plugins.md ("Installing, listing, removing") has the details.

* target (the zipapp): a plugin runs next to the packages the app bundles, so it may never bring
  its own version of one of them. pip's resolver (`--dry-run --report`, seeing only the bundled
  distributions, each pinned) lists what else it needs, a requirement that excludes a bundled
  version being named in one line; exactly that is installed with `--no-deps --target` into a
  staging directory, then moved into the plugin dir, all undone if the plugin then fails to load.
* pip (a pip-installed package): plain `pip install` into the running environment.

pip's own output goes to stderr; what was installed and what it registers goes to stdout. Every
failure a user can act on is one line and exit 2 (UsageError).
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from dataclasses import dataclass
from importlib import metadata
from typing import Any
from collections.abc import Callable, Iterable, Sequence

from shardeval import plugins
from shardeval.app import app_site_packages, dist_location, install_mode
from shardeval.errors import UsageError, os_error


def canonical(name: str) -> str:
    """PEP 503 normalised distribution name: `Shardeval_Example` -> `shardeval-example`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_distributions() -> set[str]:
    """What shardeval's own extras name (canonical names; the `test` extra left out): a node gets
    them with `plugins install` although they declare no plugin (Pillow for images, lm-eval,
    inspect-ai), since the file does not carry them and the built-in plugins that need them do."""
    try:
        requirements = metadata.requires("shardeval") or []
    except metadata.PackageNotFoundError:
        return set()
    names = set()
    for requirement in requirements:
        name, _, marker = requirement.partition(";")
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        if extra and extra.group(1) != "test" and (found := re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", name)):
            names.add(canonical(found.group(1)))
    return names


@dataclass
class Dist:
    """An installed distribution, read from its metadata."""

    key: str  # the canonical name
    name: str
    version: str
    site: str  # the directory it is installed into
    entry_points: list[str]  # names in the `shardeval` group
    raw: Any
    label: str  # "name version"


def _dists(site: str | None = None) -> dict[str, Dist]:
    """Distributions installed in one directory (None: the running environment), by canonical
    name (the first of duplicates wins)."""
    found: dict[str, Dist] = {}
    for raw in metadata.distributions(path=sys.path if site is None else [site]):
        name = raw.metadata["Name"]
        if name and canonical(name) not in found:
            eps = [ep.name for ep in raw.entry_points if ep.group == plugins.ENTRY_POINT_GROUP]
            found[canonical(name)] = Dist(
                canonical(name), name, raw.version, site or dist_location(raw) or "", eps, raw, f"{name} {raw.version}"
            )
    return found


def _find(name: str, dists: dict[str, Dist]) -> Dist | None:
    """A distribution by its name or by one of its `shardeval` entry-point names."""
    return dists.get(canonical(name)) or next((d for d in dists.values() if name in d.entry_points), None)


def _require_pip() -> tuple[tuple[int, ...], str]:
    """(pip's version, its package directory) for sys.executable; no pip is one line, exit 2."""
    probe = subprocess.run(
        [sys.executable, "-c", "import os, pip; print(pip.__version__); print(os.path.dirname(pip.__file__))"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(
            f"pip is not available for {sys.executable} ({why}); install it for that interpreter "
            f"(`{sys.executable} -m ensurepip --user`, or the OS package python3-pip) and retry"
        )
    version, directory = probe.stdout.split("\n")[:2]
    return tuple(int(p) for p in re.findall(r"\d+", version)[:2]), directory


def _pip_error(lines: Iterable[str]) -> str:
    """pip's own error lines (`ERROR: ...`), else its last lines, as one line."""
    lines = [line.strip() for line in lines if line.strip()]
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
    errors = [e for e in errors if not e.endswith(":")]  # "Exception:" heads pip's own traceback
    if not errors:  # a failed build: pip's "error: ..." lines, the backend's own among them
        errors = [line[6:].strip() for line in lines if line.startswith("error:") and "subprocess-exited" not in line][-2:]
    text = " / ".join(errors or lines[-1:]) or "no output"
    return text if len(text) <= 600 else text[:597] + "..."


_CONFLICT = re.compile(r"\s*(\S+ \S+) depends on (([A-Za-z0-9._-]+).*)")  # pip's "The conflict is caused by:" lines


def _pip(args: list[str], what: str, app: dict[str, Dist] | None = None, python: Sequence[str] = ()) -> None:
    """Run pip (`python -m pip ARGS`, or `python` given) with its output on our stderr; failure: one
    line, exit 2, naming the bundled distribution a requirement excludes when that is the cause."""
    command = [*(python or [sys.executable, "-m", "pip"]), *args]
    tail: deque[str] = deque(maxlen=60)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stderr.write(line)
        tail.append(line)
    sys.stderr.flush()
    if proc.wait() == 0:
        return
    for m in filter(None, (_CONFLICT.fullmatch(line.rstrip()) for line in tail)):
        if app and canonical(m[3]) in app:
            raise UsageError(
                f"{what}: {m[1]} requires {m[2]}, but this shardeval bundles {app[canonical(m[3])].label}; plugins run "
                "with the bundled versions (use a release of the plugin that accepts it); nothing installed"
            )
    raise UsageError(f"{what}: pip failed: {_pip_error(tail)}")


@contextlib.contextmanager
def _file_errors(verb: str):
    """A file operation that fails (a plugin dir under a file, read-only, full) is one line naming
    the path and the fix, exit 2 or 1, never a traceback, whichever step hit it."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, verb, alternative=f"set {plugins.PLUGIN_DIR_ENV} to a directory you may write to") from None


def _check_paths(specs: Iterable[str]) -> None:
    """A spec that names a local path must exist (pip's own message for it is long)."""
    for spec in specs:
        looks_local = spec.startswith((".", "/", "~")) or os.sep in spec or spec.endswith((".whl", ".tar.gz", ".zip"))
        if looks_local and "://" not in spec and " @ " not in spec and not os.path.exists(os.path.expanduser(spec)):
            raise UsageError(f"cannot install {spec}: no such file or directory (give a package name, a wheel, or a project directory)")


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([os.path.realpath(path), os.path.realpath(root)]) == os.path.realpath(root)


def _dist_files(dist: Dist) -> list[str]:
    """Every file of an installed distribution (RECORD, its metadata directory, stale bytecode)."""
    files = dist.raw.files
    if files is None:
        raise UsageError(f"{dist.label} in {dist.site} has no RECORD; remove its files by hand")
    paths: set[str] = set()
    meta_dir = None
    for entry in files:
        path = os.path.normpath(os.path.join(dist.site, str(entry)))
        if not _inside(path, dist.site):  # pip --target records scripts as ../../bin/NAME
            path = os.path.normpath(os.path.join(dist.site, "lib", "python", str(entry)))
        if path.endswith(".dist-info" + os.sep + "RECORD"):
            meta_dir = os.path.dirname(path)
        if _inside(path, dist.site) and (os.path.isfile(path) or os.path.islink(path)):
            paths.add(path)
        if path.endswith(".py"):  # bytecode another Python version wrote after the install
            cached = os.path.join(os.path.dirname(path), "__pycache__", os.path.basename(path)[:-3])
            paths.update(f for f in glob.glob(glob.escape(cached) + ".*") if f.endswith(".pyc"))
    if meta_dir and os.path.isdir(meta_dir) and _inside(meta_dir, dist.site):
        for root, _, names in os.walk(meta_dir):
            paths.update(os.path.join(root, n) for n in names)
    return sorted(paths)


def _prune(paths: Iterable[str], root: str) -> None:
    """Remove directories left empty by removing `paths`, up to (not including) root."""
    root = os.path.realpath(root)
    for directory in sorted({os.path.dirname(p) for p in paths}, key=len, reverse=True):
        with contextlib.suppress(OSError):  # one not empty (or gone already) ends the climb
            while os.path.realpath(directory) != root and _inside(directory, root):
                os.rmdir(directory)
                directory = os.path.dirname(directory)


def _remove_dist(dist: Dist, remove: Callable[[str], object] = os.remove) -> int:
    paths = _dist_files(dist)
    for path in paths:
        remove(path)
    _prune(paths, dist.site)
    return len(paths)


def _move(source: str, dest: str, journal: list[tuple[str, str]]) -> None:
    """Move one file (making its directory), noted in `journal` so that it can be moved back."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.move(source, dest)
    journal.append((source, dest))


def _verify(dists: list[Dist]) -> tuple[list[str], list[str], list[str]]:
    """Load every plugin as a real run would; return (lines to print, failures, warnings)."""
    importlib.invalidate_caches()
    plugin_set = plugins.discover()
    registry = plugins.collect(plugin_set)
    lines: list[str] = []
    failures: list[str] = []
    warnings: list[str] = []
    for dist in dists:
        for name in dist.entry_points:
            loaded = next((p for p in plugin_set.loaded if p.name == name), None)
            failed = [f for f in plugin_set.failures + registry.problems if f.startswith(f"plugin {name!r} ") and " failed " in f]
            if failed:
                failures.extend(failed)
            elif loaded is None:
                failures.append(f"plugin {name!r} of {dist.label} was not loaded")
            elif canonical(loaded.dist or "") != dist.key or loaded.location != os.path.realpath(dist.site):
                failures.append(
                    f"entry point {name!r} of {dist.label} is taken by {loaded.module} ({loaded.source}); "
                    "entry-point names must be unique: rename it in the plugin's pyproject.toml"
                )
            else:
                registered = plugins.registrations(registry, name)
                lines.append(f"  {name:<12} {loaded.module:<24} registers: {', '.join(registered) or 'nothing'}")
                warnings.extend(p for p in registry.problems if p.startswith(f"plugin {name!r} registers "))
    return lines, failures, warnings


def _show(lines: list[str], warnings: list[str], echo: Callable[[str], None]) -> None:
    for line in lines:
        echo(line)
    for warning in warnings:
        plugins.warn(warning)


@_file_errors("install a plugin at")
def install(specs: list[str], pip_options: list[str], echo: Callable[[str], None]) -> None:
    """Install plugins (names, wheels, project directories) the way this shardeval runs."""
    _check_paths(specs)
    mode = install_mode()
    pip_version, pip_dir = _require_pip()
    what = f"cannot install {' '.join(specs)}"
    if mode == "pip":
        return _install_pip(specs, pip_options, echo, what)
    if pip_version < (22, 2):
        raise UsageError(
            f"pip {'.'.join(map(str, pip_version))} of {sys.executable} is too old: plugins install with "
            f"pip 22.2 or newer (its --report); `{sys.executable} -m pip install --user -U pip` updates it"
        )
    target = plugins.plugin_dir()
    app, existing = _dists(app_site_packages()), _dists(target)
    work = _work_dir(target)
    try:
        staging = os.path.join(work, "staging")
        staged, top = _stage(specs, pip_options, what, app, work, pip_dir, staging)
        lines, warnings = _swap_in(staging, staged, existing, top, target, work, what)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    for dist in top:
        old = existing.get(dist.key)
        echo(f"installed {dist.label} into {target}" + (f" (replacing {old.version})" if old else ""))
    if deps := sorted((d for d in staged.values() if d.key not in {t.key for t in top}), key=lambda d: d.key):
        echo(f"  with: {', '.join(d.label for d in deps)}")
    _show(lines, warnings, echo)


def _work_dir(target: str) -> str:
    """A fresh directory to stage in: next to the plugin dir, so the final moves are renames
    (elsewhere in the temporary directory when that cannot be made)."""
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        return tempfile.mkdtemp(prefix=".install-", dir=os.path.dirname(target))
    except OSError:
        return tempfile.mkdtemp(prefix="shardeval-plugin-install-")


def _stage(
    specs: list[str], pip_options: list[str], what: str, app: dict[str, Dist], work: str, pip_dir: str, staging: str
) -> tuple[dict[str, Dist], list[Dist]]:
    """Install what `specs` need (beyond the bundled distributions) into `staging`: (every staged
    distribution, the ones asked for). Refused before the plugin dir is touched: nothing to
    install, or a distribution asked for that is no shardeval plugin."""
    wanted = _resolve(specs, pip_options, what, app, work, pip_dir)
    if not any(item.get("requested") for item in wanted):
        raise UsageError(f"{what}: pip finds nothing to install: a distribution this shardeval bundles is never installed again")
    _pip(["install", "--no-deps", "--no-warn-script-location", "--target", staging, *pip_options, *map(_pinned, wanted)], what)
    staged = _dists(staging)
    top = [staged[canonical(item["metadata"]["name"])] for item in wanted if item.get("requested")]
    extras = extra_distributions()
    if bare := next((dist for dist in top if not dist.entry_points and dist.key not in extras), None):
        raise UsageError(
            f"{what}: {bare.label} is not a shardeval plugin: it declares no entry point in the "
            f"`{plugins.ENTRY_POINT_GROUP}` group (see docs/plugins.md), and no extra of shardeval names it "
            f"({', '.join(sorted(extras)) or 'none'}); nothing installed"
        )
    return staged, top


def _swap_in(
    staging: str, staged: dict[str, Dist], existing: dict[str, Dist], top: list[Dist], target: str, work: str, what: str
) -> tuple[list[str], list[str]]:
    """Move the staged files into the plugin dir and check the plugins load: (their lines, their
    warnings). Old files go aside into the work dir, new ones move in; each move is undone, last
    first, when anything fails (the plugin's own import and hooks included)."""
    os.makedirs(target, exist_ok=True)
    journal: list[tuple[str, str]] = []

    def aside(path: str) -> None:
        _move(path, os.path.join(work, "backup", os.path.relpath(path, target)), journal)

    try:
        for key in staged.keys() & existing.keys():
            _remove_dist(existing[key], aside)
        for directory, _, names in os.walk(staging):
            for name in names:
                dest = os.path.normpath(os.path.join(target, os.path.relpath(directory, staging), name))
                if os.path.lexists(dest):
                    aside(dest)
                _move(os.path.join(directory, name), dest, journal)
        lines, failures, warnings = _verify([_dists(target)[d.key] for d in top])
        if failures:
            raise UsageError(f"{what}: {'; '.join(failures)}; the plugin directory is left as it was")
    except BaseException:
        for source, dest in reversed(journal):
            if os.path.lexists(dest):
                _move(dest, source, [])
        _prune([dest for _, dest in journal], target)
        raise
    return lines, warnings


# pip with nothing on sys.path but the app's site-packages and pip itself (linked alone into a
# directory of its own; -I -S: no site-packages, no PYTHONPATH): only the bundled distributions
# count as installed, not what the node happens to have.
_ISOLATED_PIP = (
    "import runpy, sys; sys.path[:0] = sys.argv[1:3]; del sys.argv[1:3]; runpy.run_module('pip', run_name='__main__', alter_sys=True)"
)


def _resolve(specs: list[str], pip_options: list[str], what: str, app: dict[str, Dist], work: str, pip_dir: str) -> list[dict[str, Any]]:
    """What pip's resolver would install for `specs` beyond the bundled distributions (its --report
    `install` items), every bundled distribution pinned to its version. The plugin dir is not looked
    at: what it holds of them is replaced, so one install is always complete on its own."""
    constraints, report, pip_only = (os.path.join(work, n) for n in ("constraints.txt", "report.json", "pip"))
    with open(constraints, "w") as f:
        f.writelines(f"{d.name}=={d.version}\n" for d in app.values())
    os.makedirs(pip_only)
    os.symlink(pip_dir, os.path.join(pip_only, "pip"))
    _pip(
        ["install", "--dry-run", "--report", report, "--prefix", os.path.join(work, "prefix"), "-c", constraints, *pip_options, *specs],
        what,
        app,
        python=[sys.executable, "-I", "-S", "-c", _ISOLATED_PIP, app_site_packages(), pip_only],
    )
    with open(report, encoding="utf-8") as f:
        return json.load(f)["install"]


def _pinned(item: dict[str, Any]) -> str:
    """The artifact the resolver chose, as a direct reference: `name @ url` (PEP 610 to PEP 508)."""
    info = item["download_info"]
    url = info["url"]
    if "vcs_info" in info:
        url = f"{info['vcs_info']['vcs']}+{url}@{info['vcs_info']['commit_id']}"
    if info.get("subdirectory"):
        url += f"#subdirectory={info['subdirectory']}"
    return f"{item['metadata']['name']} @ {url}"


def _install_pip(specs: list[str], pip_options: list[str], echo: Callable[[str], None], what: str) -> None:
    importlib.invalidate_caches()
    before = {key: (d.version, d.site) for key, d in _dists().items()}
    _pip(["install", "--no-warn-script-location", *pip_options, *specs], what)
    importlib.invalidate_caches()
    dists = [d for key, d in _dists().items() if before.get(key) != (d.version, d.site)]
    if not dists:
        echo(f"nothing changed in the environment of {sys.executable}: {' '.join(specs)} was already installed")
        return
    echo(f"installed into the environment of {sys.executable}: {', '.join(d.label for d in dists)}")
    if not (found := [d for d in dists if d.entry_points]):
        plugins.warn(
            f"none of {', '.join(d.name for d in dists)} declares an entry point in the "
            f"`{plugins.ENTRY_POINT_GROUP}` group: they register nothing with shardeval"
        )
        return
    lines, failures, warnings = _verify(found)
    _show(lines, warnings, echo)
    if failures:
        raise UsageError(f"installed, but {'; '.join(failures)} (`shardeval plugins uninstall NAME` removes it)")


@_file_errors("remove a plugin at")
def uninstall(names: list[str], echo: Callable[[str], None]) -> None:
    """Remove plugins from the plugin directory (any mode) or, pip mode, from the environment."""
    target, mode = plugins.plugin_dir(), install_mode()
    in_dir, app = _dists(target), _dists(app_site_packages())
    env: dict[str, Dist] = {}
    if mode == "pip":  # the app is shardeval alone; the environment's other plugins pip removes
        app = {k: d for k, d in app.items() if k == "shardeval"}
        env = {k: d for k, d in _dists().items() if d.entry_points and k != "shardeval"}
    listing = ", ".join(d.label for d in sorted(in_dir.values(), key=lambda d: d.key)) or "none"
    where = f"installed in the plugin dir {target}: {listing}"
    plan: list[tuple[Dist, bool]] = []  # (distribution, whether it is in the plugin dir)
    for name in names:
        if (dist := _find(name, in_dir)) is not None:
            plan.append((dist, True))
        elif (builtin := _find(name, app)) is not None:
            raise UsageError(f"{name!r} is part of the app ({builtin.label}, bundled) and cannot be uninstalled; {where}")
        elif (dist := _find(name, env)) is not None:
            plan.append((dist, False))
        else:
            also = f"; plugins installed in the environment: {', '.join(d.label for d in env.values()) or 'none'}" if mode == "pip" else ""
            raise UsageError(f"no installed plugin {name!r}; {where}{also}")
    for dist, in_plugin_dir in plan:
        if in_plugin_dir:
            echo(f"removed {dist.label} from {target} ({_remove_dist(dist)} files)")
        else:
            _require_pip()
            _pip(["uninstall", "-y", dist.name], f"cannot uninstall {dist.name}")
            echo(f"removed {dist.label} from the environment of {sys.executable}")
