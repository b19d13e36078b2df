"""The package version, importable from any layer: one fact, kept in pyproject.toml.

An installed pterun (a wheel, or ``pip install -e``) reads it from its distribution's metadata; a source
tree put on ``sys.path`` without being installed reads it from the pyproject.toml beside ``src/``.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path


def _from_source_tree() -> str:
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text())["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"
    return project["version"] if project.get("name") == "pterun" else "0+unknown"


def _version() -> str:
    try:
        return metadata.version("pterun")
    except metadata.PackageNotFoundError:
        return _from_source_tree()


VERSION = _version()
