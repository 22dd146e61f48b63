"""Sweeps: every model of `sweep.services` on every benchmark, in one launch.

A sweep is a list of ordinary runs, one per model, each in `<out>/<service>/shard_<i>/`, so
merge, status, compare and resume work on each model's directory as on any run. A model's run
config is the sweep config with every benchmark that names no `solver.service` pointed at that
model: its config hash is the one the same single run would have.

One launch covers models × shards "cells", numbered model-major: cell c is shard c mod S of
model c div S (S = `cluster.shards`, 1 when unset). An orchestrator may run them with one index
(`--shard c/(M·S)`, a SLURM array task, an Indexed Job's completion index) as long as it passes
`--sweep-services` with the models in the order it numbered them: a glob resolved again on a node
could have found a new checkpoint since.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
from dataclasses import dataclass, field
from typing import Any

import msgspec

from shardeval.store.atomic import atomic_write
from shardeval.explain import Where
from shardeval.config.schema import Config, RawConfig
from shardeval.errors import UsageError
from shardeval.store.discover import PLAN_FILE, check_model_name
from shardeval.store.records import GateRule, SweepPlan, pretty_json
from shardeval.store.shards import ShardSpec

DEFAULT_SERVICE = "model"  # what a benchmark without `solver.service` asks outside a sweep
SWEEP_FLAG = "--sweep-services"


def resolve(raw: RawConfig, where: Where, may_be_empty: bool = False) -> None:
    """Outside a sweep, point benchmarks without a service at `model`. In a sweep, add a service
    per checkpoint path (from the template) and fix `sweep.services` (in order) and `baseline`."""
    sweep = raw.sweep
    if sweep is None:
        raw.benchmarks = [_with_service(b, DEFAULT_SERVICE) if b.solver.service is None else b for b in raw.benchmarks]
        return
    names = list(dict.fromkeys(sweep.services))
    for i, name in enumerate(sweep.services):
        if name not in raw.services:
            raise where.error(f"no service {name!r}; defined: {', '.join(raw.services) or 'none'}", f"sweep.services[{i}]")
    if sweep.checkpoints is not None:
        names += [name for name in _generate(raw, where) if name not in names]
    for name in names:
        if (why := check_model_name(name)) is not None:
            raise where.error(
                f"service {name!r} cannot be a sweep model: {why}; rename the service"
                + (" (or set sweep.checkpoints.prefix)" if sweep.checkpoints is not None else ""),
                "sweep",
            )
    if not names and not may_be_empty:
        raise where.error("no models: list services in `sweep.services`, or give `sweep.checkpoints` paths that exist", "sweep")
    baseline = _baseline(sweep.baseline, names, may_be_empty, where)
    if all(b.solver.service is not None for b in raw.benchmarks):
        raise where.error(
            "every benchmark names its solver.service, so none runs against the sweep's models; "
            "leave solver.service unset on the benchmarks to sweep",
            "sweep",
        )
    raw.sweep = msgspec.structs.replace(sweep, services=names, baseline=baseline)


def _baseline(named: str | None, models: list[str], may_be_empty: bool, where: Where) -> str | None:
    """`sweep.baseline`, else the first model. A watch (`may_be_empty`) may name a checkpoint not
    written yet, and without one keeps None: its first model is the first of those evaluated."""
    if may_be_empty:
        return named
    baseline = named if named is not None else models[0]
    if baseline not in models:
        raise where.error(f"{baseline!r} is not one of the sweep's models ({', '.join(models)}); name one of them", "sweep.baseline")
    return baseline


def _with_service(bench, service: str):
    return msgspec.structs.replace(bench, solver=msgspec.structs.replace(bench.solver, service=service))


def natural(text: str) -> list[Any]:
    """The sort key that puts step2 before step10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def expand_paths(paths: str | list[str]) -> list[str]:
    """`sweep.checkpoints.paths` now: each glob expanded in natural order, a plain path as it is,
    each path once (`shardeval watch` asks again at every poll)."""
    found: list[str] = []
    for pattern in [paths] if isinstance(paths, str) else paths:
        matches = sorted(glob.glob(pattern), key=natural) if glob.has_magic(pattern) else [pattern]
        found += [p for p in matches if p not in found]
    return found


def _generate(raw: RawConfig, where: Where) -> list[str]:
    """Add one service per checkpoint path (globs expanded now, in natural order) to raw.services."""
    spec = raw.sweep.checkpoints  # type: ignore[union-attr]
    assert spec is not None
    if isinstance(spec.template, str):
        if spec.template not in raw.services:
            raise where.error(
                f"no service {spec.template!r} to copy; defined: {', '.join(raw.services) or 'none'}", "sweep.checkpoints.template"
            )
        template = raw.services[spec.template]
    else:
        template = spec.template
    names = []
    for path in expand_paths(spec.paths):
        name = checkpoint_name(path, spec.prefix)
        if name in raw.services or name in names:
            raise where.error(
                f"{path} would be service {name!r}, which is already defined; set sweep.checkpoints.prefix "
                "(e.g. prefix: ckpt_) or rename the service",
                "sweep.checkpoints.paths",
            )
        names.append(name)
        raw.services[name] = {**template, spec.key: path}
    return names


def checkpoint_name(path: str, prefix: str = "") -> str:
    """The service a checkpoint path becomes: `prefix` and the path's last part, any character that
    is not a letter, digit, `_`, `.` or `-` made `_` (`/ckpt/step 1/` -> `step_1`)."""
    stem = os.path.basename(os.path.normpath(path))
    return prefix + (re.sub(r"[^A-Za-z0-9_.-]", "_", stem) or "checkpoint")


