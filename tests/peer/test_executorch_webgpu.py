"""ExecuTorch's own WebGPU backend tests, with every program they lower run on pterun's WebGPU backend.

The tests ship in ExecuTorch's wheel (``executorch/backends/webgpu/test``);
tests/peer/webgpu/harness.py says how each is run and judged. By default a
fixed fast subset runs (collect.py); ``scripts/webgpu-suite.sh`` runs all of
them. Tests that still fail are listed with their reasons in known.py, and are
expected to fail (strictly: one that starts passing fails until it is taken
off the list); the programs they do lower are still run and judged.
"""

from __future__ import annotations

import pytest

pytest.importorskip("executorch.backends.webgpu.test.op_tests.cases")

from tests.backends.webgpu.adapter import needs_adapter, webgpu_adapter  # noqa: E402, F401 - the fixture behind needs_adapter
from tests.peer.webgpu import collect, harness, known  # noqa: E402

pytestmark = [needs_adapter]


def _expected(case_id: str) -> list:
    reason = known.FAILURES.get(case_id)
    return [pytest.mark.xfail(reason=reason, strict=True)] if reason else []


def _op_cases() -> list:
    cases = [c for c in harness.op_cases() if collect.ALL or c.id in collect.FAST_CASES]
    assert collect.ALL or {c.id for c in cases} == collect.FAST_CASES, (
        f"premise: the fast subset names cases op_tests has "
        f"(missing: {sorted(collect.FAST_CASES - {c.id for c in cases})})"
    )
    return [pytest.param(c, id=c.id, marks=_expected(c.id)) for c in cases]


@pytest.mark.parametrize("op_case", _op_cases())
def test_op_case(op_case):
    harness.run_op_case(op_case)


def _on_pterun_classes() -> dict[str, type]:
    """Each upstream unittest case with its chosen tests, each wrapped to run what it lowers on pterun."""
    selected = [t for t in collect.ops_tests() if collect.ALL or t.id in collect.FAST_TESTS]
    assert collect.ALL or {t.id for t in selected} == collect.FAST_TESTS, (
        f"premise: the fast subset names tests ops/ has "
        f"(missing: {sorted(collect.FAST_TESTS - {t.id for t in selected})})"
    )
    methods: dict[tuple[str, type], dict] = {}
    for t in selected:
        test = harness.on_pterun(getattr(t.cls, t.method), known.FAILURES.get(t.id))
        methods.setdefault((t.module, t.cls), {})[t.method] = test
    classes = {}
    for (module, cls), tests in methods.items():
        name = f"Test_{module.replace('.', '_')}_{cls.__name__}"
        classes[name] = type(name, (cls,), tests)
    return classes


globals().update(_on_pterun_classes())
