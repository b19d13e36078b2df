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


def emit_float_clamp(node: Node, b, out: str) -> None:
    """The node's fused output_min/output_max on a float output, in place."""
    lo = node.output_min if not math.isinf(node.output_min) else None
    hi = node.output_max if not math.isinf(node.output_max) else None
    if lo is None and hi is None:
        return
    if node.output_min > node.output_max:
        raise DelegateInvalidCompatibility(
            f"XNNPACK {node.where}: output_min {node.output_min} exceeds output_max {node.output_max}"
        )
    args = ", ".join(f"{k}={b.number(float(v))}" for k, v in (("min", lo), ("max", hi)) if v is not None)
    b.emit(f"{out}.clamp_({args})")
