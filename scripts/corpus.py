"""The refactor guard of issue 25: a corpus of everything shardeval writes, to diff before and after.

Issue 25 moves core modules into sub-packages with "behaviour unchanged; every output
byte-identical". This script is how that is judged: it drives one tree through the CLI only
(`python -m shardeval ...` subprocesses, so it works on either layout) and collects what the
commands print and write, with only the run-to-run noise masked (timings, ports, pids, dates) and
the inlined Vega bundle of the HTML pages (the one difference the issue allows: where it comes from).

    PYTHONPATH=TREE/core:TREE/plugins:TREE/shims python scripts/corpus.py OUT_DIR [--root TREE]
    python scripts/corpus.py --diff BEFORE AFTER     # file lists, first differing places; exit 1 on any difference

It uses `sys.executable` and the PYTHONPATH it was started with, works in a fixed scratch folder
(WORK, wiped first, so absolute paths in outputs are the same for both trees), and copies the
examples of --root (default: this script's tree) and ../shared/examples there. What it produces:
a local 2-shard run and its merge, a sweep and its sweep merge, a judged run, rescores (plain,
a judge again, a judge in another mode) and their merges, an MMLU-shaped run with some errors
(exit 3), compare (text, JSON, HTML), dry runs of every example config, export (CSV, JSONL),
status, and the CLI's help and listings.
OUT_DIR/cmd/ holds one file per command (argv, exit code, stdout, stderr); OUT_DIR/runs/,
dry/ and out/ the files the commands wrote; EXIT_CODES.txt every command's exit code. Stdlib only.

What is normalized, and why, is listed below (NORMALIZE and the few structural rules after it).
It was found by running the corpus twice on one tree and diffing; two runs of one tree must give
`--diff` exit 0. To look for new noise: CORPUS_RAW=1 writes a corpus with nothing normalized.
"""

from __future__ import annotations

import csv
import difflib
import io
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

WORK = Path("/tmp/shardeval-corpus-work")
TIMEOUT_S = 300

# --- what legitimately differs between two runs of the same tree, and its placeholder -------------
# Each entry: (regex, replacement, why). They are applied, in order, to every text file of the
# corpus (command outputs and written files alike). Found by running the corpus twice on one tree
# and diffing; nothing here may hide a difference in content (scores, answers, counts, paths).

NUM = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
TIMING_KEYS = (  # JSON keys whose values are wall-clock readings or measured durations
    "ttft_s",
    "latency_s",
    "started_at",
    "finished_at",
    "updated_at",
    "ended_at",
    "pid_start",
    "wall_span_s",
    "completion_tokens_per_s",
    "requests_per_s",
    "seconds",
)
NORMALIZE: list[tuple[str, str, str]] = [
    # timings in JSON (records, manifests, timing.json, heartbeat, chart data in the HTML pages):
    # wall-clock times and measured latencies differ on every run
    (r'"(%s)":\s?%s' % ("|".join(TIMING_KEYS), NUM), r'"\1": <T>', "measured time"),
    # timing.json's latency and TTFT percentiles (keys nested under ttft_s / latency_s)
    (
        r'("(?:ttft_s|latency_s)":\s?\{\s*"p50":\s?)%s(,\s*"p90":\s?)%s(,\s*"p99":\s?)%s' % (NUM, NUM, NUM),
        r"\1<T>\2<T>\3<T>",
        "measured time",
    ),
    # the same percentiles as report.html's table cells (data-value and the text shown)
    (r'(data-key="[^"]*/(?:ttft|latency)[^"]*" data-value=")[^"]*(">)[^<]*', r"\1<T>\2<T>", "measured time"),
    # the time a rescore ran (a manifest's rescored.at), a Unix time
    (r'"at":\s?1\d{9}\.\d+', r'"at": <T>', "wall-clock time"),
    # a rescored manifest records the size and sha256 of each source results.jsonl, whose bytes hold
    # the source run's measured times (and its lines in finishing order)
    (r'("bytes":\s?)\d+(,\s*"sha256":\s?)"sha256:[0-9a-f]+"', r'\1<N>\2"<SHA>"', "hash of a file holding timings"),
    # process ids, the boot id and pid namespace of the liveness files: this process's, this boot's
    (r'"(pid|boot_id|pid_ns)":\s?("[^"]*"|\d+)', r'"\1": <PID>', "process identity"),
    # ports: every managed simulator listens on a free port (port 0), in URLs, logs and error texts
    (r"(127\.0\.0\.1:)\d+", r"\1<PORT>", "a free port picked per run"),
    # log timestamps (shard.log, service logs) and ISO dates
    (r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d+)?(?:[+-]\d{4}|Z)?", "<DATE>", "wall-clock date"),
    # durations and rates in text: progress and summary lines, report.md's latency line, launcher lines
    (r"(latency p50 )%s s p95 %s s; %s req/s" % (NUM, NUM, NUM), r"\1<T> s p95 <T> s; <T> req/s", "measured time"),
    (
        r"(latency p50/p90/p99: )%s/%s/%s s; TTFT p50/p90/p99: %s/%s/%s s" % ((NUM,) * 6),
        r"\1<T>/<T>/<T> s; TTFT p50/p90/p99: <T>/<T>/<T> s",
        "measured time",
    ),
    (r"%s( completion tokens/s over )%s s" % (NUM, NUM), r"<T>\1<T> s", "measured time"),
    # rescore's summary line: how long it took and its rate
    (r"; %s s, %s records/s" % (NUM, NUM), r"; <T> s, <T> records/s", "measured time"),
    # a judged rescore's line per benchmark: how long the judging took
    (r"(\+\d+ error\(s\); )%s s" % NUM, r"\1<T> s", "measured time"),
    # `shardeval status`: a shard's req/s column (records over the time it ran), right-aligned, so
    # the padding before it goes too
    (r"(\d+/\d+ +\d+) +\d+\.\d+\b", r"\1 <T>", "measured time"),
    (r"(exit \d+ after )%s s" % NUM, r"\1<T> s", "measured time"),
    (r"(ran in )%s s(, \d+ at a time: busy )%s s, \d+%%( of the slots' time)" % (NUM, NUM), r"\1<T> s\2<T> s, <T>%\3", "measured time"),
]
NORMALIZE_RE = [(re.compile(pattern), replacement) for pattern, replacement, _ in NORMALIZE]

