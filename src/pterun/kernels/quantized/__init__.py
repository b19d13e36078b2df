"""quantized_decomposed::* kernels: the operators of PT2E quantized programs.

ExecuTorch's quantized kernel library is the reference, and integer results
must match it bit for bit, so every kernel reproduces its arithmetic (each
module says how) rather than PyTorch's reference decompositions.

Each kernel takes the schema's arguments in order and writes its ``out``
tensors in place (resizing them first where the result's shape can vary); a
call's trailing value (the result, or the list of results for two-output
operators) is not used.
"""

from __future__ import annotations

from pterun.kernels.python_kernels import register_kernels
from pterun.kernels.quantized import add, dequantize, embedding, matmul, qparams, quantize
from pterun.kernels.quantized.common import dtype_of
from pterun.kernels.registry import KernelRegistry

KERNELS = (*quantize.KERNELS, *dequantize.KERNELS, *qparams.KERNELS, *add.KERNELS, *embedding.KERNELS,
           *matmul.KERNELS)


def register(registry: KernelRegistry) -> None:
    register_kernels(registry, KERNELS, dtype_of)
