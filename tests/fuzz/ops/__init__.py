"""Operators the fuzzer builds programs from: ATen operators ExecuTorch's exporter emits, by family."""

from tests.fuzz.ops.registry import OPS, Ctx, Invalid, OpDef, Param, op

# Importing the families fills OPS.
from tests.fuzz.ops import elementwise, inplace, layers, reduce, shape  # noqa: F401  isort: skip

__all__ = ["OPS", "Ctx", "Invalid", "OpDef", "Param", "op"]
