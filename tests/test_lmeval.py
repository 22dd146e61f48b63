"""The lm_eval plugin end to end against the simulator (no vLLM): lm-eval tasks written into a tmp
dir (tests/lmeval_local.py), real `shardeval run` / `merge` / `rescore`, every request recorded
as the server received it.

Checked: the request bodies, per-document scores, merged numbers and lm-eval's own results file
do not depend on the shard count (1, 4 via the shard variables, 7 via --shard); the planned
prompts hold the task's few-shot examples, drawn per document; a shard killed with SIGKILL and
rerun asks nothing twice and merges complete; an edited filter rescores without a request; quick
mode; bad input is one line, exit 2, no request; lm-eval's results file matches shardeval's own
per-filter means and is not written for an incomplete run.

Speed: lm-eval indexes its ~14,000 task YAMLs (6-10 s) in every process that plans. The runs that
need a process of their own (the whole run, the killed shard and its rerun) are real `shardeval`
processes; the others call the CLI in this process with that index built once (the tasks, their
data and every few-shot draw are still loaded and planned afresh for each call).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from conftest import shardeval_cmd
from served import wait_for_records
from lmeval_local import (
    DRAWN,
    env_offline,
    GSM8K,
    lm_config,
    lm_eval_results,
    N_TEST,
    Recording,
    records,
    recording_endpoint,
    trajectories,
    write_tasks,
)

pytest.importorskip("lm_eval")
# The module's set-up (lm-eval's reference runs) counts against its first test: 55-91 s in full
# runs of the test command, against the default limit of 120 s.
pytestmark = pytest.mark.timeout(600)

TASKS = (GSM8K, DRAWN)
SHOTS = {GSM8K: 5, DRAWN: 3}
FILTERS = ("exact_match,strict-match", "exact_match,flexible-extract")


@pytest.fixture(scope="module", autouse=True)
def offline_and_one_task_index() -> Iterator[None]:
    """Offline, and lm-eval's YAML index built once for the calls made in this process."""
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import _index

    build, built = _index.TaskIndex.build, {}

    def build_once(paths: Any, **options: Any) -> dict[str, Any]:
        index = {}
        for root in paths:  # each folder once (lm-eval's own is the slow one); later folders override, as in build
            key = (str(root), tuple(sorted(options.items())))
            if key not in built:
                built[key] = build([root], **options)
            index.update(built[key])
        return index

    get_model("local-completions")  # its first import prints a notice about torch: before any test reads stderr
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env_offline().items():
            mp.setenv(name, value)
        mp.setattr(_index.TaskIndex, "build", staticmethod(build_once))
        yield


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("lm_tasks"))


@pytest.fixture(scope="module")
def endpoint() -> Iterator[Recording]:
    with recording_endpoint() as recording:
        yield recording


def shardeval_here(*argv: str) -> int:
    """`shardeval ARGV` in this process, planned afresh (no plan kept from an earlier call); its exit status."""
    from shardeval.cli import main
    from shardeval_lmeval import plan

    plan._PLANS.clear()
    logging.getLogger("shardeval").handlers.clear()  # its handler is made again on the stderr of now
    try:
        main(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def ok(code: int) -> None:
    assert code == 0, f"exit {code}"


def canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, ensure_ascii=False)


# --- one config, run whole and in 4 and 7 shards ---------------------------------------------------


