"""`python -m shardeval` is the same program as the `shardeval` command."""

from shardeval.cli import main

if __name__ == "__main__":
    main()
