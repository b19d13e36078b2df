"""`pterun --version` and `pterun.__version__` say the one version: the package metadata's, else pyproject.toml's."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from typer.testing import CliRunner

import pterun
from pterun import version
from pterun.cli.main import app

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_version_is_the_installed_metadata():
    installed = metadata.version("pterun")  # premise: the test extra installs pterun, so it has metadata
    assert pterun.__version__ == installed
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"pterun {installed}\n"


def test_a_source_tree_without_metadata_reads_pyproject(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert version._version() == tomllib.loads(PYPROJECT.read_text())["project"]["version"]
