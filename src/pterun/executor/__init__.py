"""Where format, memory, kernels and backends meet: Program, Method, MethodMeta."""

from pterun.executor.call.method import Method
from pterun.executor.context import Registries
from pterun.executor.meta import MethodMeta, TensorInfo
from pterun.executor.program import Program

__all__ = ["Method", "MethodMeta", "Program", "Registries", "TensorInfo"]
