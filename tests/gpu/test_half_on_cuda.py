"""Half-precision programs (float16 and bfloat16) run on CUDA: normalization statistics, which ExecuTorch
types as the input and PyTorch's CUDA kernels want in float32, included."""

from __future__ import annotations

import pytest
import torch

import pterun
from tests.gpu.conftest import fixture_params, load_fixture, on

pytestmark = pytest.mark.gpu


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    # Whole models in half precision: kernels that sum in other orders drift by some units of the
    # dtype's epsilon relative to the output's scale.
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    if not expected.is_floating_point():
        assert torch.equal(actual, expected), what
        return
    a, e = actual.double(), expected.double()
    assert torch.equal(torch.isnan(a), torch.isnan(e)), f"{what}: NaNs differ"
    finite = ~torch.isnan(e)
    scale = max(1.0, e[finite].abs().max().item() if finite.any() else 0.0)
    bound = 64 * torch.finfo(expected.dtype).eps * scale
    diff = (a[finite] - e[finite]).abs().max().item() if finite.any() else 0.0
    assert diff <= bound, f"{what}: max abs diff {diff:.3g} > {bound:.3g}"


@pytest.mark.parametrize("directory", fixture_params("half"))
def test_half_precision_program_runs_on_cuda(directory):
    pte, ptd, calls, expected = load_fixture(directory)
    method = pterun.Runtime.get().load_program(pte, data_path=ptd or None, device="cuda").load_method("forward")
    assert any(isinstance(o, torch.Tensor) and o.dtype in (torch.float16, torch.bfloat16)
               for o in expected[0]), "premise: a half-precision program"
    for _ in range(3):  # eager, capture, replay
        for call, reference in zip(calls, expected):
            outputs = on("cpu", method.execute(on("cuda", call)))
            for i, (got, want) in enumerate(zip(outputs, reference)):
                if isinstance(want, torch.Tensor):
                    _close(got, want, f"{directory.name}[{i}]")
