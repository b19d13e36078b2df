"""A test of an optional extra (``@pytest.mark.needs_package``) skips where the extra is missing, in one line,
even under --no-skips, which fails every other skip (the GPU suite runs with it: tests/gpu/test_ray_on_cuda.py
cannot run on the GPU machine, whose Python cannot hold Ray)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_missing_extra_skips_and_any_other_skip_fails_under_no_skips(tmp_path):
    (tmp_path / "test_extras.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.needs_package("no_such_extra.sub", "needs the no-such extra, which this machine does not have")
        def test_of_an_extra():
            raise AssertionError("runs only where the extra is installed")

        def test_that_skips():
            pytest.skip("for no declared reason")
    """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                             "--no-skips", "-rfs", "-q", str(tmp_path / "test_extras.py")],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    lines = result.stdout.splitlines()
    skipped = [line for line in lines if line.startswith("SKIPPED")]
    assert len(skipped) == 1 and "needs the no-such extra" in skipped[0], result.stdout
    failed = [line for line in lines if line.startswith("FAILED")]
    assert "1 failed, 1 skipped" in result.stdout and len(failed) == 1 and "test_that_skips" in failed[0], result.stdout
