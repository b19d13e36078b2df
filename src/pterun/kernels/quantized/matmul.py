"""mixed_mm, mixed_linear: float activations times scaled int8 weights, summed in ExecuTorch's order."""

from __future__ import annotations

from collections.abc import Callable

import torch

from pterun.errors import InvalidArgument
from pterun.kernels.python_kernels import F32, KernelTable, resize

KERNELS = KernelTable()


def _sequential_half_dot(terms: Callable[[int], torch.Tensor], count: int, shape, device) -> torch.Tensor:
    # Half arithmetic rounds after every operation; summing term by term keeps that rounding.
    total = torch.zeros(shape, dtype=torch.float16, device=device)
    for k in range(count):
        total = total + terms(k)
    return total


def _check_weight(weight, weight_zero_points, what):
    if weight.dtype != torch.int8:
        raise InvalidArgument(f"{what}: weight must be int8")
    if weight_zero_points is not None:
        raise InvalidArgument(f"{what}: zero points are not supported")


@KERNELS.kernel(
    "quantized_decomposed::mixed_mm.out(Tensor input, Tensor weight, Tensor weight_scales, "
    "Tensor? weight_zero_points, *, Tensor(a!) out) -> Tensor(a!)")
def mixed_mm(input, weight, weight_scales, weight_zero_points, out):
    what = "mixed_mm"
    if input.dim() != 2 or weight.dim() != 2 or weight_scales.dim() != 1:
        raise InvalidArgument(f"{what}: input and weight must be 2-d and weight_scales 1-d")
    if input.shape[1] != weight.shape[0] or weight_scales.shape[0] != weight.shape[0]:
        raise InvalidArgument(f"{what}: shapes {tuple(input.shape)}, {tuple(weight.shape)} do not multiply")
    if not input.dtype == weight_scales.dtype == out.dtype or input.dtype not in (F32, torch.float16):
        raise InvalidArgument(f"{what}: input, weight_scales and out must all be float or all half")
    _check_weight(weight, weight_zero_points, what)
    resize(out, (input.shape[0], weight.shape[1]))
    if input.dtype == torch.float16:
        w = weight.to(torch.float16)
        out.copy_(_sequential_half_dot(
            lambda k: (input[:, k:k + 1] * w[k]) * weight_scales[k], input.shape[1], out.shape, out.device))
    else:
        out.copy_(input @ (weight.to(F32) * weight_scales[:, None]))
    return out


@KERNELS.kernel(
    "quantized_decomposed::mixed_linear.out(Tensor input, Tensor weight, Tensor weight_scales, "
    "Tensor? weight_zero_points, ScalarType? dtype=None, *, Tensor(a!) out) -> Tensor(a!)")
def mixed_linear(input, weight, weight_scales, weight_zero_points, dtype, out):
    what = "mixed_linear"
    if input.dim() != 2 or weight.dim() != 2 or weight_scales.dim() not in (1, 2):
        raise InvalidArgument(f"{what}: input and weight must be 2-d and weight_scales 1-d or 2-d")
    if input.shape[1] != weight.shape[1] or weight_scales.shape[0] != weight.shape[0]:
        raise InvalidArgument(f"{what}: shapes {tuple(input.shape)}, {tuple(weight.shape)} do not match")
    if input.dtype != weight_scales.dtype or input.dtype not in (torch.float32, torch.float16):
        raise InvalidArgument(f"{what}: input and weight_scales must both be float or both half")
    if dtype is not None and (out.dtype != dtype or dtype not in (torch.float32, torch.float16)):
        raise InvalidArgument(f"{what}: dtype must be float or half and match out")
    _check_weight(weight, weight_zero_points, what)
    n = input.shape[1]
    group = n if weight_scales.dim() == 1 else -(-n // weight_scales.shape[1])
    scales = weight_scales.reshape(weight.shape[0], -1)
    resize(out, (input.shape[0], weight.shape[0]))
    acc = out.dtype  # ExecuTorch accumulates in the output type
    if input.dtype == F32 and acc == F32:
        total = torch.zeros(out.shape, dtype=F32, device=out.device)
        w = weight.to(F32)
        for g, k in enumerate(range(0, n, group)):
            total += (input[:, k:k + group] @ w[:, k:k + group].T) * scales[:, g]
        out.copy_(total)
        return out
    # Half somewhere: products round to the input type, sums to the output type, term by term.
    w = weight.to(input.dtype)
    total = torch.zeros(out.shape, dtype=acc, device=out.device)
    for g, k in enumerate(range(0, n, group)):
        partial = torch.zeros(out.shape, dtype=acc, device=out.device)
        for j in range(k, min(k + group, n)):
            partial = (partial.to(F32) + (input[:, j:j + 1] * w[:, j]).to(F32)).to(acc)
        scaled = partial.to(F32) * scales[:, g].to(F32)
        if acc == torch.float16 and scales.dtype == torch.float16:
            scaled = scaled.to(torch.float16).to(F32)
        total = (total.to(F32) + scaled).to(acc)
    out.copy_(total)
    return out
