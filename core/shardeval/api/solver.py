"""shardeval.api.solver: what a solver plugin needs: how a problem is asked of a service. The names
and what each is for are listed once in shardeval/api/roles.py (docs/plugins.md shows them); a name
loads its core module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.roles import serve

if TYPE_CHECKING:  # made from shardeval/api/roles.py by scripts/dev/api_roles_rewrite.py --blocks
    from shardeval.config import SolverConfig as SolverConfig
    from shardeval.run.solver import Solver as Solver, PairsSolver as PairsSolver
    from shardeval.run.solver import (
        SimpleSolver as SimpleSolver,
        LoglikelihoodSolver as LoglikelihoodSolver,
        ServiceHandle as ServiceHandle,
        Attempt as Attempt,
        combine_completions as combine_completions,
        check_logprobs as check_logprobs,
    )
    from shardeval.run.completion import Completion as Completion
else:  # type checkers read the imports above; at run time each name is imported on first use
    __getattr__, __dir__, __all__ = serve("solver")
