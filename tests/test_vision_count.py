"""The built-in image benchmark `vision_count`: the same problems and bytes in any process and any
shard split, every kind, scoring of each reply form, a fingerprint that draws nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("PIL")

from shardeval.api.benchmark import Problem
from shardeval.api.plugin import UsageError
from shardeval.benchmark.images import read_source, split_prompt
from shardeval.store.shards import shard_range
from shardeval_benchmarks import vision_count
from shardeval_benchmarks.vision_count import VisionCountBenchmark

N = 24


def bench(**params) -> VisionCountBenchmark:
    return VisionCountBenchmark({"n": N, **params})


def summary(b: VisionCountBenchmark, indices) -> list[list]:
    return [[p.id, p.prompt, p.reference, p.cluster, [r.sha256 for r in p.images]] for p in b.problems(indices)]


def test_the_same_problems_in_another_process_and_any_shard_split() -> None:
    here = summary(bench(), range(N))
    code = (
        "import json; from shardeval_benchmarks.vision_count import VisionCountBenchmark as B; b = B({'n': %d}); "
        "print(json.dumps([[p.id, p.prompt, p.reference, p.cluster, [r.sha256 for r in p.images]] for p in b.problems(range(%d))]))"
    ) % (N, N)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == here
    for shards in (1, 3, 7):
        parts = []
        for i in range(shards):
            start, end = shard_range(N, i, shards)
            parts += summary(bench(), range(start, end))  # a fresh benchmark per shard, as a shard builds it
        assert parts == here
    assert summary(bench(n=5 * N), range(N)) == here  # problem i does not depend on n


def test_kinds_take_turns_and_each_is_a_cluster() -> None:
    problems = list(bench().problems(range(8)))
    assert [p.cluster for p in problems] == ["count", "digits", "choice", "compare"] * 2
    count, digits, choice, compare = problems[:4]
    assert count.reference.isdigit() and 1 <= int(count.reference) <= 9 and "How many" in count.prompt
    assert digits.reference.isdigit() and 2 <= len(digits.reference) <= 4 and digits.reference[0] != "0"
    assert choice.reference in "ABCD" and len(choice.metadata["options"]) == 4
    assert compare.reference in "AB" and compare.metadata["options"] == ["the first image", "the second image"]
    assert [len(p.images) for p in problems[:4]] == [1, 1, 1, 2]
    assert split_prompt(compare.prompt, 2)[1] == 0 and "<image>" not in count.prompt  # markers place compare's images
    assert all(r.width == r.height == 224 and r.mime == "image/png" for p in problems for r in p.images)
    only = VisionCountBenchmark({"n": 6, "kinds": ["digits"], "size": 96})
    assert {p.cluster for p in only.problems(range(6))} == {"digits"}
    assert all(r.width == 96 for p in only.problems(range(6)) for r in p.images)
    assert vision_count.VisionCountBenchmark.has_images is True


def test_images_are_drawn_again_to_the_same_bytes() -> None:
    from shardeval.benchmark.images import STORE

    b = bench()
    for p in b.problems(range(8)):
        for ref in p.images:
            assert ref.name.startswith("gen:vision_count:")
            spec = ref.name.split(":", 2)[2]
            again = vision_count.draw(spec)
            assert hashlib.sha256(again).hexdigest() == ref.sha256 and len(again) == ref.bytes
            assert read_source(ref.name) == again  # the generator is registered
    reads = STORE.reads
    last = b.problem(N - 1)
    STORE.data_url(last.images[0])  # bytes offered when drawn: the store encodes them without drawing again
    assert STORE.reads == reads


def test_fingerprint_is_stable_cheap_and_follows_the_params(monkeypatch: pytest.MonkeyPatch) -> None:
    big = VisionCountBenchmark({"n": 10**6})
    monkeypatch.setattr(vision_count, "render", lambda *a: pytest.fail("the fingerprint drew an image"))
    assert big.fingerprint() == VisionCountBenchmark({"n": 10**6}).fingerprint()
    others = {
        VisionCountBenchmark(p).fingerprint()
        for p in ({"n": 10**6, "seed": 1}, {"n": 10**5}, {"n": 10**6, "size": 128}, {"n": 10**6, "kinds": ["count"]})
    }
    assert len(others) == 4 and big.fingerprint() not in others


@pytest.mark.parametrize(
    "params, words",
    [
        ({"n": -1}, "params.n"),
        ({"kinds": ["count", "bogus"]}, "params.kinds"),
        ({"kinds": []}, "params.kinds"),
        ({"kinds": ["count", "count"]}, "twice"),
        ({"size": 8}, "params.size"),
        ({"seeed": 1}, "seeed"),
    ],
)
def test_bad_params_are_one_line(params: dict, words: str) -> None:
    with pytest.raises(UsageError, match=words) as info:
        VisionCountBenchmark(params)
    assert "\n" not in str(info.value)


def test_image_limit_is_checked_without_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vision_count, "render", lambda *a: pytest.fail("the check drew an image"))
    with pytest.raises(UsageError, match="compare items have 2 images"):
        bench().check_images(1, 20 << 20, "benchmarks[0]")
    bench().check_images(2, 20 << 20, "benchmarks[0]")
    VisionCountBenchmark({"n": N, "kinds": ["count", "choice"]}).check_images(1, 20 << 20, "benchmarks[0]")
    VisionCountBenchmark({"n": 3, "kinds": ["count", "digits", "choice", "compare"]}).check_images(1, 20 << 20, "x")  # no compare among 3


def test_short_answers_score_as_numbers() -> None:
    b = bench()
    count = Problem(
        idx=0, id="c", prompt="How many red shapes are in the image?", reference="3", cluster="count", metadata={"kind": "count"}
    )
    for right in ("3", "three", "Three.", "There are 3 red shapes.", "I count three red shapes.", "#### 3", "The answer is 3.", "**3**"):
        assert b.score(count, right).score == 1.0, right
    for wrong in ("4", "four", "There are 4 red shapes.", "", "many", "thirteen"):
        assert b.score(count, wrong).score == 0.0, wrong
    digits = Problem(idx=1, id="d", prompt="What number?", reference="4721", cluster="digits", metadata={"kind": "digits"})
    for right in ("4721", "4,721", "The number is 4721.", "It reads 4721"):
        assert b.score(digits, right).score == 1.0, right
    assert b.score(digits, "4712").score == 0.0


def test_multiple_choice_scores_every_form() -> None:
    b = bench()
    choice = Problem(
        idx=2,
        id="m",
        prompt="Which shape?",
        reference="C",
        cluster="choice",
        metadata={"kind": "choice", "options": ["star", "circle", "triangle", "square"]},
    )
    for right in (
        "C",
        "(C)",
        "C.",
        "The answer is C.",
        "Answer: C",
        "**C**",
        "<answer>C</answer>",
        "triangle",
        "The triangle.",
        "C. triangle",
    ):
        assert b.score(choice, right).score == 1.0, right
    for wrong in ("B", "circle", "A or C", "C/D", "A circle", "I cannot tell."):
        assert b.score(choice, wrong).score == 0.0, wrong


def test_simulated_replies_score_as_drawn() -> None:
    """Every form the simulator says scores right when drawn right and wrong when drawn wrong, so
    the simulator's accuracy is the configured one; and the forms vary."""
    b = VisionCountBenchmark({"n": 80})
    forms = set()
    for p in b.problems(range(80)):
        for correct in (True, False):
            reply = b.simulated_reply(b.simulated_reference(p), correct)
            assert b.score(p, reply).score == float(correct), (p.cluster, p.reference, reply)
            forms.add(reply.replace(p.reference, "X"))
    assert len(forms) > 20


