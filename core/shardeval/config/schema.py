"""The config's schema: every section as a msgspec Struct, with declared ranges for its numbers.

Top-level sections are fixed here; `services.<name>` and `cluster` are decoded in a second step
with the Struct their plugin registered (a service's or orchestrator's own keys live in its
plugin), so a third-party plugin brings its own validated config section.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from shardeval.benchmark.reasoning import DEFAULT_TAGS as DEFAULT_REASONING_TAGS
from shardeval.errors import UsageError
from shardeval.store.records import GateRule

Protocol = Literal["chat_completions", "completions"]

# Declared ranges for numeric limits: every int or float knob of a config section (plugins' too)
# uses one of these or its own msgspec.Meta, so a nonsense value (a timeout of 0, no attempts, a
# negative backoff) is a one-line error naming the key and the value, never a run that does nothing.
Count = Annotated[int, msgspec.Meta(ge=1)]  # how many: at least one
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]  # a timeout or an interval: zero would fail or spin
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]
NonNegativeSeconds = NonNegativeFloat  # a wait that may be none at all
Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]
Tag = Annotated[str, msgspec.Meta(min_length=1)]


def json_value(value: Any) -> str:
    """A config value as the user would write it in YAML/JSON (true, not True)."""
    return msgspec.json.encode(value).decode()


class _Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """Base for config sections: unknown keys are errors, defaults stay out of hashes and dumps."""


class ReasoningConfig(_Section):
    """How much a reasoning model thinks (docs/reasoning.md). Each key unset is the server's
    default, and the record says so; how each reaches the server is the service's business
    (`ServiceConfig.reasoning_request`). Part of the run identity, as all of `generation` is."""

    enable: bool | None = None  # false: ask the server not to think (a chat template's enable_thinking)
    effort: Literal["low", "medium", "high"] | None = None  # reasoning_effort, where the model takes it
    budget_tokens: Count | None = None  # a cap on the thinking tokens, where the server takes one


class Generation(_Section):
    """Sampling parameters sent with every request; `extra` passes server-specific ones through."""

    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=-1)] | None = None  # -1 (or 0): no top-k, as vLLM reads it
    max_tokens: Count | None = None
    stop: list[str] | None = None
    reasoning: ReasoningConfig | None = None  # None: the server's default
    extra: dict[str, Any] = {}


class SolverConfig(_Section):
    type: str = "simple"
    # The service the solver asks. Unset: `model` in a single run; every model of a sweep in a sweep.
    service: str | None = None
    system_prompt: str | None = None
    generation: Generation = msgspec.field(default_factory=Generation)

    def named_service(self) -> str:
        """The service a shard's solver asks: named in every config a shard runs (a run's `model`
        is filled in when the config is read, a sweep cell's model by the sweep)."""
        if self.service is None:
            raise ValueError("solver.service is unset in a resolved config")
        return self.service


class JudgeConfig(_Section):
    """Score a benchmark by asking a judge service (shardeval.run.judging, docs/judges.md). `rubric`
    and `verdict` (a regex) override the benchmark's own and the defaults; `mode` unset: the
    benchmark's own, else single."""

    service: str
    mode: Literal["single", "pairwise"] | None = None
    rubric: str | None = None
    verdict: str | None = None
    generation: Generation = msgspec.field(default_factory=Generation)  # temperature 0 unless set


class BenchmarkConfig(_Section):
    name: str
    # The benchmark's name in records and its folder <out>/<id>/ (default: the benchmark's own name,
    # a data file's stem); needed to list one benchmark twice, or two data files of one name.
    id: str | None = None
    solver: SolverConfig = msgspec.field(default_factory=SolverConfig)
    repeats: Count = 1
    max_problems: Count | None = None
    max_concurrent: Count = 32
    params: dict[str, Any] = {}
    metrics: list[str] | None = None  # merge's metrics for it; None: the benchmark's own default
    judge: JudgeConfig | None = None  # scored by a judge service instead of the benchmark's own scorer


class Timeouts(_Section):
    """Split client timeouts in seconds; `total` is off by default so long reasoning streams survive."""

    connect: Seconds = 30.0
    first_token: Seconds = 600.0
    idle: Seconds = 120.0
    total: Seconds | None = None


class Retries(_Section):
    """Attempts per request (first try included) and full-jitter exponential backoff bounds."""

    attempts: Count = 5
    backoff_base: NonNegativeSeconds = 0.5
    backoff_max: NonNegativeSeconds = 30.0


