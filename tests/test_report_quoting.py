"""Text reports quote what users and servers wrote as text (issue 24, item 13; shardeval.results.quoting).

Benchmark names, categories, problem ids, served model names, shard directories and sweep model
names full of Markdown and layout (`|`, line breaks, backticks, a leading `#`, `<script>`, links,
emphasis) go through real `shardeval merge`, `compare` and `status` processes. Each Markdown output
is parsed by a real CommonMark + GFM-tables parser (markdown-it-py): every table row has its
header's number of cells, each hostile name is the text of a cell or heading, and nothing renders
as HTML, a link, a code span or emphasis. The text of `status` keeps one line per row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from markdown_it import MarkdownIt

from conftest import shardeval_cmd
from shardeval.results.quoting import md_text, plain_text
from shardeval.store.records import (
    BenchmarkManifest,
    Manifest,
    Provenance,
    ResultRecord,
    ServedModel,
    SweepPlan,
    TrajectoryRecord,
    encode_line,
    run_id,
    write_manifest,
)

HOSTILE = [
    "a|b",
    "two\nlines",
    "cr\rhere",
    "tick`s` | here",
    "#heading",
    "<script>alert(1)</script>",
    "x\r\n| forged | row |",
    "[link](http://evil.example)",
    "amp &lt; &amp; *star* ~~del~~",
    "back\\slash\\|pipe",
    "tail #",
]
BENCHES = ["bench|one", "bench\ntwo", "<script>b", "#b `c` *d*"]  # directory names too: no `/`
CATEGORIES = HOSTILE[:6]
SWEEP_MODELS = ["__init__", "base_", "m-1.2"]  # what sweep's name rule lets through, emphasis included
FINGERPRINTS = {"dataset_fingerprint": "sha256:data", "prompt_fingerprint": "sha256:prompt", "scorer_fingerprint": "sha256:scorer"}
N = 24


def write_shard(
    out: Path,
    idx: int,
    total: int,
    benches: list[str],
    *,
    host: str,
    python: str,
    weights: str,
    sweep: SweepPlan | None = None,
    config_hash: str = "sha256:quoting",
) -> None:
    """One complete shard of `benches` (N problems, 2 repeats), written with the project's own Structs."""
    lo, hi = idx * N // total, (idx + 1) * N // total
    out.mkdir(parents=True)
    served = {"svc|x\n<b>": ServedModel(model="m|odel", root=weights, max_model_len=4096)}
    write_manifest(
        str(out),
        Manifest(
            version="test",
            shard_idx=idx,
            total_shards=total,
            shard_source="test",
            config_hash=config_hash,
            state="complete",
            benchmarks=[
                BenchmarkManifest(name=b, range=(lo, hi), repeats=2, n_problems=N, service="svc|x\n<b>", **FINGERPRINTS) for b in benches
            ],
            served=served,
            sweep=sweep,
            started_at=1_700_000_000.0,
            provenance=Provenance(shardeval="test", python=python, platform="linux|`x`", host=host, plugins={"p|1": "v\n2"}),
        ),
    )
    for b in benches:
        (out / b).mkdir(parents=True)
        with open(out / b / "results.jsonl", "wb") as res, open(out / b / "trajectories.jsonl", "wb") as traj:
            for p in range(lo, hi):
                for r in range(2):
                    pid = HOSTILE[p % len(HOSTILE)] + f"-{p}"
                    res.write(
                        encode_line(
                            ResultRecord(
                                benchmark=b,
                                problem_idx=p,
                                problem_id=pid,
                                repeat=r,
                                seed=p * 10 + r,
                                status="ok",
                                score=float((p + r + idx) % 3 != 0),
                                response=f"#### {p}",
                                reference=str(p),
                                latency_s=0.5,
                                ttft_s=0.1,
                                started_at=1_700_000_000.0 + p,
                                completion_tokens=8,
                                shard=idx,
                                run=run_id(config_hash),
                                cluster=CATEGORIES[p % len(CATEGORIES)],
                            )
                        )
                    )
                    traj.write(
                        encode_line(
                            TrajectoryRecord(
                                benchmark=b,
                                problem_idx=p,
                                problem_id=pid,
                                repeat=r,
                                status="ok",
                                messages=[{"role": "user", "content": f"q{p}"}],
                            )
                        )
                    )


