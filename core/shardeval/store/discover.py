"""Finding the shard directories of one run and checking that they belong together; reading a
sweep's plan and walking its models.

Any directory with a manifest.json is a shard (not only `shard_N` names at the top), except the
merge's own output and the `superseded/` folders that `--fresh` leaves behind. Shards must agree
on the config hash, the shard count and each benchmark's data; a mixture is refused with a
message that names the odd shard and what differs. A sweep's root holds one run per model and
`sweep_plan.json`, which names them in order (or, for a sweep run by hand, the models' manifests do).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from collections.abc import Iterator

import msgspec

from shardeval.errors import ShardError, UsageError
from shardeval.redact import redact_in
from shardeval.store.atomic import atomic_write
from shardeval.store.liveness import Liveness, read_heartbeat, writer_liveness
from shardeval.store.records import (
    LOGS_DIR,
    MANIFEST_FILE,
    RESULTS_FILE,
    BenchmarkManifest,
    Manifest,
    SweepPlan,
    pretty_json,
    read_manifest,
)
from shardeval.store.regular import read_regular

MERGED_DIR = "merged"
SUPERSEDED_DIR = "superseded"  # <shard>/superseded/<stamp>/: where --fresh moves earlier results
PLAN_FILE = "sweep_plan.json"  # <out>/sweep_plan.json: the models of the latest launch, in order
EXPORT_FILE = "export.json"  # <out>/export.json: the latest launch's `export:` list, for the merge that ends it
WATCH_DIR = "watch"  # <out>/watch/: `shardeval watch`'s state, lock and launch logs (shardeval.store.watch_state)
SKIP_DIRS = {MERGED_DIR, SUPERSEDED_DIR, "logs"}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_SHARD_NAME = re.compile(r"shard_\d+")


@dataclass
class Shard:
    path: str  # relative to the run root, for messages and deterministic order
    abspath: str
    manifest: Manifest
    lost: Liveness | None = None  # set when the manifest says running but its writer is gone

    @property
    def state(self) -> str:
        """The manifest's state, or `lost` for a `running` shard whose process is gone."""
        return "lost" if self.lost is not None else self.manifest.state


@dataclass
class Run:
    """The shard directories of one run, checked for consistency."""

    root: str
    shards: list[Shard]
    total_shards: int
    config_hash: str
    benchmarks: list[BenchmarkManifest]  # from the first shard; all agree on what matters
    orphans: list[str] = field(default_factory=list)  # results files with no manifest beside them
    # What differs in the served identity between shards, when merging was allowed anyway.
    mixed_served: list[str] = field(default_factory=list)

    def present(self) -> set[int]:
        return {s.manifest.shard_idx for s in self.shards}

    def missing_shards(self) -> list[int]:
        return sorted(set(range(self.total_shards)) - self.present())

    def running(self) -> list[Shard]:
        """Shards still being written (their heartbeat says so, or there is none to ask)."""
        return [s for s in self.shards if s.state == "running"]

    def lost(self) -> list[Shard]:
        """Shards whose manifest says running but whose process is gone: to be rerun."""
        return [s for s in self.shards if s.lost is not None]

    def duplicated_shards(self) -> dict[int, list[str]]:
        by_idx: dict[int, list[str]] = {}
        for s in self.shards:
            by_idx.setdefault(s.manifest.shard_idx, []).append(s.path)
        return {i: paths for i, paths in sorted(by_idx.items()) if len(paths) > 1}


def find_shard_dirs(root: str) -> tuple[list[str], list[str]]:
    """(shard directories, orphan directories holding results but no manifest), both sorted."""
    shards, orphans = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        if MANIFEST_FILE in filenames:
            shards.append(dirpath)
            dirnames[:] = [d for d in dirnames if not os.path.exists(os.path.join(dirpath, d, MANIFEST_FILE))]
        elif RESULTS_FILE in filenames and not os.path.exists(os.path.join(os.path.dirname(dirpath), MANIFEST_FILE)):
            orphans.append(dirpath)
    return sorted(shards), sorted(orphans)


def refuse_inside_shard(path: str, flag: str) -> None:
    """Refuse an output path (a merge's or export's -o, compare's --html) inside a shard
    directory other than in its merged/ folder: written there, a merged results.jsonl would
    replace the shard's own records. Any shard counts, the ones being read or another run's: a
    directory holding a shardeval manifest.json, at the path or above it."""
    target = os.path.realpath(path)
    where = target
    while True:
        below = os.path.relpath(target, where).split(os.sep)[0]
        if below != MERGED_DIR and _is_shard_dir(where):
            raise UsageError(
                f"{flag} {path} is inside the shard directory {where}, whose files only its own run writes; "
                f"give a path outside every shard directory, such as RUN_DIR/{MERGED_DIR}/"
            )
        parent = os.path.dirname(where)
        if parent == where:
            return
        where = parent


def _is_shard_dir(path: str) -> bool:
    """A shardeval manifest.json is there. A file of that name that is not one, or cannot be read
    (a folder called manifest.json), does not count: it says nothing about the path below it."""
    try:
        return read_manifest(path) is not None
    except (UsageError, ShardError):
        return False


