"""What the page tests share.

shardeval without the charts' JavaScript, as a source tree that never ran the fetch
(plugins/shardeval_pages/vendor.py): a copy of the pages plugin without its vendor/ folder, first
on a child's PYTHONPATH. No knob in the code: the child imports a package that lacks the files.

What sweep.html must show of a sweep.json: its charts and its numbers by key."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import shardeval_pages

# What the one line names: the command that fetches the files.
FETCH_HINT = "vendor.py fetch"


def without_javascript(tmp: Path) -> dict[str, str]:
    """Environment for a child process whose pages plugin has no vendor/ files."""
    source = Path(shardeval_pages.__file__).resolve().parent
    folder = tmp / "no-javascript"
    shutil.copytree(source, folder / source.name, ignore=shutil.ignore_patterns("vendor", "__pycache__"), dirs_exist_ok=True)
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


def pass1_is_accuracy(doc: dict, metric: str) -> bool:
    """pass@1 whose every cell is its accuracy cell again: the page shows it once, as accuracy."""
    if metric != "pass@1":
        return False
    accuracy = {(c["service"], c["benchmark"]): c for c in doc["cells"] if c["metric"] == "accuracy"}
    return all(
        all(c[f] == accuracy[c["service"], c["benchmark"]][f] for f in ("value", "ci_low", "ci_high"))
        for c in doc["cells"]
        if c["metric"] == "pass@1"
    )


def sweep_charts(doc: dict) -> int:
    """The charts sweep.html draws: per benchmark, one of every model for each metric with a
    value (pass@1 that is accuracy again shown once), and one of the differences."""
    once = {m: pass1_is_accuracy(doc, m) for m in {c["metric"] for c in doc["cells"]}}
    shown = {(c["metric"], c["benchmark"]) for c in doc["cells"] if not once[c["metric"]] and c["value"] is not None}
    return len(shown) + len({r["benchmark"] for r in doc["vs_baseline"] if r["diff"] is not None})


def sweep_numbers(doc: dict) -> dict[str, object]:
    """Every number sweep.html's tables show, by the key of its cell (data-key)."""
    metrics = [m for m in dict.fromkeys(c["metric"] for c in doc["cells"]) if not pass1_is_accuracy(doc, m)]
    expected = {
        f"{c['metric']}/{c['service']}/{c['benchmark']}/{f}": c[f]
        for c in doc["cells"]
        if c["metric"] in metrics
        for f in ("value", "ci_low", "ci_high", "n_ok")
    }
    return expected | {
        f"vs/{r['service']}/{r['benchmark']}/{f}": r[f]
        for r in doc["vs_baseline"]
        for f in ("diff", "ci_low", "ci_high", "p_value", "p_holm", "n")
    }


def page_datasets(html: str) -> dict[str, list[dict]]:
    """The datasets a saved page's charts and tables read (page.Page.dataset), as records."""
    data = json.loads(html.split('<script type="application/json" id="page-data">', 1)[1].split("</script>", 1)[0])
    return {name: [dict(zip(d["fields"], row)) for row in d["rows"]] for name, d in data["datasets"].items()}
