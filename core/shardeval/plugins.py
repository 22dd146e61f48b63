"""Finding and loading plugins: entry points, the plugin directory, and SHARDEVAL_PLUGINS.

Built-ins come through the same `shardeval` entry-point group as third-party packages. A plugin
that fails to import or to register is named in one warning; everything else keeps working.
Loading imports only plugin modules (which must stay light), so `--help` stays fast.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from functools import lru_cache

import pluggy

from shardeval import hookspecs
from shardeval.registry import KINDS, Registry

ENTRY_POINT_GROUP = "shardeval"
PLUGINS_ENV = "SHARDEVAL_PLUGINS"
PLUGIN_DIR_ENV = "SHARDEVAL_PLUGIN_DIR"


@dataclass(frozen=True)
class LoadedPlugin:
    name: str
    module: str
    source: str  # "entry point (dist x.y)", "plugin dir", "SHARDEVAL_PLUGINS"


def plugin_dir() -> str:
    """Where `shardeval plugins install` puts plugins for an installed zipapp."""
    override = os.environ.get(PLUGIN_DIR_ENV)
    if override:
        return override
    from platformdirs import user_data_dir

    return os.path.join(user_data_dir("shardeval"), "plugins")


def _add_plugin_dir_to_path() -> None:
    path = plugin_dir()
    if os.path.isdir(path) and path not in sys.path:
        sys.path.append(path)  # after the app's own packages: a plugin never shadows them


@dataclass
class PluginSet:
    manager: pluggy.PluginManager
    loaded: list[LoadedPlugin]
    failures: list[str]


def _warn(message: str) -> None:
    print(f"shardeval: warning: {message}", file=sys.stderr)


@lru_cache(maxsize=1)
def load() -> PluginSet:
    """Import every plugin module once per process (cheap: plugin modules import lazily)."""
    from importlib.metadata import entry_points

    pm = pluggy.PluginManager("shardeval")
    pm.add_hookspecs(hookspecs)
    loaded: list[LoadedPlugin] = []
    failures: list[str] = []
    _add_plugin_dir_to_path()

    def add(name: str, module_name: str, source: str) -> None:
        if pm.has_plugin(name):
            return
        try:
            module = importlib.import_module(module_name)
            pm.register(module, name=name)
        except Exception as exc:  # a broken plugin must not take the others down
            failures.append(f"plugin {name!r} ({module_name}) failed to load: {type(exc).__name__}: {exc}")
            return
        loaded.append(LoadedPlugin(name=name, module=module_name, source=source))

    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(ep, "dist", None)
        source = f"entry point ({dist.name} {dist.version})" if dist else "entry point"
        add(ep.name, ep.value.split(":")[0], source)
    for module_name in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        add(module_name, module_name, PLUGINS_ENV)
    for message in failures:
        _warn(message)
    return PluginSet(manager=pm, loaded=loaded, failures=failures)


@lru_cache(maxsize=1)
def registry() -> Registry:
    """Collect every plugin's registrations; a plugin whose hook fails is named and skipped."""
    plugin_set = load()
    registry = Registry()
    for kind in KINDS:
        caller = getattr(plugin_set.manager.hook, f"register_{kind}")
        for impl in caller.get_hookimpls():
            try:
                impl.function(register=registry.registrar(kind, impl.plugin_name))
            except Exception as exc:
                registry.problems.append(
                    f"plugin {impl.plugin_name!r} failed in register_{kind}: {type(exc).__name__}: {exc}"
                )
    for message in registry.problems:
        _warn(message)
    plugin_set.failures.extend(registry.problems)
    return registry


def hooks() -> pluggy.HookRelay:
    return load().manager.hook