class ServiceConfig(_Section):
    """Keys every service type shares; a service plugin subclasses this with its own keys."""

    type: str
    protocol: Protocol = "chat_completions"
    stream: bool = True
    api_key_env: str | None = None
    timeouts: Timeouts = msgspec.field(default_factory=Timeouts)
    retries: Retries = msgspec.field(default_factory=Retries)
    # AIMD concurrency (shardeval.run.adaptive): halve the window on 429 bursts, grow it back on success;
    # false keeps the fixed max_concurrent window. Transport only: not part of the config hash.
    adaptive: bool = False
    # The body bytes one attempt may receive (SSE framing included); past it the request ends as a
    # `too_large` error, not retried. 64 MiB: about 300,000 streamed tokens of a vLLM chat stream
    # (~220 bytes per token chunk), far above any real max_tokens; per-token logprobs in a stream
    # take ~10x more per token, so raise it for those. Transport only: not part of the config hash.
    max_response_bytes: Count = 64 * 1024 * 1024
    # Stop the shard (failed, exit 1) when its first N requests to this service all end as
    # `connection` errors: the endpoint is down, and asking the rest would only burn the allocation.
    # Once any request got an answer from it (any HTTP reply), connection errors are just records.
    # 0: never stop early. Transport only: not part of the config hash.
    unreachable_after: NonNegativeInt = 8
    # Images (docs/images.md). What the server takes per prompt, as vLLM's --limit-mm-per-prompt
    # (`{image: 4}`): a row with more is refused before any request. Declared for any service; a
    # managed vLLM is also started with it (and then it is part of that service's identity).
    limit_mm_per_prompt: dict[str, NonNegativeInt | dict[str, NonNegativeInt]] | None = None
    # A folder the server reads images from itself (vLLM's --allowed-local-media-path): an image
    # file under it is sent as a file:// URL instead of base64.
    allowed_local_media_path: str | None = None
    # The largest image file a request may carry; a bigger one is refused before any request.
    max_image_bytes: Count = 20 * 1024 * 1024
    # Reasoning models (docs/reasoning.md): the (opening, closing) tags a reply's thinking is
    # written between when the server does not send it in a field of its own; null for a model
    # whose replies are never split inline. Part of the run identity when not the default.
    reasoning_tags: tuple[Tag, Tag] | None = DEFAULT_REASONING_TAGS
    # How much this service's model is asked to think unless a benchmark's generation.reasoning
    # says otherwise (key by key): a sweep over effort levels or budgets is one service per
    # setting. Part of the run identity when set.
    reasoning: ReasoningConfig | None = None

    def reasoning_for(self, asked: ReasoningConfig | None) -> ReasoningConfig | None:
        """The reasoning a request asks of this service: `asked` (a generation's), each key it
        leaves unset taken from the service's own `reasoning`; None when neither sets any."""
        if self.reasoning is None:
            return asked
        if asked is None:
            return self.reasoning
        keys = {f: getattr(asked, f) for f in asked.__struct_fields__ if getattr(asked, f) is not None}
        return msgspec.structs.replace(self.reasoning, **keys)

    def reasoning_request(self, reasoning: ReasoningConfig) -> dict[str, Any]:
        """The request fields that ask this service for `reasoning`, or a UsageError (one line:
        the key, the value, the fix) for a setting it cannot pass. The default speaks vLLM's
        OpenAI-compatible dialect: `enable` as the chat template's `enable_thinking`
        (`chat_template_kwargs`, chat requests only), `effort` as `reasoning_effort` (chat only),
        `budget_tokens` as `thinking_token_budget`. A service plugin overrides it for another."""
        fields: dict[str, Any] = {}
        chat = self.protocol == "chat_completions"
        for key, value in (("enable", reasoning.enable), ("effort", reasoning.effort)):
            if value is not None and not chat:
                raise UsageError(
                    f"reasoning.{key} is {json_value(value)}, which reaches the model through its chat "
                    f"template, but the service uses protocol {self.protocol}; set protocol: chat_completions on it, "
                    f"or leave reasoning.{key} out"
                )
        if reasoning.enable is not None:
            fields["chat_template_kwargs"] = {"enable_thinking": reasoning.enable}
        if reasoning.effort is not None:
            fields["reasoning_effort"] = reasoning.effort
        if reasoning.budget_tokens is not None:
            fields["thinking_token_budget"] = reasoning.budget_tokens
        return fields

    def check(self) -> None:
        """What the types cannot say about this section's own keys, as a UsageError naming the key
        (as it is written under `services.<name>`), the value and the fix. Called when the config is
        read, on the launcher before any shard starts, so a setting the service would refuse at
        start-up is never met by every shard at once (then a PARTIAL report of dashes). What can only
        be known on the node (a directory there, a port free there) is checked when it starts."""

    def identity(self) -> dict[str, Any] | None:
        """The keys that change results (the model, its weights, engine settings that change its
        answers; never ports, hosts, keys or timeouts): they join the config hash, so a resume or
        merge across a change is refused. None, "not declared": every key of the section counts
        (safe, never mixed) and the plugin is named in a warning; see docs/plugins.md."""
        return None

    @classmethod
    def declares_identity(cls) -> bool:
        """Whether this service type says which of its keys change results (overrides `identity()`)."""
        return cls.identity is not ServiceConfig.identity

    def gpus(self) -> int:
        """GPUs one instance of this service needs on its node, so orchestrators can size what a
        shard asks for (CPUs and memory per GPU, /dev/shm). 0: it runs no model here."""
        return 0

    def port_override(self) -> dict[str, Any] | None:
        """Keys that make a managed service bind a free node-local port instead of a fixed one,
        for orchestrators that may put two shards on one node; None when it binds no fixed port."""
        return None

    def managed(self) -> bool:
        """Whether a shard starts this service as a process on its own node (a model server), as
        opposed to reaching one that already runs, so orchestrators can say what a shard starts."""
        return False

    def served_model(self) -> str | None:
        """The model name requests carry, as the config says it (None: it does not): quick mode
        keeps it when `--model-url` turns the service into one that reaches a running server."""
        return None

    def launch_line(self, command: list[str]) -> str:
        """One line for the comments of the scripts an orchestrator writes: what a shard starts
        for this service (its command line, secrets redacted; `command` is how the script runs
        shardeval on the node), or what it reaches instead. Orchestrators never test the type."""
        return "started by its service plugin on the node" if self.managed() else "nothing to start"


