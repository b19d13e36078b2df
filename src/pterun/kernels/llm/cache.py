"""llama::update_cache, llama::update_cache_with_indices: values written into a KV cache in place.

The cache is written in place; the ``out`` is a placeholder the program never
reads, left untouched as ExecuTorch leaves it (its schema says it is written
too, so the executor treats it as written).
"""

from __future__ import annotations

import torch

from pterun.errors import InvalidArgument
from pterun.kernels.python_kernels import KernelTable

KERNELS = KernelTable()


def check_cache_shapes(value: torch.Tensor, cache: torch.Tensor, what: str) -> None:
    vs, cs = value.shape, cache.shape
    if len(vs) != 4 or len(cs) != 4:
        raise InvalidArgument(f"{what}: value and cache must be 4-d")
    if vs[0] != cs[0] or vs[2] != cs[2] or vs[3] != cs[3]:
        raise InvalidArgument(
            f"{what}: value {tuple(value.shape)} does not fit cache {tuple(cache.shape)} "
            "(batch, heads and head_dim must match)"
        )
    if value.element_size() != cache.element_size():
        raise InvalidArgument(f"{what}: value is {value.dtype} but cache is {cache.dtype}")


def as_cache_type(value: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    # ExecuTorch copies raw bytes, so a value of another type of the same width lands bit for bit.
    return value if value.dtype == cache.dtype else value.view(cache.dtype)


def write_span(value: torch.Tensor, cache: torch.Tensor, start_pos: int, what: str) -> None:
    seq_len = value.shape[1]
    if not 0 <= start_pos < cache.shape[1] or start_pos + seq_len > cache.shape[1]:
        raise InvalidArgument(
            f"{what}: positions [{start_pos}, {start_pos + seq_len}) do not fit a cache of {cache.shape[1]}"
        )
    cache[:, start_pos:start_pos + seq_len].copy_(as_cache_type(value, cache))


@KERNELS.kernel("llama::update_cache.out(Tensor value, Tensor(a!) cache, SymInt start_pos, *, "
                "Tensor(b!) out) -> Tensor(b!)")
def update_cache(value, cache, start_pos, out):
    what = "update_cache"
    check_cache_shapes(value, cache, what)
    write_span(value, cache, start_pos, what)
    return out


@KERNELS.kernel("llama::update_cache_with_indices.out(Tensor value, Tensor(a!) cache, SymInt start_pos, "
                "Tensor indices, *, Tensor(b!) out) -> Tensor(b!)")
def update_cache_with_indices(value, cache, start_pos, indices, out):
    what = "update_cache_with_indices"
    check_cache_shapes(value, cache, what)
    if indices.dim() != 2 or tuple(indices.shape) != tuple(value.shape[:2]):
        raise InvalidArgument(f"{what}: indices must be [batch, seq_len] = {tuple(value.shape[:2])}")
    if indices.dtype != torch.int64:
        raise InvalidArgument(f"{what}: indices must be int64, not {indices.dtype}")
    if indices.numel() == 0:
        return out
    lo, hi = int(indices.min()), int(indices.max())
    if lo < 0 or hi >= cache.shape[1]:
        raise InvalidArgument(f"{what}: index {lo if lo < 0 else hi} is outside a cache of {cache.shape[1]}")
    source = as_cache_type(value, cache)
    batch = indices.shape[0]
    rows = torch.arange(batch, device=indices.device).unsqueeze(1).expand_as(indices)
    unique = all(indices[b].unique().numel() == indices.shape[1] for b in range(batch))
    if unique:
        cache[rows, indices] = source
    else:
        # Tokens are written in order, so a repeated position keeps the last one.
        for b in range(batch):
            for s, pos in enumerate(indices[b].tolist()):
                cache[b, pos].copy_(source[b, s])
    return out
