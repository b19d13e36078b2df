"""The `pterun` command line. Uses the public API only."""