def load_shards(root: str, allow_mixed_served: bool = False) -> Run:
    """The shards of the ordinary run at `root` (not a sweep), refused unless they are one run:
    one config, shard count, benchmark list and data, and one model per service unless
    `allow_mixed_served`."""
    if not os.path.isdir(root):
        raise UsageError(f"{root}: no such directory; give the directory that holds the shard directories")
    if (plan := read_plan(root)) is not None:
        raise UsageError(
            f"{root} is a sweep of {len(plan.services)} models ({', '.join(plan.services)}): give one model's "
            f"directory, {os.path.join(root, plan.services[0])}, or merge the whole sweep with `shardeval merge {root}`"
        )
    paths, orphans = find_shard_dirs(root)
    if not paths:
        hint = f" ({len(orphans)} folder(s) hold results but no manifest.json, e.g. {orphans[0]})" if orphans else ""
        raise UsageError(f"{root}: no shard directories (folders with a manifest.json) found{hint}; point at a run's output directory")
    shards = []
    for path in paths:
        manifest = read_manifest(path)
        assert manifest is not None
        hb = read_heartbeat(path) if manifest.state == "running" else None
        alive = writer_liveness(hb) if hb is not None else None  # lost: running, but its writer is gone
        shards.append(Shard(os.path.relpath(path, root), path, manifest, lost=alive if alive is not None and alive.lost else None))
    check_consistency(shards)
    mixed = check_served(shards, allow_mixed_served)
    first = shards[0].manifest
    orphans = [os.path.relpath(o, root) for o in orphans]
    return Run(root, shards, first.total_shards, first.config_hash, first.benchmarks, orphans, mixed)


def _odd(shards: list[Shard], key, describe) -> tuple[object, list[Shard], str]:
    """(the majority's `key`, the shards that differ from it, the first three of those named with
    `describe`); no odd shards when they all agree."""
    majority = Counter(key(s) for s in shards).most_common(1)[0][0] if shards else None
    odd = [s for s in shards if key(s) != majority]
    return majority, odd, ", ".join(f"{s.path} ({describe(s)})" for s in odd[:3]) + (" …" if len(odd) > 3 else "")


def _odd_one(shards: list[Shard], key, what: str) -> None:
    """Refuse when shards disagree on `key`; name the minority and the majority's value."""
    majority, odd, shown = _odd(shards, key, lambda s: f"{what} {key(s)}")
    if odd:
        raise UsageError(
            f"shards from different runs: {shown} differ from the other {len(shards) - len(odd)} shard(s) ({what} {majority}); "
            "merge each run separately, or move the odd directories out"
        )


def check_consistency(shards: list[Shard]) -> None:
    _odd_one(shards, lambda s: s.manifest.config_hash, "config")
    _odd_one(shards, lambda s: s.manifest.total_shards, "total shards")
    _odd_one(shards, lambda s: tuple(b.name for b in s.manifest.benchmarks), "benchmarks")
    for i, bench in enumerate(shards[0].manifest.benchmarks):
        for attr, what in (
            ("dataset_fingerprint", "data"),
            ("n_problems", "size"),
            ("prompt_fingerprint", "prompts"),
            ("scorer_fingerprint", "scorer"),
        ):
            _odd_one(shards, lambda s: getattr(s.manifest.benchmarks[i], attr), f"{bench.name} {what}")  # noqa: B023 - called now


ALLOW_MIXED_FLAG = "--allow-mixed-models"


def check_served(shards: list[Shard], allow: bool) -> list[str]:
    """Refuse shards whose endpoints reported different weights (or context length) for a service,
    naming the odd shard; with `allow`, return what differs so the report can say the run is mixed.
    A shard whose endpoint could not be read has nothing to compare and is not counted."""
    mixed: list[str] = []
    for name in sorted({name for s in shards for name in s.manifest.served}):
        served = {s.path: s.manifest.served[name] for s in shards if name in s.manifest.served}
        known = [s for s in shards if s.path in served and served[s.path].identity() is not None]
        majority, odd, shown = _odd(known, lambda s: served[s.path].identity(), lambda s: served[s.path].describe())  # noqa: B023 - called now
        if not odd:
            continue
        first = next(served[s.path] for s in known if served[s.path].identity() == majority)
        text = f"service {name!r}: {shown} served other weights than the other {len(known) - len(odd)} shard(s) ({first.describe()})"
        if not allow:
            raise UsageError(
                f"shards served by different models: {text}; rerun the odd shard(s) against the same weights "
                f"(shardeval run … --fresh), or pass {ALLOW_MIXED_FLAG} if you mean to pool them"
            )
        mixed.append(text)
    return mixed


