"""msgspec, or its stdlib stand-in on nodes where the compiled msgspec cannot load.

The one-file app carries msgspec's compiled extension for the platforms it was built for; on a
node with another CPU architecture or an older glibc, importing it raises ImportError. Rather
than fail the shard, this module installs `shardeval_shims.msgspec_fallback` as `msgspec` (so
third-party plugins that `import msgspec` get it too) and says so once on stderr. The fallback
writes byte-identical JSON and raises the same validation messages, only slower.

Use `from shardeval.msgspec_compat import msgspec` instead of `import msgspec`; import it only
where msgspec is needed, so `shardeval --help` stays free of it.
"""

from __future__ import annotations

import sys
from types import ModuleType

NOTICE = "shardeval: notice: msgspec cannot load here ({reason}); using the stdlib fallback (same output, slower)"


def _install_fallback(reason: str) -> ModuleType:
    from shardeval_shims import msgspec_fallback

    sys.modules["msgspec"] = msgspec_fallback
    sys.modules["msgspec.json"] = msgspec_fallback.json
    sys.modules["msgspec.structs"] = msgspec_fallback.structs
    print(NOTICE.format(reason=reason), file=sys.stderr, flush=True)
    return msgspec_fallback


def _load() -> ModuleType:
    try:
        import msgspec
    except ImportError as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        return _install_fallback(reason)
    return msgspec


msgspec = _load()
USING_FALLBACK: bool = getattr(msgspec, "FALLBACK", False)

__all__ = ["USING_FALLBACK", "msgspec"]
