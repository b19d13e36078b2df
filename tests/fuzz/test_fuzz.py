"""A fixed fuzzing budget for CI: random programs of fixed seeds, exported portable and lowered to XNNPACK,
must agree between pterun and ExecuTorch's runtime (scripts/fuzz.py runs longer campaigns).

The seeds were picked from a campaign so that, together, they cover dynamic dims,
mutable buffers, in-place writes, views, several outputs and every dtype; each
exports (a discard would leave its slot untested, so it fails the test).
"""

from __future__ import annotations

import pytest

from tests.fuzz.generator import generate
from tests.fuzz.runner import AGREE, DISCARD, run
from tests.fuzz.seeds import CI_PORTABLE, CI_XNNPACK

CASES = [("portable", s) for s in CI_PORTABLE] + [("xnnpack", s) for s in CI_XNNPACK]


@pytest.mark.parametrize(("lowering", "seed"), CASES, ids=[f"{lo}-{s}" for lo, s in CASES])
def test_fuzz_program_agrees_with_executorch(lowering, seed):
    spec = generate(seed)
    outcome = run(spec, lowering)
    assert outcome.status != DISCARD, f"seed {seed} no longer exports: {outcome.detail}"
    assert outcome.status == AGREE, f"{outcome.key}: {outcome.detail} {outcome.notes}\n{spec.describe()}"