@dataclass
class Run:
    root: Path  # shard_*/ and merged/
    bodies: list[dict[str, Any]]  # what the simulator received during the run


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory, tasks: Path, endpoint: Recording) -> dict[int, Run]:
    """The same config run as 1 shard (its own process), 4 shards (NEL_* variables) and 7 (--shard), each merged."""
    root = tmp_path_factory.mktemp("sharded")
    cfg = lm_config(root / "config.json", endpoint.url, tasks, list(TASKS))
    runs = {}
    for total in (1, 4, 7):
        endpoint.clear()
        out = root / f"n{total}"
        for i in range(total):
            if total == 1:
                done = shardeval_cmd(
                    "run", str(cfg), "-o", str(out / "shard_0"), env={"NEL_SHARD_IDX": "0", "NEL_TOTAL_SHARDS": "1", **env_offline()}
                )
                assert done.returncode == 0, done.stderr
            elif total == 4:
                with pytest.MonkeyPatch.context() as mp:
                    mp.setenv("NEL_SHARD_IDX", str(i))
                    mp.setenv("NEL_TOTAL_SHARDS", str(total))
                    ok(shardeval_here("run", str(cfg), "-o", str(out / f"shard_{i}")))
            else:
                ok(shardeval_here("run", str(cfg), "--shard", f"{i}/{total}", "-o", str(out / f"shard_{i}")))
        runs[total] = Run(out, list(endpoint.bodies))
        ok(shardeval_here("merge", str(out), "-q"))
    return runs


def per_document(run: Run) -> dict[tuple[str, int], dict[str, Any]]:
    """Each document's prompt, the body the server received for it, and its record's answer and scores."""
    by_prompt = {b["prompt"]: b for b in run.bodies}
    docs = {}
    for shard in sorted(run.root.glob("shard_*")):
        for bench in TASKS:
            prompts = {t["problem_idx"]: t["messages"][0]["content"] for t in trajectories(shard, bench)}
            for r in records(shard, bench):
                key = (bench, r["problem_idx"])
                assert key not in docs, f"{key} recorded twice"
                docs[key] = {
                    "prompt": prompts[r["problem_idx"]],
                    "body": canonical(by_prompt[prompts[r["problem_idx"]]]),
                    "response": r["response"],
                    "score": r["score"],
                    "scores": r["scores"],
                    "status": r["status"],
                }
    return docs


def test_requests_scores_and_lm_eval_numbers_do_not_depend_on_the_shard_count(sharded: dict[int, Run]) -> None:
    whole = per_document(sharded[1])
    assert sorted(whole) == [(b, i) for b in TASKS for i in range(N_TEST)]
    assert all(d["status"] == "ok" for d in whole.values())
    right = [d["scores"]["exact_match,strict-match"] for d in whole.values()]
    assert 0 < sum(right) < len(right)  # the simulator answers some right and some wrong: the comparison has teeth
    for total in (4, 7):
        run = sharded[total]
        assert len(run.bodies) == 2 * N_TEST  # one request per document, none twice
        assert sorted(map(canonical, run.bodies)) == sorted(map(canonical, sharded[1].bodies))  # byte for byte
        assert per_document(run) == whole
        for name in ("scores.json",):
            assert (run.root / "merged" / name).read_bytes() == (sharded[1].root / "merged" / name).read_bytes()
        assert lm_eval_results(run.root / "merged")["results"] == lm_eval_results(sharded[1].root / "merged")["results"]
    assert {b["seed"] for b in sharded[1].bodies} == {1234}  # lm-eval's own request seed, the same on every shard


def test_each_prompt_holds_its_tasks_few_shot_examples_drawn_per_document(sharded: dict[int, Run], tasks: Path) -> None:
    test_questions = [json.loads(line)["question"] for line in (tasks / "test.jsonl").read_text().splitlines()]
    train_questions = {json.loads(line)["question"] for line in (tasks / "train.jsonl").read_text().splitlines()}
    docs = per_document(sharded[1])
    for bench in TASKS:
        shots_per_doc = []
        for i in range(N_TEST):
            blocks = docs[(bench, i)]["prompt"].split("\n\n")
            assert len(blocks) == SHOTS[bench] + 1 and all(b.startswith("Q: ") for b in blocks)
            assert blocks[-1] == f"Q: {test_questions[i]}\nA:"  # the document's own question, last and unanswered
            shots = tuple(b[3 : b.index("\nA: ")] for b in blocks[:-1])
            pool = train_questions if bench == GSM8K else set(test_questions) - {test_questions[i]}
            assert set(shots) <= pool and len(set(shots)) == len(shots)
            shots_per_doc.append(shots)
        assert len(set(shots_per_doc)) > N_TEST // 2, f"{bench}: the random sampler drew the same examples for most documents"


