"""A merged run or sweep as W&B runs: one per (model, benchmark), found again by its key.

Each TrackerRun becomes the W&B run whose id is derived from its `key` (`wandb_run_id`), opened
with resume="allow": the first export creates it, a later one (the run completed, a new
checkpoint in the sweep) resumes and updates that same run, never a second one. What it holds:

- config: the run's params (identity, served weights, provenance) and its tags (status, who
  exported it), plus `checkpoint_step`;
- tags: `shardeval`, `shardeval:<key>` (the identity, to filter on), `status:<status>`,
  `model:<model>`, `benchmark:<benchmark>`; replaced on each export, so the status is current;
- metrics: one history row per export, `checkpoint_step` and every metric (value, bounds, n,
  counts, a sweep's differences against its baseline), plotted against `checkpoint_step`. W&B's
  own step is left to W&B: a resumed run refuses rows at a step it has passed, so a re-export
  would be dropped, where a new row is not. The summary (what W&B's tables show) is set to the
  same values, so it always holds the latest export;
- an artifact `shardeval-<run id>-<benchmark>` of type `evaluation`: the per-sample table,
  scores.json and report.html (a new version only when their bytes changed).

WANDB_MODE=offline (or `mode: offline`) writes the runs under <dir>/wandb/offline-run-*, to upload
later with `wandb sync`. The API key is W&B's business: it reads WANDB_API_KEY (or its netrc)
itself; this module never reads it, except to keep it out of an error line.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import tempfile
from types import ModuleType
from typing import TYPE_CHECKING, Any

from shardeval.api.exporter import TrackerExport, TrackerRun
from shardeval.api.plugin import network_failure, ShardError, UsageError
from shardeval_wandb.config import EXTRA, WandbExportConfig, check_project

if TYPE_CHECKING:
    import wandb as wandb_module

STEP_METRIC = "checkpoint_step"
ARTIFACT_TYPE = "evaluation"
JOB_TYPE = "eval"
# wandb.init waits this long for the server (W&B's default is 90 s); WANDB_INIT_TIMEOUT overrides it.
INIT_TIMEOUT_S = 15.0
_TAG_MAX = 64  # W&B refuses longer tags
_ARTIFACT_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_ID_UNSAFE = re.compile(r"[^a-z0-9]")


def wandb_run_id(key: str) -> str:
    """The W&B run id of a tracker run: the same for the same key on every export, lowercase
    letters and digits only (what W&B's URLs take), the shardeval run id readable at its start."""
    run_part = _ID_UNSAFE.sub("", key.split("/")[0].lower())[:12]
    return f"se{run_part}{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def artifact_name(run: TrackerRun) -> str:
    """The artifact collection of a tracker run: its versions are that run's exports."""
    bench = _ARTIFACT_UNSAFE.sub("_", run.benchmark)
    if bench != run.benchmark:  # two names that differ only where they were made safe stay apart
        bench += "-" + hashlib.sha256(run.benchmark.encode()).hexdigest()[:6]
    return f"shardeval-{run.run_id}-{bench}"[:128]


def _tag(text: str) -> str:
    """A tag W&B takes (1 to 64 characters): a longer one keeps its start and a hash of the whole."""
    if len(text) <= _TAG_MAX:
        return text
    return text[: _TAG_MAX - 9] + "~" + hashlib.sha256(text.encode()).hexdigest()[:8]


def run_tags(run: TrackerRun) -> list[str]:
    return [
        _tag(t)
        for t in ("shardeval", f"shardeval:{run.key}", f"status:{run.status.lower()}", f"model:{run.model}", f"benchmark:{run.benchmark}")
    ]


def run_config(run: TrackerRun) -> dict[str, Any]:
    return {**run.params, **run.tags, STEP_METRIC: run.step}


def _mode(config: WandbExportConfig) -> str:
    mode = (config.mode or os.environ.get("WANDB_MODE") or "online").strip().lower()
    return {"dryrun": "offline", "run": "online"}.get(mode, mode)


def _directory(config: WandbExportConfig, export: TrackerExport) -> str | None:
    """Where W&B's local folders go: `dir` (-o), else WANDB_DIR (None: W&B reads it), else the
    merged/ folder of the run or sweep, beside the results they come from."""
    if config.dir is None and os.environ.get("WANDB_DIR"):
        return None
    directory = os.path.abspath(config.dir or os.path.join(export.root, "merged"))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"-o {directory}: cannot write W&B's run folders there ({exc.strerror}); give a writable folder") from None
    return directory


