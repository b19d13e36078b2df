"""Inputs and comparisons the llama:: kernel tests share.

Attention in half and bfloat16 rounds float32 probabilities to the activation
type; ExecuTorch's float32 scores come from its own matmul's summation order,
so a probability can round the other way and move an output by a unit of the
largest output's last place. Those comparisons use a bound scaled by the
output's magnitude rather than by each element's.
"""

from __future__ import annotations

import executorch.kernels.quantized  # noqa: F401 - quantized_decomposed:: out variants
import torch

qd = torch.ops.quantized_decomposed


def assert_close_to_scale(actual: torch.Tensor, expected: torch.Tensor, units: float = 2.0) -> None:
    """Within ``units`` last-place units of the largest expected magnitude (for reduced precision)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    eps = torch.finfo(expected.dtype).eps
    scale = max(1.0, expected.abs().max().item())
    diff = (actual.double() - expected.double()).abs().max().item()
    assert diff <= units * eps * scale, f"max abs diff {diff:.3g} > {units} * {eps:.3g} * {scale:.3g}"


def random(shape, seed, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def per_token_int8(x: torch.Tensor):
    scale, zero_point = qd.choose_qparams_per_token_asymmetric.default(x, torch.int8)
    q = qd.quantize_per_token(x, scale, zero_point, -128, 127, torch.int8)
    return q, zero_point.to(torch.int8), scale.to(torch.float32)
