"""The package version, importable from any layer."""

VERSION = "0.1.0"  # as pyproject.toml
