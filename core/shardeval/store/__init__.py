"""The on-disk format, read and written: records, standing, discovery, heartbeats, shards, seeds. Imports nothing above it."""