class ClusterConfig(_Section):
    """Keys every orchestrator shares; an orchestrator plugin subclasses this with its own keys."""

    type: str = "local"
    shards: Count | None = None

    def runs_in_process(self) -> bool:
        """Whether `shardeval run` with no shard selected evaluates the whole run right here
        instead of handing it to the orchestrator (`local` with no `shards`: its one shard would
        only be a child of this process)."""
        return False

    def shards_read_local_files(self) -> bool:
        """Whether the shards read the files this process sees (their data files): `run` then
        builds and checks every benchmark once before it starts them (shardeval.launch.preflight). False
        by default: a cluster's data may live on its nodes alone, where each shard checks it."""
        return False


class OutputConfig(_Section):
    dir: str = "./eval_results"
    trajectories: bool = True
    progress_interval_s: NonNegativeSeconds = 30.0  # 0: no progress lines
    drain_timeout_s: NonNegativeSeconds = 10.0


# Names a trainer gives a checkpoint while it is still being written (renamed when whole): never a
# checkpoint of a watched sweep, whatever its `ready` rule says (docs/watch.md).
TEMPORARY_NAMES = (".*", "*.tmp", "*.temp", "*.partial", "*.incomplete", "*.part", "*~", "tmp*", "tmp-*")
DEFAULT_QUIET_S = 120.0  # `ready` unset, or neither key given: no file changed for this long


class ReadyConfig(_Section):
    """When `shardeval watch` counts a checkpoint as written (docs/watch.md): the file the trainer
    writes last is there, and/or no file in it changed for `quiet_s`. Neither given: quiet_s 120."""

    marker: Annotated[str, msgspec.Meta(min_length=1)] | None = None  # a path relative to the checkpoint
    quiet_s: NonNegativeSeconds | None = None
    ignore: list[str] = msgspec.field(default_factory=lambda: list(TEMPORARY_NAMES))  # folder names (fnmatch), never checkpoints

    def quiet(self) -> float | None:
        """The quiet time the rule asks for (the default when no key is given)."""
        return DEFAULT_QUIET_S if self.marker is None and self.quiet_s is None else self.quiet_s


class CheckpointsConfig(_Section):
    """Sweep services made from one template: one per model path, so "every checkpoint so far" is
    one line, and a rerun picks up checkpoints written since."""

    template: str | dict[str, Any]  # the name of a service to copy, or a service section
    paths: str | list[str]  # model paths and globs (`/ckpt/step*/`), resolved when the config is read
    key: str = "model"  # the template key that receives each path
    prefix: str = ""  # put before each generated service name (the path's last part)
    ready: ReadyConfig | None = None  # `shardeval watch`: when a checkpoint is whole (None: ReadyConfig())

    def ready_rule(self) -> ReadyConfig:
        return self.ready if self.ready is not None else ReadyConfig()


class UntilConfig(_Section):
    """When a watch ends by itself: after this checkpoint is evaluated, or after this long with
    no new checkpoint and nothing running (whichever comes first)."""

    checkpoint: Annotated[str, msgspec.Meta(min_length=1)] | None = None  # a generated service name (`step10000`)
    idle_s: Seconds | None = None


