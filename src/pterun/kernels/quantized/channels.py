"""How per-channel and per-token quantization parameters line up with a tensor."""

from __future__ import annotations

import torch

from pterun.errors import InvalidArgument


def normalize_axis(axis: int, ndim: int, what: str) -> int:
    rank = max(ndim, 1)
    if not -rank <= axis < rank:
        raise InvalidArgument(f"{what}: axis {axis} is out of range for a {ndim}-d input")
    return axis + rank if axis < 0 else axis


def channel_view(t: torch.Tensor, axis: int, ndim: int) -> torch.Tensor:
    """A per-channel parameter vector shaped to broadcast along ``axis``."""
    return t.reshape((-1,) + (1,) * (ndim - axis - 1))


def tokens(t: torch.Tensor) -> torch.Tensor:
    """One row per token (every dimension but the last); a 0-d tensor is one token of one value."""
    return t.reshape(-1, t.shape[-1]) if t.dim() else t.reshape(1, 1)