# --- lm-eval's files beside the merge ---------------------------------------------------------------


def test_lm_eval_results_file_holds_shardevals_per_filter_means(sharded: dict[int, Run]) -> None:
    merged = sharded[4].root / "merged"
    scores = json.loads((merged / "scores.json").read_text())
    results = lm_eval_results(merged)
    (samples_file, *_) = sorted((merged / "lm_eval").glob(f"*/samples_{GSM8K}_*.jsonl"))
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    expected = [(i, f.split(",")[1]) for i in range(N_TEST) for f in FILTERS]  # one line per document and filter
    assert sorted((s["doc_id"], s["filter"]) for s in samples) == sorted(expected)
    for bench in TASKS:
        assert results["results"][bench]["sample_len"] == N_TEST
        for key in FILTERS:
            ours = scores[bench]["metrics"][key]
            assert ours["n"] == N_TEST
            assert abs(results["results"][bench][key] - ours["value"]) <= 1e-12, (bench, key)
            stderr_key = key.replace(",", "_stderr,", 1)
            assert abs(results["results"][bench][stderr_key] - ours["details"]["lm_eval_stderr"]) <= 1e-12


def test_lm_eval_results_are_not_written_while_a_shard_is_missing(sharded: dict[int, Run], tmp_path: Path, capfd) -> None:
    run = tmp_path / "three_of_four"
    for i in (0, 1, 3):
        shutil.copytree(sharded[4].root / f"shard_{i}", run / f"shard_{i}")
    capfd.readouterr()
    assert shardeval_here("merge", str(run), "-q") == 3
    err = capfd.readouterr().err
    (why,) = [line for line in err.splitlines() if "lm-eval results not written" in line]
    assert "not complete" in why and "rerun the missing shards" in why, why
    assert not (run / "merged" / "lm_eval").exists()
    assert (run / "merged" / "scores.json").exists()  # shardeval's own partial merge is still written


