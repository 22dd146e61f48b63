"""Keep code and docs on the SDK's role lists (core/shardeval/api/roles.py), rerunnable after a merge.

    python scripts/dev/api_roles_rewrite.py PATH...           # rewrite `from shardeval.api import a, b`
    python scripts/dev/api_roles_rewrite.py --internal PATH... # the same; unpublished names from their
                                                               # core module (tests may, plugins may not)
    python scripts/dev/api_roles_rewrite.py --blocks           # each role module's TYPE_CHECKING imports
    python scripts/dev/api_roles_rewrite.py --docs             # docs/plugins.md's SDK table

PATH: Python files, folders (searched for *.py) or Markdown pages (their ```python blocks). An
import of the flat form becomes one import per role module (names in their order, `as` kept, the
statement's indentation and trailing comment kept); `hookimpl` goes to shardeval.api.plugin. A
name no role publishes is left in the flat form (and named on stderr) unless --internal.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "core")]

from shardeval.api import roles  # noqa: E402  (imports nothing but the lists)

WIDTH = 140  # pyproject's [tool.ruff] line-length: beyond it, the import is written as ruff format writes it
FLAT = "shardeval.api"


def home_of(name: str, internal: bool) -> str | None:
    """The module a name is imported from: its role module, its core module (--internal), or None."""
    if name in roles.HOME:
        return f"{FLAT}.{roles.HOME[name]}"
    return roles.RETIRED.get(name) if internal else None


def import_line(indent: str, module: str, names: list[str], comment: str = "") -> str:
    """`from module import a, b` at `indent`; beyond WIDTH, one name a line in parentheses, as
    `ruff format` writes it (so the formatter leaves what this writes alone)."""
    head = f"{indent}from {module} import "
    line = head + ", ".join(names) + comment
    if len(line) <= WIDTH:
        return line + "\n"
    body = "".join(f"{indent}    {name},\n" for name in names)
    return f"{head}(\n{body}{indent}){comment}\n"


def rewrite_source(source: str, where: str, internal: bool = False) -> str:
    """`source` with every flat-form import split by role; the rest untouched."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.module == FLAT and node.level == 0):
            continue
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        indent, tail = lines[first][: node.col_offset], lines[last][node.end_col_offset or 0 :].rstrip("\n")
        if indent.strip() or (tail.strip() and not tail.lstrip().startswith("#")):
            print(f"{where}:{node.lineno}: left as it is (not alone on its lines)", file=sys.stderr)
            continue
        comment = "  " + tail.strip() if tail.strip() else ""
        by_module: dict[str | None, list[str]] = {}
        for alias in node.names:
            module = home_of(alias.name, internal)
            if module is None:
                print(f"{where}:{node.lineno}: {alias.name} is not published by any role: left in {FLAT}", file=sys.stderr)
            by_module.setdefault(module, []).append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
        order = sorted(m for m in by_module if m is not None) + ([None] if None in by_module else [])
        every = comment.lstrip().startswith(("# noqa", "# type:"))  # a marker each line needs, not a remark
        text = "".join(
            import_line(indent, module or FLAT, by_module[module], comment if i == 0 or every else "") for i, module in enumerate(order)
        )
        edits.append((first, last, text))
    for first, last, text in sorted(edits, reverse=True):
        lines[first : last + 1] = [text]
    return "".join(lines)


PYTHON_BLOCK = re.compile(r"(```python\n)(.*?)(```)", re.DOTALL)


def rewrite_file(path: Path, internal: bool) -> bool:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        new = PYTHON_BLOCK.sub(lambda m: m.group(1) + rewrite_source(m.group(2), str(path), internal) + m.group(3), text)
    else:
        new = rewrite_source(text, str(path), internal)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def python_files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for given in map(Path, paths):
        if given.is_dir():
            out += sorted(p for p in given.rglob("*.py") if "__pycache__" not in p.parts and "vendor" not in p.parts)
        else:
            out.append(given)
    return out


# --blocks: each role module's `if TYPE_CHECKING:` imports, made from its list (a test checks them)
BLOCK = re.compile(
    r"(if TYPE_CHECKING:  # made from shardeval/api/roles.py by scripts/dev/api_roles_rewrite.py --blocks\n)"
    r"((?:    .*\n|\n(?=    ))*)"
)


def type_block(role: str) -> str:
    """The imports that tell a type checker what the role module serves (`X as X`: re-exported)."""
    out = []
    for group in roles.GROUPS[role]:
        out.append(import_line("    ", group.module, [f"{n} as {n}" for n in group.names]))
    return "".join(out)


def write_blocks() -> list[Path]:
    changed = []
    for role in roles.GROUPS:
        path = ROOT / "core" / "shardeval" / "api" / f"{role}.py"
        text = path.read_text(encoding="utf-8")
        match = BLOCK.search(text)
        if match is None:
            raise SystemExit(f"{path}: no `if TYPE_CHECKING:` block marked as made by this script")
        new = text[: match.start(2)] + type_block(role) + text[match.end(2) :]
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


# --docs: docs/plugins.md's SDK table, between its two markers
DOCS = ROOT / "docs" / "plugins.md"
TABLE_START, TABLE_END = (
    "<!-- sdk table: made from shardeval/api/roles.py by scripts/dev/api_roles_rewrite.py --docs -->",
    "<!-- sdk table end -->",
)


def docs_table() -> str:
    """One table per role: its module, then a row per group (its names, what for)."""
    out = []
    for role, groups in roles.GROUPS.items():
        out += [f"**`shardeval.api.{role}`** ({len(roles.ROLES[role])} names)", "", "| names | what for |", "|---|---|"]
        out += ["| " + ", ".join(f"`{n}`" for n in g.names) + " | " + g.doc.replace("|", "\\|") + " |" for g in groups]
        out.append("")
    return "\n".join(out)


def write_docs() -> bool:
    text = DOCS.read_text(encoding="utf-8")
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    new = text[:start] + "\n\n" + docs_table() + "\n" + text[end:]
    if new != text:
        DOCS.write_text(new, encoding="utf-8")
    return new != text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--internal", action="store_true", help="unpublished names from their core module (tests only)")
    parser.add_argument("--blocks", action="store_true", help="rewrite the role modules' TYPE_CHECKING imports")
    parser.add_argument("--docs", action="store_true", help="rewrite docs/plugins.md's SDK table")
    args = parser.parse_args()
    if args.blocks:
        for path in write_blocks():
            print(f"rewrote {path.relative_to(ROOT)}")
    if args.docs and write_docs():
        print(f"rewrote {DOCS.relative_to(ROOT)}")
    files = python_files([p for p in args.paths if not p.endswith(".md")]) + [Path(p) for p in args.paths if p.endswith(".md")]
    for path in files:
        if rewrite_file(path, args.internal):
            print(f"rewrote {path}")


if __name__ == "__main__":
    main()