def write_run(root: Path, benches: list[str] = BENCHES, sweep: SweepPlan | None = None) -> Path:
    """Two shards whose hosts and Python differ (report.md lists both and flags the varying fact)."""
    for idx in range(2):
        write_shard(
            root / f"shard_{idx}|\n#{idx}",
            idx,
            2,
            benches,
            host=f"node{idx}|`h`\n# host",
            python=f"3.1{idx}|<i>\r\n",
            weights="<script>w</script>|/weights\n# root",
            sweep=sweep,
        )
    return root


# --- what a Markdown document renders as -------------------------------------------------------------

MD = MarkdownIt("commonmark").enable("table")


def inline_text(token: Any) -> str:
    """The text an inline token renders as; a link, code span, emphasis or HTML in it fails the test."""
    out = []
    for child in token.children or []:
        assert child.type in ("text", "strong_open", "strong_close", "softbreak"), (child.type, token.content)
        assert child.type != "softbreak", token.content
        out.append(child.content)
    return "".join(out)


def parse(markdown: str) -> tuple[list[list[list[str]]], list[str]]:
    """(tables as rows of cell texts, heading texts) of `markdown`, after checking every table row has
    its header's number of cells and the document holds no raw HTML."""
    tokens = MD.parse(markdown)
    assert not [t for t in tokens if t.type.startswith("html")], "raw HTML block"
    tables: list[list[list[str]]] = []
    headings: list[str] = []
    row: list[str] | None = None
    for i, t in enumerate(tokens):
        if t.type == "table_open":
            tables.append([])
        elif t.type == "tr_open":
            row = []
        elif t.type in ("th_open", "td_open"):
            assert row is not None
            row.append(inline_text(tokens[i + 1]))
        elif t.type == "tr_close":
            assert row is not None
            tables[-1].append(row)
        elif t.type == "heading_open":
            headings.append(inline_text(tokens[i + 1]))
        elif t.type == "inline":  # notes and bullets too: no HTML, no link; code only our own commands and paths
            for child in t.children or []:
                assert child.type not in ("html_inline", "link_open", "em_open", "s_open"), (child.type, t.content)
                assert child.type != "code_inline" or child.content.startswith(("shardeval ", "<model>/")), t.content
    for table in tables:
        assert all(len(r) == len(table[0]) for r in table), [len(r) for r in table]
    return tables, headings


def cells(tables: list[list[list[str]]]) -> set[str]:
    return {cell for table in tables for r in table for cell in r}


def shown(name: str) -> str:
    """How a name reads in a report: itself, with line breaks and other controls as symbols."""
    return plain_text(name)


# --- the reports ----------------------------------------------------------------------------------------


