"""shardeval.api.plugin: what every plugin needs, whatever its role: the hook mark, registration,
one-line errors, constrained numbers for config, secrets kept out of text. The names and what each
is for are listed once in shardeval/api/roles.py (docs/plugins.md shows them); a name loads its core
module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardeval.api.roles import serve

if TYPE_CHECKING:  # made from shardeval/api/roles.py by scripts/dev/api_roles_rewrite.py --blocks
    from shardeval.hookspecs import hookimpl as hookimpl
    from shardeval.plugins.register import Register as Register, Lazy as Lazy
    from shardeval.plugins import registry as registry
    from shardeval.errors import (
        UsageError as UsageError,
        ShardError as ShardError,
        os_error as os_error,
        library_call as library_call,
        network_failure as network_failure,
    )
    from shardeval.config import (
        Count as Count,
        NonNegativeInt as NonNegativeInt,
        NonNegativeFloat as NonNegativeFloat,
        Seconds as Seconds,
        NonNegativeSeconds as NonNegativeSeconds,
        Probability as Probability,
    )
    from shardeval.config.reading import read_yaml as read_yaml, parse_key_values as parse_key_values
    from shardeval.redact import is_secret as is_secret, redact_urls as redact_urls
else:  # type checkers read the imports above; at run time each name is imported on first use
    __getattr__, __dir__, __all__ = serve("plugin")
