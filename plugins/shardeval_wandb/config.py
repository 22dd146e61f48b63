"""The keys of an `export: [{to: wandb, ...}]` entry and of `export --to wandb`'s flags."""

from __future__ import annotations

import importlib.util
import re
from typing import Literal

from shardeval.api.exporter import ExportConfig
from shardeval.api.plugin import UsageError

EXTRA = "pip install 'shardeval[wandb]' (the one file: shardeval plugins install wandb)"
# W&B refuses these in a project's name (and the name is part of every URL it draws).
PROJECT_FORBIDDEN = re.compile(r"[/\\#?%:]")


class WandbExportConfig(ExportConfig):
    project: str | None = None  # default: WANDB_PROJECT, else the run directory's name
    entity: str | None = None  # default: WANDB_ENTITY, else the account's default
    mode: Literal["online", "offline"] | None = None  # default: WANDB_MODE, else online
    dir: str | None = None  # `-o`: where W&B's local run folders go (<dir>/wandb/); default: WANDB_DIR, else <run>/merged/

    def check(self) -> None:
        """Before any merge: wandb is installed and the project's name is one W&B takes."""
        if importlib.util.find_spec("wandb") is None:
            raise UsageError(f"--to wandb needs wandb, which is not installed: {EXTRA}")
        if self.project is not None:
            check_project(self.project, "--project")


def check_project(project: str, where: str) -> None:
    """A project's name W&B would refuse, said before anything is written."""
    bad = sorted(set(PROJECT_FORBIDDEN.findall(project)))
    if not project.strip() or bad or len(project) > 128:
        why = f"it holds {' '.join(bad)}" if bad else "it is empty" if not project.strip() else "it is over 128 characters"
        raise UsageError(f"{where} {project!r}: not a W&B project name ({why}); use letters, digits, '-', '_' or '.'")
