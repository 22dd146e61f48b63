"""A benchmark plugin loaded through SHARDEVAL_PLUGINS for tests/test_preflight.py: a benchmark
that needs an image (as a code benchmark needs a sandbox image) and says so in its pre-flight."""

from __future__ import annotations

from typing import Any

from shardeval.api.benchmark import Benchmark, Problem, Score
from shardeval.api.plugin import UsageError, hookimpl


class NeedsImage(Benchmark):
    """Three arithmetic problems; `preflight` accepts only the image `present` and appends the
    image it checked to `marker` (so a test can count the checks)."""

    name = "needs_image"
    scorer_version = "needs-image-1"

    def __init__(self, params: dict[str, Any]) -> None:
        self.image, self.marker = str(params.get("image")), params.get("marker")

    def preflight(self) -> None:
        if self.marker:
            with open(self.marker, "a") as f:
                f.write(self.image + "\n")
        if self.image != "present":
            raise UsageError(f"benchmark needs_image: image {self.image} is not available; pull it, or set params.image")

    def size(self) -> int:
        return 3

    def problem(self, idx: int) -> Problem:
        return Problem(idx=idx, id=str(idx), prompt=f"What is {idx} + {idx}?", reference=str(2 * idx))

    def score(self, problem: Problem, response: str) -> Score:
        return Score(score=float((problem.reference or "") in response))


@hookimpl
def register_benchmarks(register):
    register("needs_image", NeedsImage)
