"""A run's verdict in its own report: merged/gate.json, as `shardeval gate BASE CAND` wrote it.

The gate decides on the candidate's answers; a report shows its verdict only while those answers
are the ones the report is made of. `scores_digest` is the fingerprint of a run's deduplicated
answers (each benchmark's scores and statuses per cell, and whether errors count as wrong): the
gate records it as `candidate_scores`, and the merge compares it with its own. A gate.json written
for other answers (the run resumed or rescored since, or another run's) is named as out of date,
never shown as this run's verdict (docs/decisions.md).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from typing import Any

import msgspec

from shardeval.results.metrics import ScoreTable
from shardeval.results.quoting import md_text
from shardeval.store.regular import read_regular

GATE_FILE = "gate.json"
RUN_GATE_KIND = "shardeval-gate"  # a candidate run's gate.json (a sweep's is "shardeval-gate-sweep", in the sweep's merged/)
MAX_GATE_BYTES = 64 << 20


def scores_digest(tables: Iterable[ScoreTable], errors_as_wrong: bool) -> str:
    """The fingerprint of a run's answers as a merge scores them: one per set of (benchmark,
    problem, repeat) scores and statuses, whatever the merge's interval options."""
    h = hashlib.sha256(b"shardeval-scores-1\x00errors_as_wrong=%d\x00" % errors_as_wrong)
    for table in sorted(tables, key=lambda t: t.benchmark):
        h.update(f"{table.benchmark}\x00{table.n_problems}\x00{table.repeats}\x00".encode())
        h.update(table.score.tobytes())
        h.update(bytes(table.status))
    return h.hexdigest()


def merged_gate(out_dir: str, tables: Iterable[ScoreTable], errors_as_wrong: bool) -> dict[str, Any] | None:
    """<out_dir>/gate.json when it is a run's gate: as written, with `"current": True` when it was
    decided on exactly these answers, else `"current": False`. None when there is none (or one that
    cannot be read: the gate is the gate command's file, and the merge never fails for it)."""
    path = os.path.join(out_dir, GATE_FILE)
    if not os.path.isfile(path):
        return None
    try:
        doc = msgspec.json.decode(read_regular(path, MAX_GATE_BYTES))
    except (OSError, msgspec.DecodeError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("kind") != RUN_GATE_KIND:
        return None
    return {**doc, "current": doc.get("candidate_scores") == scores_digest(tables, errors_as_wrong)}


def gate_report_lines(gate: dict[str, Any]) -> list[str]:
    """report.md's section: the verdict against the baseline and each benchmark's, or why the
    gate.json beside it is not this run's verdict any more."""
    base = md_text(str(gate.get("base", "?")))
    lines = ["", f"## Gate against {base} (merged/gate.json; docs/decisions.md)", ""]
    if not gate["current"]:
        return lines + [
            f"- merged/gate.json was decided on other answers than these (the run changed since, or it is "
            f"another run's): its verdict {md_text(str(gate.get('verdict')))} is not this run's; run "
            f"`shardeval gate {base} <this run> --margin {gate.get('margin')}` again"
        ]
    lines += [
        f"**{md_text(str(gate.get('verdict')))}** at margin {gate.get('margin')}, α {gate.get('alpha')} (one-sided).",
        "",
        "| benchmark | verdict | difference | one-sided bounds | problems | would settle it |",
        "|---|---|---|---|---|---|",
    ]
    for row in gate.get("benchmarks", []):
        needed = (row.get("plan") or {}).get("problems")
        lines.append(
            f"| {md_text(str(row.get('benchmark')))} | {md_text(str(row.get('verdict')))} | {_num(row.get('diff'))} | "
            f"[{_num(row.get('lower'))}, {_num(row.get('upper'))}] | {row.get('n_problems', '—')} | "
            f"{f'about {needed} problems' if needed else '—'} |"
        )
    lines += [f"- {md_text(str(x.get('benchmark')))} not compared: {md_text(str(x.get('why')))}" for x in gate.get("not_compared", [])]
    return lines


def _num(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, float) else "—" if value is None else str(value)
