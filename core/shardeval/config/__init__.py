"""The evaluation config's schema: every section as a msgspec Struct (shardeval.config.schema),
re-exported here so a module says `from shardeval.config import Config`.

Reading and loading a config are their own modules: config.loading (load_config: YAML to a
validated Config), config.reading (${VAR}, -O overrides), config.quick (the `run` flags),
config.sweep and config.sampling (the rules a loaded config is completed with).
"""

from shardeval.config.schema import (  # noqa: F401 - the face of the package
    BenchmarkConfig,
    CacheConfig,
    DEFAULT_REASONING_TAGS,
    CheckpointsConfig,
    ClusterConfig,
    Config,
    Count,
    ExportConfig,
    Generation,
    JudgeConfig,
    NonNegativeFloat,
    NonNegativeInt,
    NonNegativeSeconds,
    OutputConfig,
    Probability,
    Protocol,
    RawConfig,
    ReasoningConfig,
    Retries,
    Seconds,
    ServiceConfig,
    SolverConfig,
    SweepConfig,
    Timeouts,
)
