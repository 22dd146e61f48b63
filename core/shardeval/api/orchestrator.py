"""shardeval.api.orchestrator: what an orchestrator plugin needs: a launch request turned into
shards somewhere, then merged. The names and what each is for are listed once in
shardeval/api/roles.py (docs/plugins.md shows them); a name loads its core module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.roles import serve

if TYPE_CHECKING:  # made from shardeval/api/roles.py by scripts/dev/api_roles_rewrite.py --blocks
    from shardeval.launch.orchestrator import (
        Orchestrator as Orchestrator,
        CellOutcome as CellOutcome,
        LaunchRequest as LaunchRequest,
        Cell as Cell,
        dump_yaml as dump_yaml,
        escape_dollars as escape_dollars,
        ENV_NAME as ENV_NAME,
    )
    from shardeval.launch.lifecycle import orchestrate as orchestrate, load_request as load_request
    from shardeval.launch.cell import run_cell as run_cell
    from shardeval.config import Config as Config, ClusterConfig as ClusterConfig
    from shardeval.config.loading import load_config as load_config
    from shardeval.launch import setup_logging as setup_logging
    from shardeval.errors import EXIT_WITH_ERRORS as EXIT_WITH_ERRORS
    from shardeval.command_line import evaluation_options as evaluation_options, override_option as override_option, run_cli as run_cli
    from shardeval.run.process import node_command as node_command, die_with_parent as die_with_parent
    from shardeval.run.resume import check_submission as check_submission
    from shardeval.store.shards import shard_range as shard_range
    from shardeval.store.standing import nothing_to_ask as nothing_to_ask
    from shardeval.identity import config_hash as config_hash
    from shardeval.store.prepared import portable_preparation as portable_preparation, PortablePreparation as PortablePreparation
else:  # type checkers read the imports above; at run time each name is imported on first use
    __getattr__, __dir__, __all__ = serve("orchestrator")
