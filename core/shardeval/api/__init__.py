"""shardeval's public SDK, by role: a plugin imports from the module of its role.

    from shardeval.api.plugin import hookimpl, UsageError        # every plugin
    from shardeval.api.benchmark import Benchmark, Problem, Score
    # .service, .solver, .orchestrator, .exporter, .metric, .records, .pages

Each role module is cheap to import (it imports nothing): a name loads its core module on first
use (PEP 562), so a plugin module imports it at top level, `shardeval --help` stays fast, and a
module that runs without shardeval's dependencies (the code sandbox under a bare Python) can take
the stdlib-only tools it needs. The names are listed once, by role, in shardeval.api.roles, which
docs/plugins.md's table follows; the hooks are in shardeval.hookspecs. The built-in plugins import
nothing else of shardeval, so each is a template a third party can copy.

`hookimpl` stays here too. The flat form of the previous release, `from shardeval.api import X`,
still works for one release with a DeprecationWarning naming X's role module (or saying X is
internal now).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from shardeval.api import roles

if TYPE_CHECKING:
    from shardeval.hookspecs import hookimpl as hookimpl

ROLE_MODULES = tuple(roles.GROUPS)  # shardeval.api.<role>, each a module of its own
__all__ = ["hookimpl"]


def __getattr__(name: str) -> Any:
    if name == "hookimpl":
        value = globals()["hookimpl"] = importlib.import_module("shardeval.hookspecs").hookimpl
        return value
    role = roles.HOME.get(name)
    if role is not None:
        module, home = roles.ROLES[role][name], f"shardeval.api.{role}"
        why = f"import it from {home} (from {home} import {name})"
    elif name in roles.RETIRED:
        module = roles.RETIRED[name]
        why = f"it is no longer published (internal: {module}) and goes in the next release"
    else:  # a role module imported as `from shardeval.api import benchmark` comes here first
        raise AttributeError(f"module 'shardeval.api' has no attribute {name!r}")
    warnings.warn(f"shardeval.api.{name} is deprecated: {why}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*__all__, *ROLE_MODULES])