def checkpoint_paths(config: Config) -> dict[str, str]:
    """{generated service name: its checkpoint path} of a resolved sweep config, in sweep order: the
    models whose `sweep.checkpoints.key` holds a path that one of `paths` names (the path itself, or
    a glob matching it) and whose name `checkpoint_name` makes of it. Read from the services, not by
    globbing again: a checkpoint deleted since the launch keeps its path."""
    sweep = config.sweep
    spec = sweep.checkpoints if sweep is not None else None
    if sweep is None or spec is None:
        return {}
    patterns = [spec.paths] if isinstance(spec.paths, str) else spec.paths
    found: dict[str, str] = {}
    for name in sweep.services:
        path = getattr(config.services.get(name), spec.key, None)
        if not isinstance(path, str) or checkpoint_name(path, spec.prefix) != name:
            continue
        if any(path == p or (glob.has_magic(p) and fnmatch.fnmatchcase(path, p)) for p in patterns):
            found[name] = path
    return found


def looks_local(path: str) -> bool:
    """Whether a checkpoint path can only name something on this machine's filesystem: absolute, or
    starting with `.` or `~`. `org/model-step1` may be a Hugging Face id as well as a relative
    folder (vLLM tries both), so its absence proves nothing."""
    return os.path.isabs(path) or path.startswith((".", "~"))


def model_config(config: Config, name: str) -> Config:
    """The ordinary run config of one sweep model: its benchmarks ask `name`, only the services
    they use are kept, and no sweep section is left (so its hash is that of the single run)."""
    benchmarks = [_with_service(b, name) if b.solver.service is None else b for b in config.benchmarks]
    run = msgspec.structs.replace(config, benchmarks=benchmarks, sweep=None)
    run.services = run.used_services()
    return run


@dataclass(frozen=True)
class Sweep:
    """The models one launch evaluates, in cell order, and each one's run config."""

    services: tuple[str, ...]  # this launch's models (all, or those --sweep-services picks)
    baseline: str
    shards: int  # per model
    configs: dict[str, Config]
    listed: tuple[str, ...] = ()  # every model the config lists, for the plan a shard records
    checkpoints: dict[str, str] = field(default_factory=dict)  # generated model -> its checkpoint path (checkpoint_paths)
    gate: GateRule | None = None  # `sweep.gate`: the merge decides each model against the baseline

    @property
    def n_cells(self) -> int:
        return len(self.services) * self.shards

    def plan(self, service: str | None = None) -> SweepPlan:
        """The launch's plan (sweep_plan.json: with the decision rule the merge applies) or, with
        `service`, what a shard of that model records in its manifest."""
        gate = self.gate if service is None else None
        return SweepPlan(
            services=list(self.listed or self.services), baseline=self.baseline, shards=self.shards, service=service, gate=gate
        )

    def select(self, spec: ShardSpec) -> tuple[str, ShardSpec]:
        """The model and the shard of it that a launch index selects (see the module doc)."""
        models = len(self.services)
        if spec.total % models:
            raise UsageError(
                f"shard {spec.idx}/{spec.total} (from {spec.source}) does not split over the sweep's {models} models "
                f"({', '.join(self.services)}): the shard count of a sweep is models × shards per model, e.g. "
                f"--shard 0/{models * self.shards}, or pick one model with {SWEEP_FLAG} NAME"
            )
        per = spec.total // models
        name, idx = self.services[spec.idx // per], spec.idx % per
        where = f"sweep cell {spec.idx} of {spec.total}: " if models > 1 else "sweep model "
        return name, ShardSpec(idx, per, f"{spec.source}; {where}{name}")

    def gone(self, name: str) -> str | None:
        """Why model `name` cannot be evaluated now, or None: a generated checkpoint whose path is
        gone from this node (issue 42: the trainer deleted it before its evaluation). Only a local
        path (`looks_local`) of a service the shard starts itself (`managed`: the server loads the
        path here) counts; an `api` service's model names weights on a server elsewhere."""
        path = self.checkpoints.get(name)
        if path is None or not looks_local(path) or os.path.exists(os.path.expanduser(path)):
            return None
        service = self.configs[name].services.get(name) if name in self.configs else None
        if service is None or not service.managed():
            return None
        return f"checkpoint {path} is gone (no such file or folder): deleted before its evaluation; not retried"

    def write_plan(self, root: str) -> None:
        """<root>/sweep_plan.json, so merge and status know every model (also one with no shard yet)."""
        os.makedirs(root, exist_ok=True)
        atomic_write(os.path.join(root, PLAN_FILE), pretty_json(self.plan()))


def plan_sweep(config: Config, only: str | None = None) -> Sweep:
    """The sweep of `config`; `only` (the --sweep-services value, comma-separated) picks and
    orders its models."""
    assert config.sweep is not None and config.sweep.baseline is not None
    services = list(config.sweep.services)
    if only is not None:
        picked = [name.strip() for name in only.split(",") if name.strip()]
        unknown = [name for name in picked if name not in services]
        if unknown or not picked or len(set(picked)) != len(picked):
            what = f"{unknown[0]!r} is not a model of the sweep" if unknown else "give each model once"
            raise UsageError(f"{SWEEP_FLAG} {only}: {what}; its models: {', '.join(services)}")
        services = picked
    configs = {name: model_config(config, name) for name in services}
    return Sweep(
        tuple(services),
        config.sweep.baseline,
        config.cluster.shards or 1,
        configs,
        tuple(config.sweep.services),
        checkpoint_paths(config),
        config.sweep.gate,
    )
