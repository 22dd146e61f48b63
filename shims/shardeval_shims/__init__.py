"""Small stdlib-only adapters that let the one-file app run anywhere.

A shiv zipapp carries compiled extensions built for one platform; on a node where one of them
cannot load (another CPU architecture, an older glibc), the adapter here stands in for it with
the same behaviour, so an evaluation still runs and writes the same bytes.
"""
