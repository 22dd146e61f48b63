"""One shard, and re-scoring shards: the runner, the client, solvers, the judge step, the response cache, services."""