# Lines that concurrent shards (cells of a sweep) print through the local launcher arrive
# interleaved in whatever order the processes ran: each line is prefixed `[label] `. They are
# regrouped by label (stable, so each shard's own order is kept); nothing is dropped.
CELL_LINE = re.compile(r"^\[([^\]\n]+)\] ")

# A shard's results.jsonl and trajectories.jsonl get their lines in the order the requests finished
# (up to max_concurrent in flight): the same lines, in another order on every run. Those files are
# compared with their lines sorted; merged/ files are compared as written (merge sorts them itself).
SHARD_JSONL = re.compile(r"(^|/)shard_\d+/.+/(results|trajectories)\.jsonl$")

# CSV exports: the columns holding measured time are masked (a regex cannot address a column).
CSV_TIMING_COLUMNS = {"ttft_s", "latency_s", "started_at"}

# The HTML pages inline Vega + Vega-Lite + vega-embed as one <script>: the refactor may change
# where that bundle comes from (the one difference issue 25 allows), so its contents are replaced.
SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)
BUNDLE_MIN_CHARS = 100_000


def _bundle(m: re.Match[str]) -> str:
    body = m.group(1)
    if len(body) >= BUNDLE_MIN_CHARS and "vega" in body.lower():
        return "<script>/* VEGA BUNDLE (normalized) */</script>"
    return m.group(0)


def regroup_cell_lines(text: str) -> str:
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        if CELL_LINE.match(lines[i]):
            j = i
            while j < len(lines) and CELL_LINE.match(lines[j]):
                j += 1
            block = lines[i:j]
            out.extend(sorted(block, key=lambda line: CELL_LINE.match(line).group(1)))  # stable: keeps each cell's order
            i = j
        else:
            out.append(lines[i])
            i += 1
    return "".join(out)