def test_report_md_tables_keep_their_columns_and_quote_every_name(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run|`r`\n# root")
    with open(run / "shard_1|\n#1" / "<script>b" / "results.jsonl", "ab") as torn:  # a skipped line names its file
        torn.write(b'{"benchmark": "<b>\\n# x|y", \n')
    done = shardeval_cmd("merge", str(run), "-o", str(tmp_path / "merged"))
    assert done.returncode == 0, done.stderr
    md = (tmp_path / "merged" / "report.md").read_text()
    tables, headings = parse(md)
    assert headings[0] == f"shardeval merge: {shown(run)}"
    assert {shown(b) for b in BENCHES} <= set(headings)  # each benchmark's section, named as it is
    assert len(headings) == 1 + len(BENCHES) + 1  # the title, the benchmarks, Provenance: nothing injected
    text = cells(tables)
    assert {shown(c) for c in CATEGORIES} <= text  # the per-category tables
    assert shown("<script>w</script>|/weights\n# root") in text  # the served weights, a server's words
    assert shown("node0|`h`\n# host") + ", " + shown("node1|`h`\n# host") in text  # the per-node fact
    varies = [c for c in text if c.startswith("varies")]
    assert any(shown("3.10|<i>\r\n") in c and shown("shard_0|\n#0") in c for c in varies), varies  # a fact that varies
    assert shown("svc|x\n<b>") in " ".join(text)
    assert "<script>" not in md.replace("\\<script\\>", "") and "\n# host" not in md
    assert "unreadable line" in md


def test_sweep_md_tables_keep_their_columns(tmp_path: Path) -> None:
    root = tmp_path / "sweep"
    plan = SweepPlan(services=SWEEP_MODELS, baseline=SWEEP_MODELS[0], shards=2)
    (root).mkdir()
    (root / "sweep_plan.json").write_bytes(msgspec.json.encode(plan))
    for model in SWEEP_MODELS:
        for idx in range(2):
            write_shard(
                root / model / f"shard_{idx}",
                idx,
                2,
                BENCHES,
                host="h",
                python="3",
                weights="w",
                sweep=SweepPlan(services=SWEEP_MODELS, baseline=SWEEP_MODELS[0], shards=2, service=model),
            )
    done = shardeval_cmd("merge", str(root), "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    md = (tmp_path / "out" / "sweep.md").read_text()
    tables, headings = parse(md)
    grid = tables[0]
    assert grid[0] == ["model", *map(shown, BENCHES)]
    assert [r[0] for r in grid[1:]] == [f"{SWEEP_MODELS[0]} (baseline)", *SWEEP_MODELS[1:]]  # `__init__` is not bold
    assert all(len(table[0]) == len(r) for table in tables for r in table)
    vs = tables[-1]
    assert vs[0][:3] == ["model", "benchmark", "metric"] and len(vs) == 1 + (len(SWEEP_MODELS) - 1) * len(BENCHES)
    assert {r[1] for r in vs[1:]} == {shown(b) for b in BENCHES} and {r[0] for r in vs[1:]} == set(SWEEP_MODELS[1:])
    assert headings[0] == f"shardeval sweep: {shown(root)}"


def test_compare_markdown_headings_quote_runs_and_benchmarks(tmp_path: Path) -> None:
    a, b = write_run(tmp_path / "A|`a`\n# a"), write_run(tmp_path / "B <b>x</b>")
    done = shardeval_cmd("compare", str(a), str(b))
    assert done.returncode == 0, done.stderr
    _, headings = parse(done.stdout)
    assert headings == [
        f"shardeval compare: B = {shown(b)} vs A = {shown(a)}",
        *sorted(map(shown, BENCHES), key=lambda h: [shown(x) for x in BENCHES].index(h)),
    ]


def test_status_text_keeps_one_line_per_row(tmp_path: Path) -> None:
    """A shard directory named with a line break (and a fake row after it) stays on its row."""
    run = write_run(tmp_path / "run")
    done = shardeval_cmd("status", str(run))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = [line for line in lines if line[:1].isdigit()]
    assert len(rows) == 2 and all(shown(f"shard_{i}|\n#{i}") in rows[i] for i in range(2)), lines
    assert not any(line.startswith("#") for line in lines)


@pytest.mark.parametrize("name", HOSTILE + ["plain", "gsm8k_cot", "_x_", "é\u2028\x85\x7f\t"])
def test_md_text_renders_as_the_text_itself(name: str) -> None:
    """The one escaping function: in a table cell and in a heading, a name renders as exactly its own
    text (controls as symbols), in one cell, with no markup."""
    tables, headings = parse(f"# {md_text(name)}\n\n| name | x |\n|---|---|\n| {md_text(name)} | 1 |\n")
    assert headings == [shown(name)]
    assert tables == [[["name", "x"], [shown(name), "1"]]]
    assert "\n" not in md_text(name) and "\r" not in md_text(name)
