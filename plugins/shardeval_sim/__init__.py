"""Built-in plugin: the simulator — the `shardeval sim` command and the `sim` service type.

A real OpenAI-compatible server (aiohttp) that answers registered benchmarks correctly with a
chosen probability and injects faults, for demos, tests and benchmarks. Like every built-in, it
is registered through the `shardeval` entry-point group; this module stays light (no aiohttp or
msgspec at import), so `shardeval --help` stays fast.
"""

from __future__ import annotations

from shardeval.api.plugin import hookimpl


@hookimpl
def register_commands(cli):
    from shardeval_sim.command import sim_command

    cli.add_command(sim_command)


@hookimpl
def register_services(register):
    from shardeval_sim.config import SimServiceConfig
    from shardeval_sim.service import sim_service

    register("sim", sim_service, config=SimServiceConfig)
