"""LLM kernels that take their start position as a tensor: what executor/load/fuse/positions.py makes of the calls
ExecuTorch's exporter feeds a position read to the host.

The position is a one-element integer tensor on the kernel's device, never read
back there: rows are gathered and written at ``arange(n) + position``. On the
CPU reading it costs nothing, so a position out of range is refused there as
the host-position kernels refuse it; on a GPU, reading it would stall the
stream (and keep a CUDA graph from holding the call), so indices are clamped
to the tensor instead: an out-of-range position writes and reads the last rows
rather than past the end (callers check positions against the context, as
pterun.llm does). Each reads its position before it writes anything, so its
out may share bytes with the position (the executor relies on it).
"""

from __future__ import annotations

import torch

from pterun.errors import InvalidArgument
from pterun.kernels.llm.attention import custom_sdpa
from pterun.kernels.llm.cache import as_cache_type, check_cache_shapes
from pterun.kernels.python_kernels import KernelTable, register_kernels, resize
from pterun.kernels.registry import KernelRegistry

KERNELS = KernelTable()


def register(registry: KernelRegistry) -> None:
    """pterun's own operators, kept apart from ExecuTorch's llama:: ones (whose schemas ExecuTorch registers)."""
    register_kernels(registry, KERNELS)


def position_indices(position: torch.Tensor, length: int, limit: int, what: str) -> torch.Tensor:
    """``position + arange(length)`` as int64 indices into a dimension of ``limit``, on the position's device."""
    start = position.reshape(())
    if position.device.type == "cpu":
        first = int(start)
        if first < 0 or first + length > limit:
            raise InvalidArgument(f"{what}: positions [{first}, {first + length}) do not fit a dimension of {limit}")
        return torch.arange(first, first + length, device=position.device)
    return (torch.arange(length, device=position.device) + start).clamp_(0, max(limit - 1, 0))


@KERNELS.kernel("pterun::slice_at.out(Tensor self, int dim, Tensor start, SymInt length, *, Tensor(a!) out) "
                "-> Tensor(a!)")
def slice_at(self, dim, start, length, out):
    """``self`` sliced along ``dim`` from ``start`` for ``length`` rows (slice_copy with start=p, end=p+length)."""
    dim = dim % self.dim()
    index = position_indices(start, max(length, 0), self.shape[dim], "slice_at")
    shape = list(self.shape)
    shape[dim] = index.numel()
    resize(out, shape)
    return torch.index_select(self, dim, index, out=out)


@KERNELS.kernel("pterun::update_cache_at.out(Tensor value, Tensor(a!) cache, Tensor start_pos, *, "
                "Tensor(b!) out) -> Tensor(b!)")
def update_cache_at(value, cache, start_pos, out):
    """llama::update_cache with the start position in a tensor."""
    what = "update_cache_at"
    check_cache_shapes(value, cache, what)
    index = position_indices(start_pos, value.shape[1], cache.shape[1], what)
    cache.index_copy_(1, index, as_cache_type(value, cache))
    return out


@KERNELS.kernel(
    "pterun::custom_sdpa_at.out(Tensor query, Tensor key, Tensor value, Tensor start_pos, "
    "Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None, *, "
    "Tensor(a!) out) -> Tensor(a!)")
def custom_sdpa_at(query, key, value, start_pos, attn_mask, dropout_p, is_causal, scale, out):
    """llama::custom_sdpa with the start position in a tensor: over the whole cache, the mask hiding the keys
    past the position (attention.py)."""
    return custom_sdpa(query, key, value, start_pos.reshape(()), attn_mask, dropout_p, is_causal, scale, out)