def _settings(wandb: ModuleType, config: WandbExportConfig) -> wandb_module.Settings:
    """Quiet, and nothing of this machine's: no console capture, code, git, requirements or system
    metrics (the export is not the evaluation; its provenance is in the config)."""
    options: dict[str, Any] = dict(
        silent=True,
        console="off",
        save_code=False,
        disable_code=True,
        disable_git=True,
        x_disable_stats=True,
        x_disable_meta=True,
        x_disable_machine_info=True,
        x_save_requirements=False,
    )
    if not os.environ.get("WANDB_INIT_TIMEOUT"):
        options["init_timeout"] = INIT_TIMEOUT_S
    if config.mode is not None:
        options["mode"] = config.mode
    known = set(getattr(wandb.Settings, "model_fields", {})) or set(options)
    return wandb.Settings(**{k: v for k, v in options.items() if k in known})


def _one_line(exc: BaseException) -> str:
    """A library's error as one line, the API key kept out of it whatever the library said."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = "; ".join(lines)[:400] or type(exc).__name__
    key = os.environ.get("WANDB_API_KEY")
    return text.replace(key, "***") if key else text


def _has_credentials(wandb: ModuleType) -> bool:
    """Whether W&B has an API key (env, netrc, settings), asked without a prompt: an export at the
    end of a launch must never wait for someone to type one."""
    if "prompt" not in inspect.signature(wandb.login).parameters:
        return True  # an older wandb: it raises its own error when there is no key and no terminal
    return bool(wandb.login(prompt=False, verify=False))


def _export_run(
    wandb: ModuleType,
    run: TrackerRun,
    settings: wandb_module.Settings,
    *,
    project: str,
    entity: str | None,
    group: str,
    directory: str | None,
) -> wandb_module.Run:
    """One tracker run written: its W&B run created or resumed, updated and finished."""
    with tempfile.TemporaryDirectory(prefix="shardeval-wandb-") as tmp:
        files = run.artifacts(tmp)  # before wandb.init: nothing waits on the server while the table is written
        r = wandb.init(
            id=wandb_run_id(run.key),
            resume="allow",
            project=project,
            entity=entity,
            name=run.name,
            group=group,
            job_type=JOB_TYPE,
            tags=run_tags(run),
            config=run_config(run),
            dir=directory,
            reinit="create_new",
            settings=settings,
        )
        try:
            r.define_metric(STEP_METRIC)
            r.define_metric("*", step_metric=STEP_METRIC)
            r.log({STEP_METRIC: run.step, **run.metrics})
            r.summary.update({**run.metrics, STEP_METRIC: run.step, "status": run.status})
            artifact = wandb.Artifact(
                artifact_name(run),
                type=ARTIFACT_TYPE,
                description=f"shardeval {run.name}: per-sample table, scores.json, report.html",
                metadata={"key": run.key, "status": run.status, "step": run.step, "config_hash": run.config_hash},
            )
            for path in files:
                artifact.add_file(path)  # copied into W&B's staging area now: the temporary folder may go
            r.log_artifact(artifact)
        except BaseException:
            r.finish(exit_code=1)
            raise
        r.finish()
        return r


def export_wandb(config: WandbExportConfig, export: TrackerExport) -> list[str]:
    """Export every tracker run of `export` to W&B; the lines to show the user."""
    try:
        import wandb
    except ImportError:
        raise UsageError(f"--to wandb needs wandb, which is not installed: {EXTRA}") from None
    mode = _mode(config)
    if mode == "disabled":
        return ["wandb: WANDB_MODE=disabled: nothing exported"]
    project = config.project or os.environ.get("WANDB_PROJECT") or _default_project(export.root)
    check_project(project, "--project" if config.project else "WANDB_PROJECT" if os.environ.get("WANDB_PROJECT") else "project")
    entity = config.entity or os.environ.get("WANDB_ENTITY") or None
    group = os.path.basename(export.root.rstrip(os.sep))[:128] or "shardeval"
    directory = _directory(config, export)
    if not export.runs:
        return ["wandb: nothing to export (no model has merged results yet)"]

    # A process with a W&B run of its own (a training script calling shardeval) keeps it and its
    # session: the runs here are made beside it (reinit="create_new") and W&B is not torn down.
    owned = wandb.run is None
    settings = _settings(wandb, config)
    setup = wandb.setup(settings=settings) if owned else wandb.setup()
    base_url = str(setup.settings.base_url)
    try:
        if mode != "offline" and not _has_credentials(wandb):
            raise UsageError(
                f"--to wandb: no W&B API key for {base_url}: set WANDB_API_KEY (or run `wandb login`), "
                f"or export offline (WANDB_MODE=offline) and upload later with `wandb sync`"
            )
        done: list[Any] = []
        for run in export.runs:
            try:
                done.append(_export_run(wandb, run, settings, project=project, entity=entity, group=group, directory=directory))
            except (UsageError, ShardError):
                raise
            except Exception as exc:
                raise ShardError(_failure(exc, wandb, base_url, mode, project, export, len(done))) from None
    finally:
        if owned:
            wandb.teardown()  # the service process goes with the export

    runs = f"{len(done)} run" + ("s" if len(done) != 1 else "")
    where = f"project '{project}'" + (f" of entity '{entity}'" if entity else "")
    if mode == "offline":
        wandb_dir = os.path.dirname(done[0].settings.sync_dir)
        them = "them" if len(done) != 1 else "it"
        return [f"wandb: {runs} in {where} (offline: {wandb_dir}; `wandb sync {wandb_dir}` uploads {them})"]
    url = getattr(done[0], "project_url", None)
    return [f"wandb: {runs} in {where}" + (f": {url}" if url else f" at {base_url}")]


def _default_project(root: str) -> str:
    name = os.path.basename(root.rstrip(os.sep)) or "shardeval"
    return re.sub(r"[/\\#?%:]", "-", name)[:128]


def _failure(exc: Exception, wandb: ModuleType, base_url: str, mode: str, project: str, export: TrackerExport, done: int) -> str:
    """One line: what W&B said, at which server, and what to do about it."""
    so_far = f" ({done} of {len(export.runs)} runs exported before)" if done else ""
    said = _one_line(exc)
    if mode == "offline":
        return f"wandb: writing the offline runs failed{so_far}: {type(exc).__name__}: {said}"
    if isinstance(exc, getattr(wandb.errors, "AuthenticationError", ())):
        return f"wandb: W&B at {base_url} refused the API key{so_far}: {said}; check WANDB_API_KEY (or `wandb login`) and WANDB_ENTITY"
    if not network_failure(exc):  # W&B answered, with an error of its own: said as it is, not blamed on the network
        return f"wandb: W&B at {base_url} (project '{project}') failed{so_far}: {type(exc).__name__}: {said}"
    return (
        f"wandb: cannot reach W&B at {base_url} (project '{project}'){so_far}: {said}; check WANDB_BASE_URL and the "
        f"network, or export offline (WANDB_MODE=offline shardeval export {export.root} --to wandb) and upload later "
        f"with `wandb sync`"
    )
