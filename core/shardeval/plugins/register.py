"""What the loaded plugins registered: benchmarks, solvers, services, orchestrators, metrics, exporters.

Precedence when two plugins register the same name follows the hook implementations' order
marks: one made from a `tryfirst` hook replaces a plain one on purpose (a site plugin overriding a
built-in), and a plain one replaces one made from a `trylast` hook (a default meant to yield).
At equal precedence the plugin loaded first keeps the name and the other is named in a warning.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from collections.abc import Mapping

from shardeval.errors import UsageError

if TYPE_CHECKING:
    from types import FrameType

    from pluggy import HookImpl

    from shardeval.payloads import RegisterCallback

KINDS = ("benchmarks", "solvers", "services", "orchestrators", "metrics", "exporters")


class Lazy:
    """A factory named `"module:attr"` (a benchmark class, a metric function, ...), imported on its
    first call: registering it costs nothing, so `--help` and `shardeval plugins` stay fast, and a
    module that cannot import (a missing optional dependency) fails only when it is used."""

    def __init__(self, target: str) -> None:
        self.__module__, _, self.attr = target.partition(":")

    def load(self) -> Any:
        return getattr(importlib.import_module(self.__module__), self.attr)

    def __call__(self, *args: Any) -> Any:
        return self.load()(*args)

    def __repr__(self) -> str:
        return f"<lazy {self.__module__}:{self.attr}>"


@dataclass(frozen=True)
class Entry:
    name: str
    factory: Any
    plugin: str
    config: type | None = None
    precedence: int = 0  # 1: from a `tryfirst` hook, -1: from a `trylast` one, 0: plain
    replaces: str | None = None  # the plugin whose registration of this name it replaced on purpose


class Register:
    """The `register(name, factory, config=None)` callback of one `register_<kind>` hook call.

    It attributes each registration to the plugin whose hook implementation is running (found on
    the call stack), so clashes are reported by name. `registered` is a read-only view of what is
    registered so far: a wrapper hook sees, after its `yield`, what every other plugin registered.
    """

    def __init__(self, kind: str, impls: Mapping[Any, HookImpl], rank: Mapping[str, int]) -> None:
        self.kind, self._impls, self._rank = kind, impls, rank
        self.table: dict[str, Entry] = {}
        self.problems: list[str] = []
        self.registered: Mapping[str, Entry] = MappingProxyType(self.table)

    def __call__(self, name: str, factory: Any, config: type | None = None) -> None:
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code not in self._impls:
            frame = frame.f_back
        impl = None if frame is None else self._impls[frame.f_code]
        precedence = int(impl.tryfirst) - int(impl.trylast) if impl else 0
        new = Entry(name, factory, impl.plugin_name if impl else "?", config, precedence)
        old = self.table.get(name)
        if old is None:
            self.table[name] = new
        elif old.precedence != new.precedence:  # one of them replaces the other on purpose
            keep, drop = (new, old) if new.precedence > old.precedence else (old, new)
            self.table[name] = replace(keep, replaces=drop.plugin)
        else:
            keep, drop = (old, new) if self._rank.get(old.plugin, 0) <= self._rank.get(new.plugin, 0) else (new, old)
            self.table[name] = keep
            self.problems.append(
                f"plugin {drop.plugin!r} registers {self.kind[:-1]} {name!r}, already registered by {keep.plugin!r}; the first one is kept"
            )


@dataclass
class Registry:
    entries: dict[str, dict[str, Entry]] = field(default_factory=lambda: {k: {} for k in KINDS})
    problems: list[str] = field(default_factory=list)

    def get(self, kind: str, name: str, where: str) -> Entry:
        """Look up a registration or fail with one line naming the value, the choices and the fix."""
        import difflib

        table = self.entries[kind]
        if name in table:
            return table[name]
        close = difflib.get_close_matches(name, list(table), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        known = ", ".join(sorted(table)) or "none"
        raise UsageError(f"{where}: unknown {kind[:-1]} {name!r}; {hint}registered: {known} (`shardeval plugins` lists what is loaded)")


if TYPE_CHECKING:

    def _as_hook_payload(register: Register) -> RegisterCallback:
        """Never run: mypy holds Register to the type the hooks name it by (shardeval.payloads)."""
        return register
