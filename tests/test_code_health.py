"""ruff on src/, tests/, bench/ and scripts/, and mypy on src/, with their settings in pyproject.toml (the
pre-commit hooks run the same)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # tens of seconds: such files run first (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    # The test extra installs both tools: a missing one fails here ("No module named ...").
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True)


LINTED = ("src", "tests", "bench", "scripts")


def test_ruff_finds_nothing():
    assert all((ROOT / folder).is_dir() for folder in LINTED), "a linted folder is gone: no premise"
    result = _run("ruff", "check", *LINTED)
    assert result.returncode == 0, result.stdout + result.stderr + "\n(`ruff check --fix` mends import order)"


def test_mypy_finds_nothing_in_src():
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
    checked = re.search(r"no issues found in (\d+) source files", result.stdout)
    assert checked and int(checked[1]) > 100, result.stdout  # the premise: it read all of src/pterun


def test_every_test_folder_is_a_package():
    """pytest puts a test folder without ``__init__.py`` at the front of ``sys.path``, and then its modules hide
    installed packages of the same name for the whole worker: tests/backends/webgpu/kernels.py once hid the
    ``kernels`` package transformers imports, and every transformers model in that worker failed to build."""
    folders = {path.parent for path in (ROOT / "tests").rglob("*.py")}
    assert ROOT / "tests" / "backends" / "webgpu" in folders, "premise: the test tree is where it was"
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert not missing, f"test folders that are no package: {missing}"
