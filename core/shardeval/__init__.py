"""shardeval: sharded LLM evaluation. Kept import-free so `--version` stays fast."""

__version__ = "0.1.0"