def _write_csv(rows: list[list[str]]) -> str:
    buf = io.StringIO(newline="")
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def normalize_csv(text: str) -> str:
    """Mask the timing columns, only when re-writing the parsed rows gives back the very same bytes
    (else the file is left as it is: a change of quoting or line ends must show in the diff)."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows or _write_csv(rows) != text:
        return text
    masked = {i for i, name in enumerate(rows[0]) if name in CSV_TIMING_COLUMNS}
    return _write_csv([rows[0], *([("<T>" if i in masked and value else value) for i, value in enumerate(row)] for row in rows[1:])])


def normalize(text: str, name: str = "") -> str:
    """`name`: the file's path relative to the corpus folder it is copied into ('' for command output)."""
    if os.environ.get("CORPUS_RAW"):  # to look for new noise: two raw corpora of one tree, diffed
        return text
    if name.endswith(".html"):
        text = SCRIPT.sub(_bundle, text)
    if name.endswith(".csv"):
        text = normalize_csv(text)
    if name == "stderr":
        text = regroup_cell_lines(text)
    for regex, replacement in NORMALIZE_RE:
        text = regex.sub(replacement, text)
    if SHARD_JSONL.search(name):
        text = "".join(sorted(text.splitlines(keepends=True)))
    return text


# --- running the commands ------------------------------------------------------------------------


