"""`shardeval watch`: a sweep driven by a training run's checkpoints as they appear (docs/watch.md).

readiness: when a checkpoint folder is whole; launcher: one checkpoint's cells launched, and how
they ended; watcher: the loop (poll, launch, collect, merge), its state in shardeval.store.watch_state.
"""
