"""Programs that ship with pterun (made by scripts/make-example.py)."""
