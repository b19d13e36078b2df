"""The eager model beside the program, row by row: ``max_abs_error`` and ``agrees`` columns.

The eager module is called with exactly the tensors the program was (padding included) and its
outputs trimmed as the program's were. A row agrees when, for every output, the argmax over the last
dimension is the same everywhere (the predicted class, or token, at each position) for floating-point
outputs whose last dimension is longer than one, and when the values are equal (integers) or
``numpy.allclose`` (other floating-point outputs).
"""

from __future__ import annotations

import importlib

import numpy as np
import torch
from torch.utils._pytree import tree_leaves

from pterun.errors import InvalidArgument

ERROR = "max_abs_error"
AGREES = "agrees"


def load_factory(spec: str):
    """``module:function`` -> the function (it returns the eager ``nn.Module``)."""
    module_name, _, function = spec.partition(":")
    if not module_name or not function:
        raise InvalidArgument(f"compare_with={spec!r}: expected 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidArgument(f"compare_with={spec!r}: cannot import {module_name!r} ({error})") from None
    factory = getattr(module, function, None)
    if not callable(factory):
        raise InvalidArgument(f"compare_with={spec!r}: {module_name} has no function {function!r}")
    return factory


def agree(a: np.ndarray, b: np.ndarray) -> bool:
    if np.issubdtype(a.dtype, np.floating) and a.ndim and a.shape[-1] > 1:
        return bool(np.array_equal(a.argmax(-1), b.argmax(-1)))
    if np.issubdtype(a.dtype, np.floating):
        return bool(np.allclose(a, b))
    return bool(np.array_equal(a, b))


class Comparison:
    def __init__(self, spec: str, device: torch.device) -> None:
        self.spec = spec
        self.module = load_factory(spec)().eval().to(device)

    def rows(self, args: list, outputs: list[torch.Tensor], k: int, batched: bool) -> list[tuple[float, bool]]:
        """Per row of a call: the largest absolute difference over all outputs, and whether they agree."""
        with torch.inference_mode():
            eager = [t for t in tree_leaves(self.module(*args)) if isinstance(t, torch.Tensor)]
        if len(eager) != len(outputs):
            raise InvalidArgument(f"compare_with={self.spec!r}: the eager model returns {len(eager)} tensors, "
                                  f"the program {len(outputs)} outputs")
        eager = [(t[:k] if batched else t.unsqueeze(0)).detach().to("cpu", torch.float64) for t in eager]
        rows = []
        for i in range(k):
            error, agrees = 0.0, True
            for ours, theirs in zip(outputs, eager):
                a, b = ours[i].numpy(), theirs[i].numpy()
                if a.shape != b.shape:
                    raise InvalidArgument(f"compare_with={self.spec!r}: the eager model's output has shape "
                                          f"{list(b.shape)} per row, the program's {list(a.shape)}")
                if a.size:
                    error = max(error, float(np.max(np.abs(a.astype(np.float64) - b))))
                agrees = agrees and agree(a, b.astype(a.dtype))
            rows.append((error, agrees))
        return rows

    @staticmethod
    def columns(rows: list) -> dict[str, np.ndarray]:
        """The two columns; a row the program did not run (its error recorded) is NaN and False."""
        return {
            ERROR: np.array([np.nan if r is None else r[0] for r in rows], dtype=np.float64),
            AGREES: np.array([False if r is None else r[1] for r in rows], dtype=bool),
        }