def test_lm_eval_results_are_not_written_when_the_tasks_now_plan_other_prompts(tmp_path: Path, endpoint: Recording, capfd) -> None:
    """The merge replays lm-eval from the task YAMLs as they are now: after a prompt edit the saved
    answers belong to other prompts, so lm-eval's files are not written (and no earlier ones stay)."""
    own_tasks = write_tasks(tmp_path / "tasks")
    cfg = lm_config(tmp_path / "config.json", endpoint.url, own_tasks, [GSM8K])
    ok(shardeval_here("run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "run" / "shard_0")))
    ok(shardeval_here("merge", str(tmp_path / "run"), "-q"))
    assert lm_eval_results(tmp_path / "run" / "merged")["results"][GSM8K]
    with open(own_tasks / f"{GSM8K}.yaml", "a") as f:
        f.write('doc_to_text: "Question: {{question}}\\nA:"\n')
    capfd.readouterr()
    ok(shardeval_here("merge", str(tmp_path / "run"), "-q"))
    (why,) = [line for line in capfd.readouterr().err.splitlines() if "lm-eval results not written" in line]
    assert "plans other requests" in why and GSM8K in why, why
    assert not list((tmp_path / "run" / "merged" / "lm_eval").glob("*/results_*.json"))


# --- a shard killed with SIGKILL, then rerun --------------------------------------------------------


def test_a_shard_killed_mid_run_resumes_without_asking_any_answered_document_again(tmp_path: Path, tasks: Path) -> None:
    with recording_endpoint("--ttft-ms", "120") as slow:
        cfg = lm_config(tmp_path / "config.json", slow.url, tasks, list(TASKS), max_concurrent=2)
        out = tmp_path / "run" / "shard_0"
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", "0/1", "-o", str(out)],
            env={**os.environ, **env_offline()},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_records(out / GSM8K / "results.jsonl", 3, proc)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        before = [r for bench in TASKS if (out / bench / "results.jsonl").exists() for r in records(out, bench)]
        answered = {(r["benchmark"], r["problem_idx"]) for r in before if r["status"] == "ok"}
        assert 3 <= len(answered) < 2 * N_TEST, "the kill must land mid-run"
        slow.clear()
        rerun = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out), env=env_offline())
        assert rerun.returncode == 0, rerun.stderr
        assert "resuming" in rerun.stderr
        asked_again = [b["prompt"] for b in slow.bodies]
    prompts = {(bench, t["problem_idx"]): t["messages"][0]["content"] for bench in TASKS for t in trajectories(out, bench)}
    assert sorted(prompts) == [(b, i) for b in TASKS for i in range(N_TEST)]
    assert not {prompts[k] for k in answered} & set(asked_again), "an answered document was asked again"
    assert {prompts[k] for k in set(prompts) - answered} <= set(asked_again)  # and every other one was asked
    assert len(asked_again) == len(set(asked_again))
    ok(shardeval_here("merge", str(out.parent), "-q"))
    scores = json.loads((out.parent / "merged" / "scores.json").read_text())
    for bench in TASKS:
        assert scores[bench]["complete"] and scores[bench]["n_ok"] == N_TEST and scores[bench]["n_duplicates"] == 0
        merged = [json.loads(line) for line in (out.parent / "merged" / bench / "results.jsonl").read_text().splitlines()]
        assert sorted((r["problem_idx"], r["repeat"]) for r in merged) == [(i, 0) for i in range(N_TEST)]
    assert lm_eval_results(out.parent / "merged")["results"][GSM8K]["sample_len"] == N_TEST


# --- rescoring after the task's filter changed -----------------------------------------------------

STRICT_NEVER_MATCHES = """filter_list:
  - name: "strict-match"
    filter:
      - function: "regex"
        regex_pattern: "The answer is (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: "take_first"
  - name: "flexible-extract"
    filter:
      - function: "regex"
        group_select: -1
        regex_pattern: "(-?[$0-9.,]{2,})|(-?[0-9]+)"
      - function: "take_first"
"""


@dataclass
class Rescored:
    before: Path  # the run
    after: Path  # its rescore, merged
    requests: int  # requests the server received during the rescore and its merge


@pytest.fixture(scope="module")
def rescored(tmp_path_factory: pytest.TempPathFactory, endpoint: Recording) -> Rescored:
    """A run of local_gsm8k, then its task's strict-match regex edited to one that never matches, rescored and merged."""
    root = tmp_path_factory.mktemp("rescore")
    own_tasks = write_tasks(root / "tasks")
    cfg = lm_config(root / "config.json", endpoint.url, own_tasks, [GSM8K])
    ok(shardeval_here("run", str(cfg), "--shard", "0/1", "-o", str(root / "run" / "shard_0")))
    ok(shardeval_here("merge", str(root / "run"), "-q"))
    with open(own_tasks / f"{GSM8K}.yaml", "a") as f:
        f.write(STRICT_NEVER_MATCHES)
    endpoint.clear()
    ok(shardeval_here("rescore", str(root / "run"), "-o", str(root / "rescored")))
    ok(shardeval_here("merge", str(root / "rescored"), "-q"))
    return Rescored(root / "run", root / "rescored", len(endpoint.bodies))


