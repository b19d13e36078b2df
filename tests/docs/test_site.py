"""The documentation site builds in strict mode: a broken link, a reference mkdocstrings cannot resolve or a
docstring it cannot parse fails the build (the test extra installs MkDocs; without it this fails)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from tests.docs.blocks import ROOT


def test_site_builds_strictly(tmp_path):
    assert importlib.util.find_spec("mkdocs") is not None, "MkDocs is missing: pip install -e '.[test]' installs it"
    site = tmp_path / "site"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("pterun run", "pterun inspect", "pterun bench", "pterun generate"):
        assert command in cli, f"the generated CLI reference lacks {command}"
    errors = (site / "reference" / "errors" / "index.html").read_text()
    assert "DelegateInvalidHandle" in errors and "0x32" in errors, "the table of error codes is missing"