class Corpus:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.n = 0
        self.codes: list[tuple[str, int]] = []
        self.unexpected: list[str] = []

    def cmd(self, name: str, *args: str, cwd: Path = WORK, expect: tuple[int, ...] | None = (0,)) -> int:
        """Run `python -m shardeval ARGS` in cwd; write cmd/NN-name.txt (argv, exit code, stdout, stderr)."""
        self.n += 1
        t = time.monotonic()
        try:
            r = subprocess.run(
                [sys.executable, "-m", "shardeval", *args],
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
            code, stdout, stderr = r.returncode, r.stdout, r.stderr
        except subprocess.TimeoutExpired as exc:
            code, stdout, stderr = -1, _text(exc.stdout), _text(exc.stderr) + f"\n[corpus: timed out after {TIMEOUT_S} s]\n"
        body = (
            f"$ shardeval {' '.join(args)}\n(cwd: {cwd})\nexit: {code}\n"
            f"--- stdout\n{normalize(stdout)}--- stderr\n{normalize(stderr, 'stderr')}"
        )
        path = self.out / "cmd" / f"{self.n:02d}-{name}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        self.codes.append((path.name, code))
        flag = "" if expect is None or code in expect else f"   <-- expected exit {expect}"
        if flag:
            self.unexpected.append(path.name)
        print(f"  {path.name}: exit {code} ({time.monotonic() - t:.1f} s){flag}", file=sys.stderr)
        return code

    def collect(self, src: Path, dest: str) -> None:
        """Copy every file under src (a run's shards, merged/, logs; files a dry run wrote) to OUT/dest, normalized."""
        for path in sorted(p for p in src.rglob("*") if p.is_file()):
            target = self.out / dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                shutil.copyfile(path, target)
                continue
            target.write_text(normalize(text, str(Path(dest) / path.relative_to(src))))


def _text(b: bytes | str | None) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


MMLU_CONFIG = """\
# MMLU-shaped: multiple choice by letter, clustered by subject, 2 repeats, and some errors: the
# simulator fails 3 %% of attempts with a 5xx and a single attempt is allowed. One request at a
# time per shard (and each shard its own simulator), so the seeded faults hit the same requests
# every run.
services:
  model:
    type: sim
    bench: mmlu
    bench_params: {subjects: [abstract_algebra, anatomy]}
    accuracy: 0.6
    ttft_ms: 0
    itl_ms: 0
    fail_5xx: 0.03
    retries: {attempts: 1}
benchmarks:
  - name: mmlu
    params: {subjects: [abstract_algebra, anatomy]}
    repeats: 2
    max_concurrent: 1
    solver: {type: simple, service: model, generation: {temperature: 0.7, max_tokens: 64}}
cluster: {type: local, shards: 2}
output: {dir: %s, progress_interval_s: 0}
"""


def build(out: Path, root: Path) -> int:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    shutil.copytree(root / "examples", WORK / "examples")
    shared = root.parent / "shared" / "examples"
    if shared.is_dir():
        shutil.copytree(shared, WORK / "shared" / "examples")
    runs, ex = WORK / "runs", WORK / "examples"
    c = Corpus(out)
    print(f"corpus: {sys.executable}, PYTHONPATH={os.environ.get('PYTHONPATH', '')!r}, examples from {root}", file=sys.stderr)

    # 0. what the CLI says about itself
    c.cmd("version", "--version")
    c.cmd("help", "--help")
    for sub in ("run", "merge", "status", "compare", "rescore", "export", "sim", "benchmarks", "plugins"):
        c.cmd(f"help-{sub}", sub, "--help")
    c.cmd("benchmarks", "benchmarks")
    c.cmd("plugins", "plugins")

    # 1. a single run: arith_sim.yaml, 2 shards launched locally (each starts its simulator), merged
    small = ["-O", "output.progress_interval_s=0"]
    c.cmd(
        "run-single",
        "run",
        str(ex / "arith_sim.yaml"),
        "-O",
        "cluster.shards=2",
        "-O",
        "benchmarks.0.params.n=60",
        "-O",
        "benchmarks.0.repeats=2",
        "-O",
        f"output.dir={runs / 'single'}",
        *small,
    )
    c.cmd("merge-single", "merge", str(runs / "single"))
    c.cmd(
        "merge-single-errors-as-wrong-clopper",
        "merge",
        str(runs / "single"),
        "--errors-as-wrong",
        "--ci-method",
        "clopper-pearson",
        "-o",
        str(WORK / "out" / "single-cp"),
    )

    # 2. a sweep: sweep_sim.yaml (3 models x 2 benchmarks, 2 shards each), then the sweep merge
    c.cmd(
        "run-sweep",
        "run",
        str(ex / "sweep_sim.yaml"),
        "-O",
        "benchmarks.0.params.n=60",
        "-O",
        "benchmarks.1.params.n=60",
        "-O",
        f"output.dir={runs / 'sweep'}",
        *small,
    )
    c.cmd("merge-sweep", "merge", str(runs / "sweep"))

    # 3. a judged run: judge_sim.yaml (single and pairwise grading by a simulated judge)
    c.cmd(
        "run-judge",
        "run",
        str(ex / "judge_sim.yaml"),
        "-O",
        "benchmarks.0.params.n=40",
        "-O",
        "benchmarks.1.params.n=40",
        "-O",
        f"output.dir={runs / 'judge'}",
        *small,
    )
    c.cmd("merge-judge", "merge", str(runs / "judge"))

    # 4. rescores: the same scorer; a judged run judged again, and judged in another mode; each merged
    c.cmd("rescore-single", "rescore", str(runs / "single"), "-o", str(runs / "rescored"))
    c.cmd("merge-rescored", "merge", str(runs / "rescored"))
    c.cmd("rescore-judge", "rescore", str(runs / "judge"), "-o", str(runs / "judge_rescored"))
    c.cmd("merge-judge-rescored", "merge", str(runs / "judge_rescored"))
    c.cmd("rescore-judge-pairwise", "rescore", str(runs / "judge"), "-o", str(runs / "judge_pairwise"), "--judge", "arith=judge:pairwise")
    c.cmd("merge-judge-pairwise", "merge", str(runs / "judge_pairwise"))

    # 5. an MMLU-shaped run with errors: ERRORS, exit 3 (as tests/perf's MMLU-shaped runs)
    cfg = WORK / "configs" / "mmlu.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(MMLU_CONFIG % (runs / "mmlu"))
    c.cmd("run-mmlu", "run", str(cfg), expect=(3,))
    c.cmd("merge-mmlu", "merge", str(runs / "mmlu"), expect=(3,))
    c.cmd("merge-mmlu-errors-as-wrong", "merge", str(runs / "mmlu"), "--errors-as-wrong", "-o", str(WORK / "out" / "mmlu-eaw"), expect=(3,))

    # 6. compare: two models of the sweep (paired, same problems), as text, JSON and HTML
    a, b = str(runs / "sweep" / "base"), str(runs / "sweep" / "step1")
    c.cmd("compare", "compare", a, b, "--html", str(WORK / "out" / "compare.html"))
    c.cmd("compare-json", "compare", a, b, "--json")
    c.cmd("compare-rejudged", "compare", str(runs / "judge"), str(runs / "judge_pairwise"))

    # 7. dry runs of every example config (offline: they print and write, submit nothing), each in its own cwd
    configs = sorted(
        [*ex.glob("*.yaml"), *ex.glob("k8s/*.yaml"), *ex.glob("compose/*.yaml"), *(WORK / "shared" / "examples").glob("*.yaml")]
    )
    for config in configs:
        slug = str(config.relative_to(WORK)).replace("/", "_").removesuffix(".yaml")
        cwd = WORK / "dry" / slug
        cwd.mkdir(parents=True)
        c.cmd(f"dry-{slug}", "run", str(config), "--dry-run", cwd=cwd, expect=None)
    cwd = WORK / "dry" / "in-a-shard"
    cwd.mkdir(parents=True)
    c.cmd("dry-in-a-shard", "run", str(ex / "arith_sim.yaml"), "--dry-run", "--shard", "1/4", cwd=cwd)
    c.cmd("dry-sweep-cell", "run", str(ex / "sweep_sim.yaml"), "--dry-run", "--shard", "3/6", cwd=cwd)

    # 8. export and status
    c.cmd("export-csv", "export", str(runs / "single"), "-o", str(WORK / "out" / "single.csv"))
    c.cmd("export-jsonl", "export", str(runs / "single"), "-o", str(WORK / "out" / "single.jsonl"))
    c.cmd("export-sweep-jsonl", "export", str(runs / "sweep"), "-o", str(WORK / "out" / "sweep.jsonl"))
    c.cmd("export-mmlu-csv", "export", str(runs / "mmlu"), "-o", str(WORK / "out" / "mmlu.csv"))
    for name in ("single", "sweep", "judge", "rescored", "mmlu"):
        c.cmd(f"status-{name}", "status", str(runs / name), expect=None)

    c.collect(runs, "runs")
    c.collect(WORK / "dry", "dry")
    c.collect(WORK / "out", "out")
    (out / "EXIT_CODES.txt").write_text("".join(f"{name}: {code}\n" for name, code in c.codes))
    if c.unexpected:  # the corpus is still written (and diffable), but the tree did not behave as the base did
        print(f"corpus: unexpected exit codes: {', '.join(c.unexpected)}", file=sys.stderr)
        return 1
    return 0


# --- diffing two corpora -------------------------------------------------------------------------


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _clip(line: str, at: int, width: int = 90) -> str:
    lo = max(0, at - width // 3)
    return ("…" if lo else "") + line[lo : lo + width] + ("…" if lo + width < len(line) else "")


def first_differences(x: str, y: str, limit: int = 8) -> list[str]:
    """The first `limit` differing places: line numbers, and for a changed line the column where
    it first differs, with the text around it (lines can be a whole HTML page long)."""
    a, b = x.splitlines(), y.splitlines()
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            la = a[i1 + k] if i1 + k < i2 else None
            lb = b[j1 + k] if j1 + k < j2 else None
            col = next((c for c, (p, q) in enumerate(zip(la or "", lb or "")) if p != q), min(len(la or ""), len(lb or "")))
            where = f"line {i1 + k + 1}" + (f" col {col + 1}" if la is not None and lb is not None else "")
            out.append(f"  {where}:")
            if la is not None:
                out.append(f"    - {_clip(la, col)}")
            if lb is not None:
                out.append(f"    + {_clip(lb, col)}")
            if len(out) >= 3 * limit:
                return out + ["    …"]
    return out


def diff(before: Path, after: Path) -> int:
    a, b = files(before), files(after)
    only_a, only_b, both = sorted(a - b), sorted(b - a), sorted(a & b)
    differing = [name for name in both if (before / name).read_bytes() != (after / name).read_bytes()]
    print(
        f"{len(a)} files in {before}, {len(b)} in {after}: {len(only_a)} only before, {len(only_b)} only after, "
        f"{len(differing)} differ, {len(both) - len(differing)} identical"
    )
    for name in only_a:
        print(f"only in before: {name}")
    for name in only_b:
        print(f"only in after:  {name}")
    for name in differing:
        x, y = (before / name).read_bytes(), (after / name).read_bytes()
        try:
            lines = first_differences(x.decode(), y.decode())
        except UnicodeDecodeError:
            print(f"differs (binary): {name}")
            continue
        print(f"differs: {name}")
        print("\n".join(lines))
    return 1 if only_a or only_b or differing else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--diff"] and len(argv) == 3:
        return diff(Path(argv[1]), Path(argv[2]))
    root = Path(__file__).resolve().parent.parent
    if "--root" in argv:
        i = argv.index("--root")
        root, argv = Path(argv[i + 1]).resolve(), argv[:i] + argv[i + 2 :]
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    t = time.monotonic()
    code = build(Path(argv[0]).resolve(), root)
    print(
        f"corpus: {sum(1 for _ in Path(argv[0]).rglob('*') if _.is_file())} files in {argv[0]}, {time.monotonic() - t:.0f} s",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