def test_rescore_after_a_filter_edit_rescores_every_document_without_a_request(rescored: Rescored) -> None:
    assert rescored.requests == 0
    before = {r["problem_idx"]: r for r in records(rescored.before / "shard_0", GSM8K)}
    after = {r["problem_idx"]: r for r in records(rescored.after / "shard_0", GSM8K)}
    assert sorted(after) == sorted(before) == list(range(N_TEST))
    assert any(r["score"] == 1.0 for r in before.values())
    for i, r in after.items():
        assert r["response"] == before[i]["response"]  # the saved answers, not new ones
        assert r["score"] == 0.0 and r["extracted"] == "[invalid]"  # strict-match is the headline and never matches now
    old = lm_eval_results(rescored.before / "merged")["results"][GSM8K]
    new = lm_eval_results(rescored.after / "merged")["results"][GSM8K]
    assert old["exact_match,strict-match"] > 0 and new["exact_match,strict-match"] == 0.0
    assert new["exact_match,flexible-extract"] == old["exact_match,flexible-extract"]  # the unchanged filter scores as before
    before_manifest = json.loads((rescored.before / "shard_0" / "manifest.json").read_text())["benchmarks"][0]
    after_manifest = json.loads((rescored.after / "shard_0" / "manifest.json").read_text())["benchmarks"][0]
    # scored another way (never merged with the run), from the same data
    assert after_manifest["scorer_fingerprint"] != before_manifest["scorer_fingerprint"]
    assert after_manifest["dataset_fingerprint"] == before_manifest["dataset_fingerprint"]


def test_rescore_after_a_filter_edit_changes_the_per_filter_scores(rescored: Rescored) -> None:
    before = {r["problem_idx"]: r for r in records(rescored.before / "shard_0", GSM8K)}
    for r in records(rescored.after / "shard_0", GSM8K):
        assert r["scores"]["exact_match,strict-match"] == 0.0
        assert r["scores"]["exact_match,flexible-extract"] == before[r["problem_idx"]]["scores"]["exact_match,flexible-extract"]
    scores = json.loads((rescored.after / "merged" / "scores.json").read_text())[GSM8K]["metrics"]
    assert scores["exact_match,strict-match"]["value"] == 0.0


def test_shards_run_under_different_filters_are_never_merged(tmp_path: Path, endpoint: Recording, capfd) -> None:
    own_tasks = write_tasks(tmp_path / "tasks")
    cfg = lm_config(tmp_path / "config.json", endpoint.url, own_tasks, [GSM8K])
    ok(shardeval_here("run", str(cfg), "--shard", "0/2", "-o", str(tmp_path / "run" / "shard_0")))
    with open(own_tasks / f"{GSM8K}.yaml", "a") as f:
        f.write(STRICT_NEVER_MATCHES)
    ok(shardeval_here("run", str(cfg), "--shard", "1/2", "-o", str(tmp_path / "run" / "shard_1")))
    capfd.readouterr()
    err = one_line_error(capfd, shardeval_here("merge", str(tmp_path / "run"), "-q"))
    assert "shards from different runs" in err and f"{GSM8K} scorer" in err, err


# --- quick mode -----------------------------------------------------------------------------------


def test_quick_mode_runs_an_lm_eval_task_named_on_the_command_line(tmp_path: Path, tasks: Path, endpoint: Recording) -> None:
    endpoint.clear()
    out = tmp_path / "quick"
    ok(
        shardeval_here(
            "run",
            "--bench",
            f"lm_eval:{GSM8K}",
            "--model-url",
            endpoint.url,
            "--model-id",
            "sim",
            "--max-problems",
            "3",
            "-O",
            f"benchmarks.0.params.include_path={tasks}",
            "-O",
            "benchmarks.0.params.tokenizer_backend=none",
            "-o",
            str(out),
        )
    )
    recs = records(out, GSM8K)
    assert sorted(r["problem_idx"] for r in recs) == [0, 1, 2] and all(r["status"] == "ok" for r in recs)
    assert len(endpoint.bodies) == 3 and all(b["prompt"].count("Q: ") == SHOTS[GSM8K] + 1 for b in endpoint.bodies)