def reserved(name: str) -> str | None:
    """Why `name` cannot be a model's folder at a sweep's root (None: it can): what shardeval
    itself keeps there, or a shard's name (a sweep root holding shard_<i>/ reads as a run)."""
    why = {
        PLAN_FILE: "the sweep's plan file",
        EXPORT_FILE: "the launch's export list",
        MERGED_DIR: "where the sweep's merge goes",
        SUPERSEDED_DIR: "where --fresh moves earlier results",
        LOGS_DIR: "the logs' folder",
        WATCH_DIR: "where `shardeval watch` keeps its state",
    }.get(name)
    if why is None and _SHARD_NAME.fullmatch(name):
        why = "a shard directory's name"
    return f"<out>/{name} is {why}" if why else None


def check_model_name(name: str) -> str | None:
    """Why `name` cannot be a model of a sweep (None: it can): a folder name of its own under the
    sweep's root, no path (`..`, `/`, absolute), nothing shardeval keeps there."""
    if not _NAME.fullmatch(name):
        return f"{name!r} is not a usable folder name (<out>/{name}/); use letters, digits, '.', '_' or '-'"
    return reserved(name)


def write_export_list(root: str, entries: list[dict]) -> None:
    """At a launch: <root>/export.json holds the config's `export:` list as it expanded, for the
    merge that ends the launch wherever it runs (SLURM's merge job is another process, maybe on
    another node). Credentials in a URL are redacted (the trackers refuse them anyway). A launch
    without the list removes the file: an old list never exports a new launch."""
    path = os.path.join(root, EXPORT_FILE)
    if entries:
        os.makedirs(root, exist_ok=True)
        atomic_write(path, pretty_json(redact_in(entries)))
    elif os.path.lexists(path):
        os.remove(path)


def read_export_list(root: str) -> list[dict] | None:
    """<root>/export.json's entries; None when the last launch wrote none (or it cannot be read)."""
    try:
        entries = msgspec.json.decode(read_regular(os.path.join(root, EXPORT_FILE)))
    except (OSError, msgspec.DecodeError):
        return None
    return entries if isinstance(entries, list) else None


def read_plan(root: str) -> SweepPlan | None:
    """The sweep whose models live under `root`: its plan file, else what the models' manifests
    say (a sweep run by hand has no plan file); None when `root` is not a sweep."""
    try:
        return _inside(root, PLAN_FILE, msgspec.json.decode(read_regular(os.path.join(root, PLAN_FILE)), type=SweepPlan))
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        pass
    plans = []
    for child in _subdirs(root):
        for entry in _subdirs(os.path.join(root, child)):
            manifest = read_manifest(os.path.join(root, child, entry)) if entry.startswith("shard_") else None
            if manifest is not None and manifest.sweep is not None and manifest.sweep.service == child:
                plans.append(manifest.sweep)
                break
    if not plans:
        return None
    widest = max(plans, key=lambda p: len(p.services))
    extra = [p.service for p in plans if p.service not in widest.services]
    return _inside(root, "the models' manifest.json", msgspec.structs.replace(widest, services=[*widest.services, *extra], service=None))


def _inside(root: str, source: str, plan: SweepPlan) -> SweepPlan:
    """`plan`, refused in one line when a model it lists is not a folder of this sweep: a path
    (`../other`, `/abs`) would pull another run into this sweep's merge, export or status."""
    for name in [*plan.services, plan.baseline]:
        if not isinstance(name, str) or (why := check_model_name(name)) is not None:
            raise UsageError(
                f"{os.path.join(root, source) if source == PLAN_FILE else source + ' under ' + root} lists the "
                f"model {name!r}, which is not a folder of this sweep ({why}); a sweep reads only its own "
                f"folders: fix or remove {PLAN_FILE}, or merge that run by itself"
            )
    return plan


def model_roots(root: str, plan: SweepPlan) -> Iterator[tuple[str, str | None]]:
    """Each model of the sweep at `root`, in the plan's order: (name, its run directory, or None
    while no shard of that model has written). Merge, export and status all walk a sweep this way."""
    for name, run_root in model_dirs(root, plan):
        yield name, run_root if os.path.isdir(run_root) and find_shard_dirs(run_root)[0] else None


def model_dirs(root: str, plan: SweepPlan) -> Iterator[tuple[str, str]]:
    """Each model of the sweep at `root`, in the plan's order: (name, its folder, which may not
    exist yet), refused when the folder leads outside the sweep. For a reader that looks for the
    shards itself (status: load_shards says when there are none), so it walks each folder once."""
    real_root = os.path.realpath(root)
    for name in plan.services:
        run_root = os.path.join(root, name)
        target = os.path.realpath(run_root)
        if os.path.dirname(target) != real_root:  # a symlink that leads elsewhere: another run, not this sweep's
            raise UsageError(
                f"{run_root} leads outside the sweep (to {target}); a sweep reads only its own folders: "
                f"move that run into {root}, or merge it by itself"
            )
        yield name, run_root


@contextmanager
def naming_model(name: str | None) -> Iterator[None]:
    """A usage error about one model of a sweep says which model it is about."""
    try:
        yield
    except UsageError as exc:
        if name is None:
            raise
        raise UsageError(f"sweep model {name!r}: {exc}") from None


def _subdirs(path: str) -> list[str]:
    try:
        return sorted(entry.name for entry in os.scandir(path) if entry.is_dir())
    except OSError:
        return []
