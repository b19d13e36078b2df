"""Shrunk programs the fuzzer once failed on (tests/fuzz/regressions/*.json), replayed.

A ``fixed`` spec must agree with ExecuTorch; an ``open`` one is a known pterun bug,
an expected failure that fails the suite once fixed (then mark it fixed); an
``executorch`` one is ExecuTorch's own bug, where pterun must still agree with
eager PyTorch.
"""

from __future__ import annotations

import pytest

from tests.fuzz import regression
from tests.fuzz.runner import AGREE, EXECUTORCH, run


def _params():
    for path in regression.all_files():
        data, _ = regression.load(path)
        marks = [pytest.mark.xfail(strict=True, reason=data["reason"])] if data["status"] == "open" else []
        yield pytest.param(path, id=path.stem, marks=marks)


@pytest.mark.parametrize("path", list(_params()))
def test_regression_spec(path):
    data, spec = regression.load(path)
    assert data["status"] in ("fixed", "open", "executorch"), (
        f"{path.name}: unknown status {data['status']!r}"
    )
    outcome = run(spec, data["lowering"])
    verdict = f"{outcome.key}: {outcome.detail}\n{spec.describe()}"
    if data["status"] == "executorch":
        assert outcome.status == EXECUTORCH and outcome.key == data["found"], verdict
    else:
        assert outcome.status == AGREE, verdict
