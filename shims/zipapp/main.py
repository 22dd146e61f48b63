# The zipapp's __main__.py. It must parse on any Python a node might have (2.7 included), so it
# only checks the version and hands over; everything else lives in _shardeval_entry.py.
import sys

if sys.version_info < (3, 10):
    sys.stderr.write(
        "shardeval: error: needs Python >= 3.10, but %s is Python %d.%d; run the file with "
        "python3.10 or newer (e.g. `python3.11 %s ...`), or run it directly (`./%s`) so its "
        "launcher picks one\n"
        % (sys.executable or "this interpreter", sys.version_info[0], sys.version_info[1], sys.argv[0], sys.argv[0].rsplit("/", 1)[-1])
    )
    sys.exit(2)

import _shardeval_entry

_shardeval_entry.main()
