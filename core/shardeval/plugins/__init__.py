"""Finding and loading plugins: entry points, the plugin directory, and SHARDEVAL_PLUGINS.

Built-ins come through the same `shardeval` entry-point group as third-party packages (loaded
with `ep.load()`). Hooks are called through pluggy. A plugin that fails to import or whose
registration hook raises is named in one warning; everything else keeps working.
Loading imports only plugin modules (which must stay light), so `--help` stays fast.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any
from collections.abc import Callable

import pluggy

from shardeval import hookspecs
from shardeval.app import app_site_packages, dist_location, install_mode
from shardeval.errors import UsageError
from shardeval.plugins.register import KINDS, Entry, Register, Registry

ENTRY_POINT_GROUP = "shardeval"
PLUGINS_ENV = "SHARDEVAL_PLUGINS"
PLUGIN_DIR_ENV = "SHARDEVAL_PLUGIN_DIR"


@dataclass(frozen=True)
class LoadedPlugin:
    name: str
    module: str
    # "entry point (dist x.y), bundled" | "entry point (dist x.y), plugin dir (PATH)" |
    # "entry point (dist x.y)" (another package of the environment) | "SHARDEVAL_PLUGINS"
    source: str
    version: str | None = None  # the distribution's version (a SHARDEVAL_PLUGINS module's __version__)
    dist: str | None = None  # the distribution's name; None for SHARDEVAL_PLUGINS
    location: str | None = None  # the directory holding the distribution's metadata


def plugin_dir() -> str:
    """Where `shardeval plugins install` puts plugins for an installed zipapp (searched always)."""
    if override := os.environ.get(PLUGIN_DIR_ENV):
        return os.path.abspath(os.path.expanduser(override))
    from platformdirs import user_data_dir

    return os.path.join(user_data_dir("shardeval"), "plugins")


def origin(dist: Any) -> str:
    """An entry point's source for `shardeval plugins`: its distribution, and whether that is in the
    plugin dir or part of the app (`bundled`: shardeval's own built-ins, or anything inside the zipapp)."""
    if dist is None:
        return "entry point"
    source, location = f"entry point ({dist.metadata['Name']} {dist.version})", dist_location(dist)
    if location and location == os.path.realpath(plugin_dir()):
        return f"{source}, plugin dir ({plugin_dir()})"
    try:
        bundling = install_mode() == "target"  # the app's site-packages is the zipapp's own
    except UsageError:
        bundling = False  # a bad SHARDEVAL_INSTALL_MODE is reported by `plugins install`
    bundled = (dist.metadata["Name"] or "").lower() == "shardeval" or (bundling and location == app_site_packages())
    return f"{source}, bundled" if bundled else source


@dataclass
class PluginSet:
    manager: pluggy.PluginManager
    loaded: list[LoadedPlugin]
    failures: list[str]


def warn(message: str) -> None:
    print(f"shardeval: warning: {message}", file=sys.stderr)


def discover() -> PluginSet:
    """Import every plugin module and register it (uncached and silent; most callers want `load()`)."""
    from importlib.metadata import entry_points

    pm = pluggy.PluginManager("shardeval")
    pm.add_hookspecs(hookspecs)
    loaded: list[LoadedPlugin] = []
    failures: list[str] = []
    if os.path.isdir(plugin_dir()) and plugin_dir() not in sys.path:
        sys.path.append(plugin_dir())  # after the app's own packages: a plugin never shadows them

    def add(name: str, module_name: str, load: Callable[[], object], source: str, dist: Any = None) -> None:
        if pm.has_plugin(name):
            return
        try:
            plugin = load()
            pm.register(plugin, name=name)
        except Exception as exc:  # a broken plugin must not take the others down
            failures.append(f"plugin {name!r} ({module_name}) failed to load: {type(exc).__name__}: {exc}")
            return
        if dist is None:
            version = getattr(plugin, "__version__", None)
            loaded.append(LoadedPlugin(name, module_name, source, str(version) if version else None))
        else:
            loaded.append(LoadedPlugin(name, module_name, source, dist.version, dist.metadata["Name"], dist_location(dist)))

    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        add(ep.name, ep.module, ep.load, origin(getattr(ep, "dist", None)), getattr(ep, "dist", None))
    for module_name in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        add(module_name, module_name, partial(importlib.import_module, module_name), PLUGINS_ENV)
    return PluginSet(manager=pm, loaded=loaded, failures=failures)


@lru_cache(maxsize=1)
def load() -> PluginSet:
    """Import every plugin module once per process (cheap: plugin modules import lazily); each
    plugin that fails is named in a warning."""
    plugin_set = discover()
    for message in plugin_set.failures:
        warn(message)
    return plugin_set


def plugin_manager() -> pluggy.PluginManager:
    """The manager every plugin is registered with: an object with hook implementations can join
    it for a while (register, then unregister), as a test hook does."""
    return load().manager


def collect(plugin_set: PluginSet) -> Registry:
    """Call every plugin's register_* hooks through pluggy (so wrappers and tryfirst/trylast take
    effect); a plugin whose hook raises is named in `problems`, and the hook is called again
    without it, so the others' registrations stand."""
    registry = Registry()
    rank = {p.name: i for i, p in enumerate(plugin_set.loaded)}
    pm = plugin_set.manager
    for kind in KINDS:
        hook = f"register_{kind}"
        impls = {getattr(inspect.unwrap(impl.function), "__code__", None): impl for impl in getattr(pm.hook, hook).get_hookimpls()}
        broken: list[object] = []
        while True:
            register = Register(kind, impls, rank)
            try:
                (pm.subset_hook_caller(hook, broken) if broken else getattr(pm.hook, hook))(register=register)
                break
            except Exception as exc:
                culprit = _raised_in(exc, impls)
                who = f"plugin {culprit.plugin_name!r}" if culprit else "a plugin"
                registry.problems.append(f"{who} failed in {hook}: {type(exc).__name__}: {exc}")
                if culprit is None:
                    break
                broken.append(culprit.plugin)
        registry.entries[kind] = register.table
        registry.problems.extend(register.problems)
    return registry


def _raised_in(exc: BaseException, impls: dict[Any, pluggy.HookImpl]) -> pluggy.HookImpl | None:
    """The hook implementation whose code raised `exc` (the innermost one on its traceback)."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        found = impls.get(tb.tb_frame.f_code, found)
        tb = tb.tb_next
    return found


@lru_cache(maxsize=1)
def registry() -> Registry:
    """Collect every plugin's registrations once; a plugin whose hook fails is named and skipped."""
    plugin_set = load()
    registry = collect(plugin_set)
    plugin_set.failures.extend(registry.problems)
    for message in registry.problems + undeclared_identities(registry):
        warn(message)
    return registry


def undeclared_identities(registry: Registry) -> list[str]:
    """Service types whose config does not say which keys change results (`identity()`): no
    config Struct (the plain ServiceConfig), or one that does not override it."""
    return [
        f"plugin {entry.plugin!r}: service type {entry.name!r} does not declare which of its keys change results "
        f"(its config Struct has no identity() method), so every key of its section counts toward the run identity "
        "and changing any of them (a port too) refuses a resume; see docs/plugins.md"
        for entry in registry.entries["services"].values()
        # a config Struct that is no ServiceConfig has no default identity() to keep: nothing to say
        if entry.config is None or not getattr(entry.config, "declares_identity", lambda: True)()
    ]


def registrations(registry: Registry, plugin: str) -> list[str]:
    """What one plugin registered, as `benchmark capitals`, `service sim`, ..."""
    return [
        f"{kind[:-1]} {entry.name}{_replacing(entry)}"
        for kind, table in registry.entries.items()
        for entry in table.values()
        if entry.plugin == plugin
    ]


def _replacing(entry: Entry) -> str:
    if entry.replaces is None:
        return ""
    if entry.precedence > 0:
        return f" (tryfirst: replaces plugin {entry.replaces!r})"
    return f" (replaces the trylast default of plugin {entry.replaces!r})"


def plugin_version(name: str) -> str | None:
    """`dist version` of a loaded plugin (e.g. `shardeval 0.1.0`), or None if it says none."""
    plugin = next((p for p in load().loaded if p.name == name and p.version is not None), None)
    return f"{plugin.dist or plugin.module} {plugin.version}" if plugin else None


def hooks() -> pluggy.HookRelay:
    return load().manager.hook


@dataclass(frozen=True)
class ExportFlag:
    """One flag of `shardeval export --to TARGET` that a plugin declared (hookspecs.export_flags)."""

    target: str
    flag: str  # "--tracking-uri"
    key: str  # the target config's key it sets
    help: str
    metavar: str = "VALUE"

    @property
    def dest(self) -> str:
        """The name click gives the flag's value: --tracking-uri -> tracking_uri."""
        return self.flag.lstrip("-").replace("-", "_")


@lru_cache(maxsize=1)
def export_flags() -> tuple[ExportFlag, ...]:
    """Every export target's flags, as the loaded plugins declare them (in load order)."""
    flags: list[ExportFlag] = []

    def add(target: str, flag: str, key: str, help: str, metavar: str = "VALUE") -> None:
        if not flag.startswith("--") or flag in ("--to", "--output", "--format", "--allow-mixed-models", "--help"):
            warn(f"an export target's flag {flag!r} for --to {target} is refused: a flag is --name and not one of export's own")
            return
        flags.append(ExportFlag(target, flag, key, help, metavar))

    hooks().export_flags(add=add)
    return tuple(flags)
