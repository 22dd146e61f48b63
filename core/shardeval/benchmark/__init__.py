"""The benchmark API: a dataset in canonical order, how each problem is asked, and how it is scored.

A benchmark plugin registers a factory `factory(params: dict) -> Benchmark`. Problems are addressed
by their index in canonical order, so a shard asks only for its own range and never materialises
the rest. Solvers (how a problem becomes requests) and metrics (how scores reduce) stay separate.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal
from collections.abc import Callable, Iterator

import msgspec

from shardeval.benchmark.downloads import PrepareContext
from shardeval.benchmark.images import ImageRef
from shardeval.errors import UsageError


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    idx: int
    id: str
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    reference: str | None = None
    cluster: str | None = None
    metadata: dict[str, Any] = {}
    # The images its last user turn shows, in order (`<image>` markers place them; none: first).
    # Absent (UNSET) for text problems, so their encoding, and every fingerprint over it, is unchanged.
    images: list[ImageRef] | msgspec.UnsetType = msgspec.UNSET

    def user_text(self) -> str:
        """The text a simulator or log shows for this problem: the prompt or the last user turn."""
        if self.prompt is not None:
            return self.prompt
        return next((m.get("content", "") for m in reversed(self.messages or []) if m.get("role") == "user"), "")


class Score(msgspec.Struct, kw_only=True):
    # A finite number; None for an answer there is nothing to score (a document with no token to
    # predict): ok, in no mean. NaN or ±inf here, or in `scores`, makes the record an error.
    score: float | None
    extracted: str | None = None
    scores: dict[str, float] = {}


class Benchmark:
    """Base class for benchmarks; subclasses implement `size`, `problem` and `score`."""

    name: str = ""
    # Scoring that takes real time (running code in a sandbox) happens in a worker thread.
    score_in_thread: bool = False
    # What `shardeval merge` computes for it unless the config's `benchmarks[].metrics` says otherwise.
    metrics: tuple[str, ...] = ("accuracy", "pass@k")
    # The scorer's version: bump it whenever `score` or the answer extraction changes, so shards
    # scored the old way are never merged or resumed with new ones. None: the version of the
    # plugin that provides the benchmark (every release then counts as a change).
    scorer_version: str | None = None
    # Where its rows come from, as `shardeval benchmarks` shows it: a path, URL, `hf://` or
    # `pkg://` name (RowsBenchmark sets it from its source). "": no data file (generated problems).
    data_origin: str = ""
    # Its own judge rubric (a shardeval.run.judging.Rubric, e.g. from a BYO mapping's `judge:`
    # section), or None. With one, the benchmark is scored by a judge (a run must name the judge
    # service), the config's `judge` keys win over it, and it keeps its own metrics rather than
    # a judge's `mean`.
    judge_rubric: Any = None

    @classmethod
    def default_sampling(cls, repeats: int) -> dict[str, Any]:
        """The sampling a request carries for each `Generation` key the config leaves unset, so no
        result depends on a server's hidden default (vLLM: temperature 1.0 unless the model's
        generation_config says otherwise). Declared on the class: the config is completed, and
        its identity computed, without loading any data (shardeval.config.sampling).

        Default, for benchmarks with one right answer: greedy for one answer per problem; with
        repeats, the model's own distribution (temperature 1.0), since pass@k and majority votes
        need distinct samples. Override it where the literature fixes other settings."""
        return {"temperature": 0.0} if repeats == 1 else {"temperature": 1.0}

    @classmethod
    def default_repeats(cls, params: dict[str, Any]) -> int | None:
        """How many times each problem is asked when the config does not say (`repeats` left out),
        as the benchmark's own definition says (an Inspect task's `epochs`); None: once. Every
        default comes from the task, as its reference tool would run it."""
        return None

    @classmethod
    def scored_by_likelihood(cls, params: dict[str, Any]) -> bool:
        """Whether, built with `params`, its problems are scored by their log-likelihood
        (metadata `scoring: loglikelihood`) rather than answered: such requests generate nothing
        and carry temperature 0 whatever the config says (shardeval.run.solver.LoglikelihoodSolver),
        so no sampling is filled in for them and --dry-run says what they do carry. Declared on
        the class, as `default_sampling`: no data is loaded to know it."""
        return False

    # Who gives a record's scores, which `shardeval rescore` must know:
    #   "scorer_and_solver" (default): the benchmark's scorer, plus numbers its solver measured
    #       (log-probabilities, nll), which a rescore keeps;
    #   "scorer": every score is the scorer's (an lm-eval task's metrics), so a metric a re-scoring
    #       no longer gives is gone, not kept;
    #   "solver": its solver scores every answer itself (Attempt.score: an Inspect task's scorers,
    #       which run inside Inspect with its sandbox), so rescore cannot score its records again, and
    #       says so, unless another scorer is named for it.
    scores_from: Literal["scorer_and_solver", "scorer", "solver"] = "scorer_and_solver"
    # The solver its problems need (registered name), used when the config leaves `solver.type`
    # at its default: e.g. `lm_eval`, whose problems are lm-eval request lists. None: the config's.
    solver: str | None = None
    # What --dry-run says of the requests that solver makes (None: it sends what the benchmark
    # planned, and solver.generation does not apply).
    requests_note: str | None = None

    # Whether its problems may carry images (Problem.images): checked at config load against the
    # service's protocol and the solver (images need chat completions), before any request.
    has_images: bool = False

    @classmethod
    def expand(cls, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]] | None:
        """When one config entry stands for several benchmarks (an lm-eval group: one per leaf
        task, each its own folder, merge and report row), their ids and params; None: it is one.
        Called once per config load, so it may plan (and refuse bad input) before any request."""
        return None

    @classmethod
    def quick_params(cls, argument: str) -> dict[str, Any]:
        """The params `--bench NAME:ARGUMENT` means (e.g. `lm_eval:gsm8k,arc_easy` → its tasks).
        By default a benchmark takes no argument: a one-line error saying so."""
        raise UsageError(f"--bench {cls.name or 'it'}:{argument}: this benchmark takes no ':ARGUMENT'; set its params in a config file")

    def size(self) -> int:
        raise NotImplementedError

    def problem(self, idx: int) -> Problem:
        raise NotImplementedError

    def score(self, problem: Problem, response: str) -> Score:
        raise NotImplementedError

    def prepare(self, ctx: PrepareContext) -> str | None:
        """`shardeval prepare`, on a host with the network: fetch what this benchmark reads from
        outside beyond its data rows and images (which the core fetches into the download cache
        itself: building the benchmark and its problems does it), into `ctx.folder(key)`, and
        return a hash of what it planned (None: nothing beyond the problems). A shard finds the
        folder with `prepared_folder(key)`. The default fetches nothing more."""
        return None

    def preflight(self) -> None:
        """Check, once, what would otherwise fail every request or every shard: the images or
        tools it runs, the task names its params select. Raise shardeval.errors.UsageError (one
        line: the thing, the value, the fix). Called after the factory (which reads the data, so
        a missing data file is already its one line), before any shard starts: by `run` in the
        launching process when the shards run on this machine, and by each shard before it
        touches its output directory. The default checks nothing more."""

    def check_images(self, limit: int | None, max_bytes: int, where: str) -> None:
        """Refuse, before any request, a problem with more images than the service takes per prompt
        (`limit`, None: no limit declared) or an image over `max_bytes`: one line naming the
        problem and the image. Called only when `has_images`. The default looks at every problem's
        ImageRefs; a benchmark that knows its extent without building them all overrides it."""
        from shardeval.benchmark.images import check_count

        for p in self.problems(range(self.size())):
            images = p.images or []
            check_count(len(images), limit, f"{where}: problem {p.idx} (id {p.id})")
            for ref in images:
                if ref.bytes > max_bytes:
                    raise UsageError(
                        f"{where}: problem {p.idx} (id {p.id}): image {ref.name} is {ref.bytes} bytes, over the "
                        f"service's max_image_bytes ({max_bytes}); shrink it or raise max_image_bytes"
                    )
            if images and p.metadata.get("scoring") == "loglikelihood":
                raise UsageError(
                    f"{where}: problem {p.idx} (id {p.id}) has images and is scored by log-likelihood, which "
                    "sends text only; score it by its answer"
                )

    def problems(self, indices: range | list[int]) -> Iterator[Problem]:
        """Yield the problems at `indices` lazily; override when sequential reads are cheaper."""
        yield from map(self.problem, indices)

    def fingerprint(self) -> str:
        """Hash of the canonical rows, so merge can tell two datasets apart (override when cheaper)."""
        h = hashlib.sha256()
        for p in self.problems(range(self.size())):
            h.update(msgspec.json.encode(p) + b"\n")
        return "sha256:" + h.hexdigest()


BenchmarkFactory = Callable[[dict[str, Any]], Benchmark]
