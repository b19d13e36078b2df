"""How closely pterun must match ExecuTorch.

Floating point: the largest absolute difference at most ``rtol * max(1, max|ref|)``
(1e-5 for float32; ExecuTorch's portable kernels and PyTorch's sum in
different orders). bf16 and fp16 are compared in units of their last place.
Integers and bools: exactly.
"""

from __future__ import annotations

import torch

FLOAT_RTOL = 1e-5


def assert_matches(actual, expected, *, rtol: float = FLOAT_RTOL, ulps: int = 1, what: str = "output") -> None:
    if isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), (
            f"{what}: expected {len(expected)} values, got {actual!r}"
        )
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_matches(a, e, rtol=rtol, ulps=ulps, what=f"{what}[{i}]")
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, f"{what}: expected {expected!r}, got {actual!r}"
        return
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual).__name__}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, expected {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    actual, expected = actual.cpu(), expected.cpu()
    if not expected.is_floating_point():
        assert torch.equal(actual, expected), f"{what}: integer values differ"
        return
    if expected.numel() == 0:
        return
    nan = torch.isnan(expected)
    assert torch.equal(nan, torch.isnan(actual)), f"{what}: NaNs differ"
    # Infinities must be the same infinities, in the same places; the rest is compared by value.
    inf = torch.isinf(expected)
    assert torch.equal(inf, torch.isinf(actual)) and torch.equal(actual[inf], expected[inf]), (
        f"{what}: infinities differ"
    )
    finite = ~(nan | inf)
    a, e = actual[finite].double(), expected[finite].double()
    if expected.dtype in (torch.bfloat16, torch.float16):
        step = torch.finfo(expected.dtype).eps * e.abs().clamp_min(torch.finfo(expected.dtype).tiny)
        worst = ((a - e).abs() / step).max().item() if a.numel() else 0.0
        assert worst <= 2.0 * ulps, f"{what}: off by {worst:.1f} units in the last place"
        return
    scale = max(1.0, e.abs().max().item() if e.numel() else 0.0)
    diff = (a - e).abs().max().item() if a.numel() else 0.0
    assert diff <= rtol * scale, f"{what}: max abs diff {diff:.3g} > {rtol:g} * {scale:.3g}"


def same_bits(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """float32 tensors equal bit for bit (signs of zero included) where a number, NaN where NaN (which NaN the
    hardware makes varies)."""
    nan = expected.isnan()
    return bool(torch.equal(actual.isnan(), nan) and torch.equal(
        actual[~nan].view(torch.int32), expected[~nan].view(torch.int32)))
