"""Helpers every node family shares: datatype checks and fused output clamps."""

from __future__ import annotations

import math

from pterun.backends.xnnpack.graph import Datatype, Node, Value
from pterun.errors import DelegateInvalidCompatibility


def is_float(value: Value) -> bool:
    return value.datatype in Datatype.FLOATS and value.quant is None


def unsupported(node: Node, *values: Value) -> DelegateInvalidCompatibility:
    types = ", ".join(f"{v.id}: {v.type_name}" for v in values)
    return DelegateInvalidCompatibility(f"XNNPACK {node.where}: datatypes ({types}) are not supported")


def require_float(node: Node, *values: Value) -> None:
    if not all(is_float(v) for v in values) or len({v.datatype for v in values}) != 1:
        raise unsupported(node, *values)


def float_bounds(node: Node) -> tuple[float, float]:
    """The node's fused output_min/output_max on a float output: the bounds a value is clamped to, infinite where
    it has none (an infinite bound clamps nothing, whichever its sign)."""
    lo = float(node.output_min) if not math.isinf(node.output_min) else -math.inf
    hi = float(node.output_max) if not math.isinf(node.output_max) else math.inf
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise DelegateInvalidCompatibility(
            f"XNNPACK {node.where}: output_min {node.output_min} and output_max {node.output_max} bound no range"
        )
    return lo, hi


def emit_float_clamp(node: Node, b, out: str) -> None:
    """The node's fused output_min/output_max on a float output, in place."""
    lo, hi = float_bounds(node)
    if math.isinf(lo) and math.isinf(hi):
        return
    args = ", ".join(f"{k}={b.number(v)}" for k, v in (("min", lo), ("max", hi)) if not math.isinf(v))
    b.emit(f"{out}.clamp_({args})")
