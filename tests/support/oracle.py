"""Runs a program on ExecuTorch's own runtime, the reference for every differential test."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch


def _runtime():
    # Loading the quantized and LLM kernel libraries registers their operators with the runtime.
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.pybindings import portable_lib

    try:
        # The package itself registers nothing; these modules load the llama:: and preprocess:: kernels.
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
        import executorch.extension.llm.custom_ops.op_tile_crop_aot  # noqa: F401
    except Exception:  # noqa: BLE001 - optional: only LLM programs need it
        pass
    return portable_lib


def run_reference(pte: Path, inputs: Sequence, method: str = "forward", ptd: Sequence[Path] = ()) -> list:
    runtime = _runtime()
    module = runtime._load_for_executorch(str(pte), str(ptd[0]) if ptd else None)
    return list(module.run_method(method, [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))


def reference_module(pte: Path, ptd: Sequence[Path] = ()):
    """A module that keeps its state between calls (mutable buffers)."""
    runtime = _runtime()
    return runtime._load_for_executorch(str(pte), str(ptd[0]) if ptd else None)
