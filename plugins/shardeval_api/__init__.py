"""Built-in plugin: the `api` service (an existing OpenAI-compatible server), the `simple` and `loglikelihood` solvers.

Like every built-in, it is registered through the `shardeval` entry-point group, exactly as a
third-party package would be; copy it to start your own service plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.plugin import hookimpl

if TYPE_CHECKING:
    from shardeval.api.plugin import Register


@hookimpl
def register_services(register: Register) -> None:
    from shardeval_api.service import ApiServiceConfig, api_service

    register("api", api_service, config=ApiServiceConfig)


@hookimpl
def register_solvers(register: Register) -> None:
    from shardeval.api.solver import LoglikelihoodSolver, SimpleSolver

    register("simple", SimpleSolver)
    register("loglikelihood", LoglikelihoodSolver)
