"""Tensors over a program's bytes and a method's arenas, made once at load."""

from __future__ import annotations

import warnings

import torch

from pterun.core.dtype import name as dtype_name
from pterun.core.dtype import storage_dtype
from pterun.core.layout import is_contiguous_order, strides_for
from pterun.errors import InvalidExternalData
from pterun.format import TensorLayout, TensorSpec


def shaped(raw: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    """A uint8 tensor of exactly ``spec.nbytes`` bytes, viewed as the spec's dtype, sizes and dim order."""
    dtype = storage_dtype(spec.scalar_type)
    if spec.nbytes == 0:
        return torch.empty_strided(spec.sizes, strides_for(spec.sizes, spec.dim_order), dtype=dtype, device=raw.device)
    flat = raw.view(dtype)
    if is_contiguous_order(spec.dim_order):
        return flat.view(spec.sizes)  # the same strides as strides_for's, made faster
    return flat.as_strided(spec.sizes, strides_for(spec.sizes, spec.dim_order))


def from_bytes(data: memoryview, spec: TensorSpec) -> torch.Tensor:
    """A CPU tensor viewing ``data`` (no copy). Read-only data stays read-only by contract."""
    if spec.nbytes == 0:
        return shaped(torch.empty(0, dtype=torch.uint8), spec)
    if not data.readonly:  # a path's bytes: mapped copy-on-write
        return shaped(torch.frombuffer(data, dtype=torch.uint8, count=spec.nbytes), spec)
    with warnings.catch_warnings():
        # torch warns that it cannot mark a tensor over read-only bytes as such;
        # constants are never written, so the view is safe.
        warnings.simplefilter("ignore", UserWarning)
        raw = torch.frombuffer(data, dtype=torch.uint8, count=spec.nbytes)
    return shaped(raw, spec)


def check_external_layout(key: str, layout: TensorLayout | None, spec: TensorSpec) -> None:
    if layout is None:
        return
    if (layout.scalar_type, tuple(layout.sizes), tuple(layout.dim_order)) != (
        spec.scalar_type, tuple(spec.sizes), tuple(spec.dim_order)
    ):
        raise InvalidExternalData(
            f"external tensor {key!r}: the program expects {dtype_name(spec.scalar_type)} {list(spec.sizes)} "
            f"dim order {list(spec.dim_order)}; the data file has {dtype_name(layout.scalar_type)} "
            f"{list(layout.sizes)} dim order {list(layout.dim_order)}"
        )