class WatchConfig(_Section):
    """`shardeval watch` (docs/watch.md): how often it looks for checkpoints, when it stops, and
    what it does with the rows of a checkpoint the trainer deleted."""

    poll_s: Seconds = 60.0
    until: UntilConfig | None = None
    keep_results_of_deleted: bool = True  # a keep-last-k trainer does not erase the rows of the ones it deleted
    retries: NonNegativeInt = 2  # a checkpoint whose launch failed (exit 1) is launched again at most this often
    # Launches running at once. None: one when the orchestrator runs the cells itself (local, ray:
    # two checkpoints' servers on one machine would share its GPUs), no limit when it submits them
    # to a scheduler that queues them (slurm).
    parallel: Count | None = None


class SweepConfig(_Section):
    """Evaluate every benchmark without a `solver.service` against each of these models, each as
    an ordinary run in <out>/<service>/, and compare each against the baseline."""

    services: list[str] = []  # service names, in table order; generated checkpoints follow
    checkpoints: CheckpointsConfig | None = None
    baseline: str | None = None  # default: the first service of the sweep
    watch: WatchConfig | None = None  # `shardeval watch`'s keys (None: WatchConfig())
    gate: GateRule | None = None  # each model GO / NO-GO / INCONCLUSIVE against the baseline (docs/decisions.md)


class CacheConfig(_Section):
    """The response cache (shardeval.run.response_cache, docs/cache.md): where its segments live, usually a
    shared filesystem path. Not part of the run's identity: a cache changes where an answer comes
    from, never what it is."""

    dir: Annotated[str, msgspec.Meta(min_length=1)]


class PrepareConfig(_Section):
    """`shardeval prepare` (docs/offline.md): where what the run fetches from outside goes. Not part
    of the config hash: where data is kept does not change it (its checksums are checked)."""

    cache_dir: Annotated[str, msgspec.Meta(min_length=1)] | None = None  # default: <out>/prepared/cache


class ExportConfig(_Section):
    """One `export:` target (docs/export.md): `to` names a registered exporter (mlflow, wandb,
    inspect, ...), whose plugin subclasses this with its own keys. Run by the merge at the end of a
    launch; never part of the config hash (where results go does not change them)."""

    to: str

    def check(self) -> None:
        """What the target can check before any merge (its library installed, a store it can open),
        raising UsageError; called by a launch's preflight, before any shard starts, and by
        `export --to` before it merges. By default nothing."""


class RawConfig(_Section):
    """The file as written: plugin-owned sections still undecoded."""

    services: dict[str, dict[str, Any]] = {}
    benchmarks: list[BenchmarkConfig] = []
    cluster: dict[str, Any] = {}
    output: OutputConfig = msgspec.field(default_factory=OutputConfig)
    seed: int = 0
    shuffle_seed: int | None = None
    sweep: SweepConfig | None = None
    cache: CacheConfig | None = None
    export: list[dict[str, Any]] = []
    prepare: PrepareConfig | None = None


class Config(msgspec.Struct, kw_only=True):
    """The validated config: every section decoded with its plugin's Struct."""

    services: dict[str, ServiceConfig]
    benchmarks: list[BenchmarkConfig]
    cluster: ClusterConfig
    output: OutputConfig
    seed: int = 0
    shuffle_seed: int | None = None
    sweep: SweepConfig | None = None  # set: the config stands for one run per sweep service
    cache: CacheConfig | None = None  # the response cache; None: off (never part of the config hash)
    export: list[ExportConfig] = []  # trackers the end-of-launch merge exports to (never part of the config hash)
    prepare: PrepareConfig | None = None  # where `shardeval prepare` keeps what it fetched (never part of the config hash)

    def service_of(self, solver: SolverConfig) -> ServiceConfig | None:
        """The service `solver` asks; None when it names none (in a sweep's config, a benchmark asks
        each model: shardeval.config.sweep names it in each model's config) or one not defined."""
        return None if solver.service is None else self.services.get(solver.service)

    def used_services(self) -> dict[str, ServiceConfig]:
        """The services a shard starts: those the benchmarks' solvers use, in first-use order (in
        a sweep, those of any of its runs: a benchmark without a service uses every sweep model),
        then their judges."""
        sweep = self.sweep.services if self.sweep is not None else []
        names = dict.fromkeys(n for b in self.benchmarks for n in ([b.solver.service] if b.solver.service else sweep))
        names.update(dict.fromkeys(b.judge.service for b in self.benchmarks if b.judge is not None))  # judges after models
        return {name: self.services[name] for name in names if name in self.services}
