"""Inputs for a method: read from a .pt or .npz file, or drawn at random from its metadata."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pterun import MethodMeta
from pterun.core.dtype import to_torch

# Integer inputs are usually indices (token ids, positions); small values are valid for most programs.
INT_HIGH = 16


def random_inputs(meta: MethodMeta, device: str = "cpu", seed: int = 0) -> list:
    generator = torch.Generator().manual_seed(seed)
    inputs = []
    for i in range(meta.num_inputs()):
        tag = meta.input_tag(i)
        if tag != "Tensor":
            raise SystemExit(f"input {i} of {meta.name()} is a {tag}; pass --inputs to give it")
        info = meta.input_tensor_meta(i)
        dtype = to_torch(info.dtype())
        sizes = info.sizes()
        if dtype.is_floating_point:
            tensor = torch.randn(sizes, generator=generator).to(dtype)
        elif dtype == torch.bool:
            tensor = torch.randint(0, 2, sizes, generator=generator).bool()
        else:
            tensor = torch.randint(0, INT_HIGH, sizes, generator=generator).to(dtype)
        if info.dim_order() == (0, 2, 3, 1):
            tensor = tensor.contiguous(memory_format=torch.channels_last)
        inputs.append(tensor.to(device))
    return inputs


def load_inputs(path: Path, device: str = "cpu") -> list:
    if path.suffix == ".npz":
        with np.load(path) as archive:
            values = [torch.from_numpy(archive[key]) for key in archive.files]
    else:
        loaded = torch.load(path, weights_only=True)
        if isinstance(loaded, dict):
            loaded = list(loaded.values())
        values = [loaded] if isinstance(loaded, torch.Tensor) else list(loaded)
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]