@pytest.mark.parametrize("kind", vision_count.KINDS)
def test_every_scene_fits_and_its_reference_is_what_it_shows(kind: str) -> None:
    """Thousands of scenes (no drawing): every shape has a cell of its own, and the reference is
    what the picture shows: the count of that colour, the most frequent shape, the squares' colour,
    the image with more circles."""
    for idx in range(3000):
        plan = vision_count.scene(0, 224, kind, idx)
        for image in plan["images"]:
            if isinstance(image, dict):
                assert image["digits"] == plan["reference"]
                continue
            assert len(image) <= vision_count.GRID**2
            assert len({(x // 56, y // 56) for _, _, x, y, _ in image}) == len(image)  # one per cell
        if kind == "count":
            colour = plan["question"].split()[2]
            assert sum(c == colour for _, c, *_ in plan["images"][0]) == int(plan["reference"])
        elif kind == "choice":
            shown = plan["images"][0]
            answer = plan["options"]["ABCD".index(plan["reference"])]
            if "shape" in plan["question"]:
                counts = {s: sum(shape == s for shape, *_ in shown) for s in vision_count.SHAPES}
                assert all(counts[answer] > n for s, n in counts.items() if s != answer)
            else:
                assert {c for shape, c, *_ in shown if shape == "square"} == {answer}
        elif kind == "compare":
            first, second = (sum(shape == "circle" for shape, *_ in image) for image in plan["images"])
            assert first != second and plan["reference"] == ("A" if first > second else "B")