# --- bad input: one line, exit 2, nothing asked -----------------------------------------------------


def one_line_error(capfd, code: int) -> str:
    err = capfd.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("shardeval: error: "), err
    return err


@pytest.mark.parametrize(
    "case", ["unknown task", "data file missing", "include_path a file", "tokenizer unset", "unknown key", "multimodal task"]
)
def test_bad_input_is_one_line_exit_2_and_asks_nothing(case: str, tmp_path: Path, tasks: Path, endpoint: Recording, capfd) -> None:
    include, names, params, needles = tasks, [GSM8K], {}, []
    if case == "unknown task":
        names, needles = ["local_gsm9k"], ["unknown lm-eval task(s) local_gsm9k", "did you mean local_gsm8k"]
    elif case == "data file missing":
        include = write_tasks(tmp_path / "tasks")
        (include / "test.jsonl").unlink()
        needles = ["lm-eval cannot plan local_gsm8k", str(include / "test.jsonl")]
    elif case == "include_path a file":
        include, needles = tasks / "test.jsonl", ["params.include_path", "is not a directory"]
    elif case == "tokenizer unset":
        params, needles = {"tokenizer_backend": None}, ["params.tokenizer is not set"]  # lm-eval's default: huggingface
    elif case == "unknown key":
        params, needles = {"num_fewshots": 2}, ["unknown key 'params.num_fewshots'", "num_fewshot"]
    else:  # lm-eval's registry has no multimodal task whose data loads offline: a local one, marked by doc_to_image
        include = write_tasks(tmp_path / "tasks")
        (include / "local_mm.yaml").write_text(f"include: {GSM8K}.yaml\ntask: local_mm\ndoc_to_image: [question]\n")
        names, needles = ["local_mm"], ["lm-eval cannot plan local_mm", "multimodal"]
    cfg = lm_config(tmp_path / "config.json", endpoint.url, include, names, **params)
    endpoint.clear()
    capfd.readouterr()
    err = one_line_error(capfd, shardeval_here("run", str(cfg), "-o", str(tmp_path / "out")))
    assert all(n in err for n in needles), err
    assert endpoint.bodies == []
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "bench, needle", [("lm_eval:", "--bench lm_eval:TASKS: name lm-eval tasks"), ("lm_eval:gsm8kk", "did you mean gsm8k")]
)
def test_quick_mode_without_a_known_task_is_one_line(bench: str, needle: str, tmp_path: Path, endpoint: Recording, capfd) -> None:
    endpoint.clear()
    capfd.readouterr()
    err = one_line_error(
        capfd,
        shardeval_here(
            "run",
            "--bench",
            bench,
            "--model-url",
            endpoint.url,
            "--model-id",
            "sim",
            "-O",
            "benchmarks.0.params.tokenizer_backend=none",
            "-o",
            str(tmp_path / "out"),
        ),
    )
    assert needle in err, err
    assert endpoint.bodies == []


def test_without_lm_eval_installed_a_run_is_one_line_naming_the_extra(tmp_path: Path, tasks: Path) -> None:
    """lm-eval is an optional extra: where it cannot be imported (here: blocked in sys.modules, as
    if never installed), a run that names lm_eval says how to get it, in one line, exit 2."""
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "services": {"model": {"type": "api", "url": "http://127.0.0.1:9/v1", "model": "m"}},
                "benchmarks": [{"name": "lm_eval", "params": {"tasks": [GSM8K], "include_path": str(tasks), "tokenizer_backend": "none"}}],
            }
        )
    )
    code = "import sys; sys.modules['lm_eval'] = None; from shardeval.cli import main; sys.argv[0] = 'shardeval'; main()"
    run = subprocess.run(
        [sys.executable, "-c", code, "run", str(cfg), "--dry-run"], capture_output=True, text=True, env=env_offline(), timeout=120
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "pip install 'shardeval[lm-eval]'" in run.stderr and "plugins install" in run.stderr
