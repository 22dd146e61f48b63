"""What can be a secret, and how it is kept out of what shardeval writes (docs/guarantees.md, H11).

- The API key (`api_key_env`) is a secret only when it is at least MIN_SECRET_CHARS long. A
  shorter value (`4`, `EMPTY`, `none`: what a local server that checks no key is given) guards
  nothing, and replacing it wherever it occurs would rewrite answers (a key `4` turned every 4 of
  every answer into `***`). A secret key is replaced by `***` wherever a server echoes it, answers
  included: a key of 8+ characters in an answer is an echo, not an answer, and the shard says so.
- Credentials in a URL (`https://user:pass@host`, `https://token@host`) are replaced by `***` in
  every log line, error line, record error and manifest, and a file generated for a cluster that
  would hold them is refused (the config may give them as `${VAR}`s, which expand on the node).
- Query parameters whose names say they are secrets (`?api_key=`, `&token=`, `sig=`, …, and
  `code=`, Azure Functions' key, and `pwd=`) are replaced likewise: such URLs (signed URLs, keys
  in the query) are credentials too.
"""

from __future__ import annotations

import logging
import re
from typing import Any

MIN_SECRET_CHARS = 8

# scheme://USERINFO@ : userinfo is everything up to the first @ before the host (no / ? # or space)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/?#@\s\"'<>]+)@")
# names that say secret anywhere in them, or exactly `code` (Azure Functions' key) or `pwd`
_QUERY = re.compile(r"(?i)([?&;](?:[a-z0-9_.-]*(?:key|token|secret|passw|sig|auth|credential)[a-z0-9_.-]*|code|pwd)=)"
                    r"([^&#\s\"'<>]+)")
_ONLY_VARIABLES = re.compile(r"(?:\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}|:)+")


def is_secret(value: str | None) -> bool:
    """Whether a key is long enough to be treated as a secret (see the module doc)."""
    return bool(value) and len(value.strip()) >= MIN_SECRET_CHARS  # type: ignore[union-attr]


def redact_urls(text: str) -> str:
    """`text` with URL credentials and secret query values replaced by `***`."""
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: m.group(1) + ("***@" if not _ONLY_VARIABLES.fullmatch(m.group(2)) else m.group(2) + "@"), text)
    return _QUERY.sub(lambda m: m.group(1) + ("***" if m.group(2) != "***" else m.group(2)), text)


def redact_in(value: Any) -> Any:
    """`redact_urls` applied to every string of plain data (a config as written to a manifest)."""
    if isinstance(value, str):
        return redact_urls(value)
    if isinstance(value, list):
        return [redact_in(v) for v in value]
    if isinstance(value, dict):
        return {k: redact_in(v) for k, v in value.items()}
    return value


def url_credentials(text: str) -> str | None:
    """The first URL in `text` that holds credentials, shown redacted; None when there is none.
    Userinfo made only of ${VAR}s is no credential: it expands where the file is used."""
    for m in _USERINFO.finditer(text):
        if not _ONLY_VARIABLES.fullmatch(m.group(2)):
            return redact_urls(text[m.start():].split()[0])
    m = _QUERY.search(text)
    if m and not _ONLY_VARIABLES.fullmatch(m.group(2)):
        return redact_urls(text[max(0, text.rfind(" ", 0, m.start()) + 1):].split()[0])
    return None


class RedactingFilter(logging.Filter):
    """A handler filter: the formatted message of every record with URL credentials redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_urls(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True
