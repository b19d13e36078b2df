"""Which outputs match a bundled expected output: pterun decides as ExecuTorch's runtime does.

A program of one method per dtype returns its input unchanged, so each test case's input is the output
both runtimes compare with the case's expected value. Every (expected, output) pair below is one test
case, checked under several tolerances on both runtimes: pass or fail must agree, including ExecuTorch's
corners (NaN matches NaN, and also an infinity of the sign a NaN compares as; the tolerance scales with
the output, not the expected value; BFloat16 compared bit for bit; rtol = atol = 0 asks for equality).
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("executorch.devtools.bundled_program.core")

from pterun import pybindings  # noqa: E402
from pterun.errors import NotFound  # noqa: E402
from tests.support import bundling  # noqa: E402
from tests.support.exporting import ExportSpec, export_program  # noqa: E402
from tests.support.oracle import _runtime  # noqa: E402

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}
NAN, INF = math.nan, math.inf
PAIRS = [  # (expected, output)
    (1.0, 1.0), (1.0, 1.0 + 2e-6), (1.0, 1.001), (0.0, 1e-9), (0.0, 1e-6), (100.0, 100.0005), (100.0, 100.01),
    (-3.0, -3.0001), (NAN, NAN), (NAN, 1.0), (1.0, NAN), (INF, INF), (-INF, -INF), (INF, -INF), (-INF, NAN),
    (NAN, -INF), (INF, NAN), (INF, 1e4), (0.5, 0.5078125), (2.0, 2.0009765625), (1.0, 2.0), (-1.0, -0.6),
]
TOLERANCES = [(1e-5, 1e-8), (0.0, 0.0), (1e-2, 0.0), (0.0, 0.05), (0.5, 0.0)]


class Identity(torch.nn.Module):
    def forward(self, x):
        return (x * 1,)


@pytest.fixture(scope="module")
def bundle():
    def build() -> ExportSpec:
        return ExportSpec({name: Identity() for name in DTYPES}, {name: (torch.ones(1, dtype=d),)
                                                                   for name, d in DTYPES.items()})

    exported = export_program("bundled-identity-per-dtype", build)
    cases = {name: [((torch.tensor([out], dtype=d),), [torch.tensor([exp], dtype=d)]) for exp, out in PAIRS]
             for name, d in DTYPES.items()}
    return bundling.bundle(exported.pte, cases)


def _passes(module, method: str, index: int, rtol: float, atol: float) -> bool:
    try:
        module.verify_result_with_bundled_expected_output(method, index, rtol, atol)
    except RuntimeError as error:
        assert isinstance(error, NotFound) or "status 32" in str(error), error
        return False
    return True


def test_pass_or_fail_agrees_with_executorch_for_every_pair_dtype_and_tolerance(bundle):
    ours = pybindings._load_bundled_program_from_buffer(bundle)
    theirs = _runtime()._load_bundled_program_from_buffer(bundle)
    disagreements, verdicts = [], set()
    for method in DTYPES:
        # Premise: the method returns its input, so the output compared is the case's input.
        assert torch.equal(ours.verify_result_with_bundled_expected_output(method, 0)[0],
                           torch.ones(1, dtype=DTYPES[method]))
        for index, pair in enumerate(PAIRS):
            for rtol, atol in TOLERANCES:
                verdict = _passes(theirs, method, index, rtol, atol)
                verdicts.add(verdict)
                if _passes(ours, method, index, rtol, atol) != verdict:
                    disagreements.append((method, pair, rtol, atol, "ExecuTorch: " + ("pass" if verdict else "fail")))
    assert verdicts == {True, False}
    assert not disagreements, disagreements


def test_a_tensor_of_another_dtype_or_size_never_matches(bundle):
    exported = export_program("bundled-identity-per-dtype", None)
    x = torch.ones(1)
    data = bundling.bundle(exported.pte, {"f32": [((x,), [x.double()]), ((x,), [torch.ones(2)]), ((x,), [x])]})
    ours = pybindings._load_bundled_program_from_buffer(data)
    theirs = _runtime()._load_bundled_program_from_buffer(data)
    for index, message in ((0, "dtype is float32; expected Double"), (1, r"sizes are \[1\]; expected \[2\]")):
        assert not _passes(theirs, "f32", index, 1.0, 1.0)
        expected = f"test case {index}: output 0 does not match the expected output: {message}"
        with pytest.raises(NotFound, match=expected):
            ours.verify_result_with_bundled_expected_output("f32", index, 1.0, 1.0)
    assert _passes(ours, "f32", 2, 0.0, 0.0) and _passes(theirs, "f32", 2, 0.0, 0.0)
