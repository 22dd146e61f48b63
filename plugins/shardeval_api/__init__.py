"""Built-in plugin: the `api` service (an existing OpenAI-compatible server), the `simple` and `loglikelihood` solvers.

Like every built-in, it is registered through the `shardeval` entry-point group, exactly as a
third-party package would be; copy it to start your own service plugin.
"""

from __future__ import annotations

from shardeval.api.plugin import hookimpl


@hookimpl
def register_services(register):
    from shardeval_api.service import ApiServiceConfig, api_service

    register("api", api_service, config=ApiServiceConfig)


@hookimpl
def register_solvers(register):
    from shardeval.api.solver import LoglikelihoodSolver, SimpleSolver

    register("simple", SimpleSolver)
    register("loglikelihood", LoglikelihoodSolver)
