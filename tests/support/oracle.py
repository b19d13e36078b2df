"""Runs a program on ExecuTorch's own runtime, the reference for every differential test."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from tests.support.compare import same_bits


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


def assert_executorch_bits(method, pte: Path, make_inputs, seeds, natives: Sequence = ()) -> None:
    """``method`` gives ExecuTorch's float32 bits on ``pte`` for the inputs ``make_inputs(seed)`` of every seed, and
    each of ``natives`` (kernels with ``ran_natively``) ran its native code on every call."""
    for seed in seeds:
        args = make_inputs(seed)
        actual, expected = method.execute(args), run_reference(pte, args)
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert same_bits(a, e), f"call {seed}, output {k}: {(a - e).abs().nan_to_num().max()}"
        assert all(kernel.ran_natively() for kernel in natives), seed
