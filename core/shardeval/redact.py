"""What can be a secret, and how it is kept out of what shardeval writes (docs/guarantees.md, H11).

- The API key (`api_key_env`) is a secret only when it is at least MIN_SECRET_CHARS long. A
  shorter value (`4`, `EMPTY`, `none`: what a local server that checks no key is given) guards
  nothing, and replacing it wherever it occurs would rewrite answers (a key `4` turned every 4 of
  every answer into `***`). A secret key is replaced by `***` wherever a server echoes it, answers
  included: a key of 8+ characters in an answer is an echo, not an answer, and the shard says so.
- Credentials in a URL (`https://user:pass@host`, `https://token@host`) are replaced by `***` in
  every log line, error line, record error and manifest, and a file generated for a cluster that
  would hold them is refused (the config may give them as `${VAR}`s, which expand on the node).
- In a URL, every query value and the fragment are secrets by their shape, not by a list of names
  (`#access_token=`, `?jwt=`, `?pass=`, `?bearer=`, `?session=` slipped past such a list): each is
  replaced by `***` but for the names known to be harmless (HARMLESS_PARAMS, each with its reason);
  a fragment with no `=` is kept only when it is a page's route (`#/experiments/3`) or a short
  anchor. Outside a URL (a path and query in a server's message), query values whose names say
  they are secrets (`?api_key=`, `&token=`, `sig=`, …, `code=`, `pwd=`) are replaced likewise.
"""

from __future__ import annotations

import logging
import re
from typing import Any

MIN_SECRET_CHARS = 8

# scheme://USERINFO@ : userinfo is everything up to the first @ before the host (no / ? # or space)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/?#@\s\"'<>]+)@")
# names that say secret anywhere in them, or exactly `code` (Azure Functions' key) or `pwd`
_QUERY = re.compile(
    r"(?i)([?&;](?:[a-z0-9_.-]*(?:key|token|secret|passw|sig|auth|credential)[a-z0-9_.-]*|code|pwd)=)"
    r"([^&#\s\"'<>]+)"
)
_ONLY_VARIABLES = re.compile(r"(?:\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}|:)+")
# a URL as it is echoed in text: up to whitespace, a quote or an angle bracket, less the punctuation
# of the sentence around it ("(see https://h/?a=b).")
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+?(?=[.,;:!?)]*(?:[\s\"'<>]|$))")
# Query names whose values say nothing secret, kept so that a URL stays recognisable: paging and
# sorting (page, per_page, limit, offset, sort, order), a representation (format, alt, raw, dl,
# download, view, tab, lang, locale), a version or revision of a public thing (api-version: Azure
# OpenAI's required API date; v, version, rev, revision, ref, branch), a model's or deployment's
# name (model, deployment), and MLflow's and W&B's page ids (experiment_id, run_id, project).
HARMLESS_PARAMS = frozenset(
    {
        "page",
        "per_page",
        "page_size",
        "limit",
        "offset",
        "sort",
        "order",
        "format",
        "alt",
        "raw",
        "dl",
        "download",
        "view",
        "tab",
        "lang",
        "locale",
        "api-version",
        "v",
        "version",
        "rev",
        "revision",
        "ref",
        "branch",
        "model",
        "deployment",
        "experiment_id",
        "run_id",
        "project",
    }
)
_ANCHOR = re.compile(r"[A-Za-z0-9_-]{1,24}")


def is_secret(value: str | None) -> bool:
    """Whether a key is long enough to be treated as a secret (see the module doc)."""
    return bool(value) and len(value.strip()) >= MIN_SECRET_CHARS  # type: ignore[union-attr]


def redact_urls(text: str) -> str:
    """`text` with URL credentials, query values and fragments (see the module doc) replaced by `***`."""
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: m.group(1) + ("***@" if not _ONLY_VARIABLES.fullmatch(m.group(2)) else m.group(2) + "@"), text)
    if "://" in text:
        text = _URL.sub(lambda m: _redact_url(m.group(0)), text)
    return _QUERY.sub(lambda m: m.group(1) + (m.group(2) if m.group(2) == "***" or _ONLY_VARIABLES.fullmatch(m.group(2)) else "***"), text)


def _redact_url(url: str) -> str:
    """One URL with its query values and fragment redacted (its userinfo already is)."""
    head, hash_, fragment = url.partition("#")
    base, question, query = head.partition("?")
    if question:
        base += "?" + _redact_pairs(query)
    if hash_:
        if "=" in fragment:
            fragment = _redact_pairs(fragment)
        elif fragment and not (fragment.startswith("/") or _ANCHOR.fullmatch(fragment)):
            fragment = "***"
        base += "#" + fragment
    return base


def _redact_pairs(query: str) -> str:
    """`a=1&b=2` with the value of every name not in HARMLESS_PARAMS replaced (a part with no `=`
    is a value); ${VAR}s, which expand on the node, are kept."""
    parts = []
    for part in re.split(r"([&;])", query):
        if part in ("&", ";", ""):
            parts.append(part)
            continue
        name, eq, value = part.partition("=")
        if not eq:
            name, value = "", name
        secret = value and value != "***" and name.lower() not in HARMLESS_PARAMS and not _ONLY_VARIABLES.fullmatch(value)
        parts.append(f"{name}{eq}***" if secret else part)
    return "".join(parts)


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
            return redact_urls(text[m.start() :].split()[0])
    for m in _URL.finditer(text):
        if (shown := _redact_url(m.group(0))) != m.group(0):
            return shown
    query = _QUERY.search(text)
    if query and not _ONLY_VARIABLES.fullmatch(query.group(2)):
        return redact_urls(text[max(0, text.rfind(" ", 0, query.start()) + 1) :].split()[0])
    return None


class RedactingFilter(logging.Filter):
    """A handler filter: the formatted message of every record with URL credentials redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_urls(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True
