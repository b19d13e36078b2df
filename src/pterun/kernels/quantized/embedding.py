"""embedding_byte, embedding_2bit, embedding_4bit: rows of a quantized table, dequantized per group."""

from __future__ import annotations

from collections.abc import Callable

import torch

from pterun.errors import InvalidArgument
from pterun.kernels.python_kernels import F32, KernelTable, resize


def _check_embedding(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices,
                     out_dtype, out, what, embedding_dim, weight_types, index_types):
    if weight.dim() != 2:
        raise InvalidArgument(f"{what}: weight must be 2-d, not {weight.dim()}-d")
    if weight.dtype not in weight_types:
        raise InvalidArgument(f"{what}: weight dtype {weight.dtype} is not supported")
    if weight_scales.dim() not in (1, 2) or weight_scales.shape[0] != weight.shape[0]:
        raise InvalidArgument(f"{what}: weight_scales must be 1-d or 2-d with one row per embedding")
    if weight_scales.dim() == 2 and embedding_dim % weight_scales.shape[1]:
        raise InvalidArgument(f"{what}: {weight_scales.shape[1]} groups cannot split {embedding_dim} columns")
    floats = (torch.float32, torch.float16, torch.bfloat16)
    if out.dtype not in floats or weight_scales.dtype not in floats:
        raise InvalidArgument(f"{what}: out and weight_scales must be float, half or bfloat16")
    if weight_zero_points is not None:
        if weight_zero_points.shape != weight_scales.shape or weight_zero_points.dtype != out.dtype:
            raise InvalidArgument(f"{what}: weight_zero_points must have weight_scales' shape, out's dtype")
    if indices.dtype not in index_types:
        raise InvalidArgument(f"{what}: indices must be {' or '.join(str(t) for t in index_types)}")
    if weight_quant_min > weight_quant_max:
        raise InvalidArgument(f"{what}: quant_min {weight_quant_min} exceeds quant_max {weight_quant_max}")
    if out_dtype is not None and out.dtype != out_dtype:
        raise InvalidArgument(f"{what}: out is {out.dtype} but dtype is {out_dtype}")
    if indices.numel():
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= weight.shape[0]:
            bad = lo if lo < 0 else hi
            raise InvalidArgument(f"{what}: index {bad} is out of range for {weight.shape[0]} rows")


def _unpack(weight: torch.Tensor, bits: int) -> torch.Tensor:
    """Sub-byte codes as signed ints. 4-bit: high nibble first; 2-bit: lowest bits first."""
    if bits == 8:
        return weight.to(torch.int32)
    w = weight.to(torch.int32)
    if bits == 4:
        parts = [(w >> 4) & 0xF, w & 0xF]
    else:
        parts = [(w >> shift) & 0x3 for shift in (0, 2, 4, 6)]
    return torch.stack(parts, dim=-1).reshape(weight.shape[0], -1) - (1 << (bits - 1))


def _embedding(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices,
               out_dtype, out, bits, what):
    per_byte = 8 // bits
    embedding_dim = weight.shape[1] * per_byte if weight.dim() == 2 else 0
    weight_types = (torch.uint8, torch.int8) if bits == 8 else (torch.uint8,)
    index_types = (torch.int64,) if bits == 8 else (torch.int64, torch.int32)
    resize(out, (*indices.shape, embedding_dim))
    _check_embedding(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices,
                     out_dtype, out, what, embedding_dim, weight_types, index_types)
    flat = indices.reshape(-1).to(torch.int64)
    codes = _unpack(weight.index_select(0, flat), bits).to(F32)
    groups = weight_scales.shape[1] if weight_scales.dim() == 2 else 1
    group_size = embedding_dim // groups

    def per_column(params: torch.Tensor) -> torch.Tensor:
        rows = params.index_select(0, flat).reshape(flat.numel(), groups).to(F32)
        return rows.repeat_interleave(group_size, dim=1)

    if weight_zero_points is not None:
        codes = codes - per_column(weight_zero_points)
    out.copy_((codes * per_column(weight_scales)).reshape(out.shape))
    return out


def embedding_kernel(bits: int, with_dtype: bool) -> Callable:
    """The kernel of embedding_byte (8 bits), embedding_4bit or embedding_2bit (with_dtype: its dtype_out)."""
    name = {8: "embedding_byte", 4: "embedding_4bit", 2: "embedding_2bit"}[bits]

    if with_dtype:
        def kernel(weight, weight_scales, weight_zero_points, quant_min, quant_max, indices, dtype, out):
            return _embedding(weight, weight_scales, weight_zero_points, quant_min, quant_max, indices, dtype,
                              out, bits, name)
    else:
        def kernel(weight, weight_scales, weight_zero_points, quant_min, quant_max, indices, out):  # type: ignore[misc]
            return _embedding(weight, weight_scales, weight_zero_points, quant_min, quant_max, indices, None,
                              out, bits, name)
    return kernel


def _schema(overload: str, before_out: str) -> str:
    return (f"quantized_decomposed::{overload}(Tensor weight, Tensor weight_scales, "
            "Tensor? weight_zero_points, int weight_quant_min, int weight_quant_max, Tensor indices, "
            f"{before_out}, Tensor(a!) out) -> Tensor(a!)")


# As in ExecuTorch's schemas, the byte variant takes dtype as a keyword, the 2- and 4-bit ones positionally.
KERNELS = KernelTable([
    (embedding_kernel(8, False), _schema("embedding_byte.out", "*")),
    (embedding_kernel(8, True), _schema("embedding_byte.dtype_out", "*, ScalarType? dtype=None")),
    (embedding_kernel(2, False), _schema("embedding_2bit.out", "*")),
    (embedding_kernel(2, True), _schema("embedding_2bit.dtype_out", "ScalarType? dtype=None, *")),
    (embedding_kernel(4, False), _schema("embedding_4bit.out", "*")),
    (embedding_kernel(4, True), _schema("embedding_4bit.dtype_out", "ScalarType? dtype=None, *")),
])
