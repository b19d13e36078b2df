"""Elementwise operators: unary formulas, binary arithmetic and comparisons with broadcasting, where.

Kernels: shaders/unary.wgsl, shaders/binary.wgsl, shaders/where.wgsl. The
formula is part of the WGSL (so each operator is its own pipeline); scalars,
shapes and strides are parameters.
"""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.graph import TensorValue
from pterun.backends.webgpu.ops.common import broadcast, broadcast_params, compute_type, grid
from pterun.backends.webgpu.slots import TSlot
from pterun.errors import DelegateInvalidCompatibility

I32_MIN, I32_MAX = -(2**31), 2**31 - 1

# name -> (formula in x, s0, s1; the type it must be computed in, or None for the operand's)
UNARY = {
    "aten.abs.default": ("abs(x)", None),
    "aten.neg.default": ("-x", None),
    "aten.sigmoid.default": ("sigmoid_f32(x)", "f32"),
    "aten.tanh.default": ("tanh_f32(x)", "f32"),
    "aten.exp.default": ("exp(x)", "f32"),
    "aten.log.default": ("log(x)", "f32"),
    "aten.log10.default": ("log(x) * 0.43429448190325176", "f32"),
    "aten.sqrt.default": ("sqrt(x)", "f32"),
    "aten.rsqrt.default": ("1.0 / sqrt(x)", "f32"),
    "aten.reciprocal.default": ("1.0 / x", "f32"),
    "aten.sin.default": ("sin_f32(x)", "f32"),
    "aten.cos.default": ("cos_f32(x)", "f32"),
    "aten.erf.default": ("erf_f32(x)", "f32"),
    "aten.relu.default": ("max(x, ${TC}(0))", None),
    "aten.silu.default": ("x * sigmoid_f32(x)", "f32"),
    "aten.round.default": ("round(x)", "f32"),
    "aten.floor.default": ("floor(x)", "f32"),
    "aten.ceil.default": ("ceil(x)", "f32"),
    "aten.trunc.default": ("trunc(x)", "f32"),
    "aten.hardswish.default": ("x * clamp(x + 3.0, 0.0, 6.0) / 6.0", "f32"),
    "aten.hardsigmoid.default": ("clamp(x + 3.0, 0.0, 6.0) / 6.0", "f32"),
    "aten.logical_not.default": ("x == ${TC}(0)", None),
    # with scalars
    "aten.hardtanh.default": ("min(max(x, s0), s1)", None),
    "aten.clamp.default": ("min(max(x, s0), s1)", None),
    "aten.leaky_relu.default": ("select(x * s0, x, x > 0.0)", "f32"),
    "aten.hardshrink.default": ("select(x, 0.0, abs(x) <= s0)", "f32"),
    "aten.pow.Tensor_Scalar": ("pow_f32(x, s0)", "f32"),
    "aten.eq.Scalar": ("x == s0", "cmp"),
    "aten.ne.Scalar": ("x != s0", "cmp"),
    "aten.lt.Scalar": ("x < s0", "cmp"),
    "aten.le.Scalar": ("x <= s0", "cmp"),
    "aten.gt.Scalar": ("x > s0", "cmp"),
    "aten.ge.Scalar": ("x >= s0", "cmp"),
    "aten.add.Scalar": ("x + s0", None),
    "aten.sub.Scalar": ("x - s0", None),
    "aten.mul.Scalar": ("x * s0", None),
    "aten.div.Scalar": ("x / s0", "f32"),
}

GELU = {
    "none": "0.5 * x * (1.0 + erf_f32(x * 0.7071067811865476))",
    "tanh": "0.5 * x * (1.0 + tanh_f32(0.7978845608028654 * (x + 0.044715 * x * x * x)))",
}

# name -> (formula in a, b, alpha; compute type rule)
BINARY = {
    "aten.add.Tensor": ("a + alpha * b", None),
    "aten.sub.Tensor": ("a - alpha * b", None),
    "aten.rsub.Tensor": ("b - alpha * a", None),
    "aten.mul.Tensor": ("a * b", None),
    "aten.div.Tensor": ("a / b", "f32"),
    "aten.minimum.default": ("select(min(a, b), a + b, a != a || b != b)", None),
    "aten.maximum.default": ("select(max(a, b), a + b, a != a || b != b)", None),
    "aten.pow.Tensor_Tensor": ("pow_f32(a, b)", "f32"),
    "aten.eq.Tensor": ("a == b", "cmp"),
    "aten.ne.Tensor": ("a != b", "cmp"),
    "aten.lt.Tensor": ("a < b", "cmp"),
    "aten.le.Tensor": ("a <= b", "cmp"),
    "aten.gt.Tensor": ("a > b", "cmp"),
    "aten.ge.Tensor": ("a >= b", "cmp"),
    "aten.bitwise_and.Tensor": ("a & b", "int"),
    "aten.bitwise_or.Tensor": ("a | b", "int"),
    "aten.bitwise_xor.Tensor": ("a ^ b", "int"),
    "aten.logical_and.default": ("a != ${TC}(0) && b != ${TC}(0)", "cmp"),
    "aten.logical_or.default": ("a != ${TC}(0) || b != ${TC}(0)", "cmp"),
    "aten.logical_xor.default": ("(a != ${TC}(0)) != (b != ${TC}(0))", "cmp"),
}

# Binary operators whose second operand may be a Python scalar: the unary formula to use then.
SCALAR_FORMS = {
    "aten.add.Tensor": "x + s0",
    "aten.sub.Tensor": "x - s0",
    "aten.mul.Tensor": "x * s0",
    "aten.div.Tensor": "x / s0",
    "aten.eq.Tensor": "x == s0",
    "aten.ne.Tensor": "x != s0",
    "aten.lt.Tensor": "x < s0",
    "aten.le.Tensor": "x <= s0",
    "aten.gt.Tensor": "x > s0",
    "aten.ge.Tensor": "x >= s0",
    "aten.pow.Tensor_Tensor": "pow_f32(x, s0)",
}


def _scalar_for(tc: str, value) -> float | int:
    if tc == "f32":
        return float(value)
    if isinstance(value, float):
        if math.isinf(value):
            return I32_MAX if value > 0 else I32_MIN
        return int(value)
    return int(value)


def unary(b: NodeBuilder, x: TSlot, out_vid: int, formula: str, rule: str | None, scalars=(0, 0)) -> TSlot:
    y = b.out(out_vid, lambda: x.shape)
    if rule == "f32" or x.elem == "f32":
        tc = "f32"
    elif rule == "cmp":
        fractional = any(isinstance(v, float) and not float(v).is_integer() for v in scalars)
        negative = any(v < 0 for v in scalars)
        tc = "f32" if fractional else ("u32" if x.elem == "u32" and not negative else "i32")
    else:
        tc = "f32" if y.elem == "f32" else x.elem
    s = [_scalar_for(tc, v) for v in scalars]
    expr = formula.replace("${TC}", tc)
    b.dispatch(
        "unary",
        {"TX": x.elem, "TO": y.elem, "TC": tc, "EXPR": expr},
        [x, y],
        lambda: [y.numel, s[0], s[1]],
        lambda: grid(y.numel),
    )
    return y


def build_unary(b: NodeBuilder, op) -> None:
    name = op.name
    args = op.args
    x = b.tensor(args[0])
    formula, rule = UNARY.get(name, (None, None))
    scalars = (0, 0)
    if name == "aten.gelu.default":
        approx = b.value(args[1]) if len(args) > 2 else "none"
        formula, rule = GELU.get(approx or "none", None), "f32"
        if formula is None:
            raise DelegateInvalidCompatibility(f"{name}: approximate={approx!r} is not supported")
    elif name == "aten.hardtanh.default":
        scalars = (b.scalar(args[1], -1.0), b.scalar(args[2], 1.0))
    elif name == "aten.clamp.default":
        lo, hi = b.scalar(args[1]), b.scalar(args[2])
        if x.elem == "f32":
            scalars = (-math.inf if lo is None else lo, math.inf if hi is None else hi)
        else:
            scalars = (I32_MIN if lo is None else lo, I32_MAX if hi is None else hi)
    elif name == "aten.leaky_relu.default":
        scalars = (b.scalar(args[1], 0.01) if len(args) > 2 else 0.01, 0)
    elif name == "aten.hardshrink.default":
        scalars = (b.scalar(args[1], 0.5) if len(args) > 2 else 0.5, 0)
    elif name in ("aten.add.Scalar", "aten.sub.Scalar"):
        alpha = b.scalar(args[2], 1) if len(args) > 3 else 1
        scalars = (b.scalar(args[1]) * alpha, 0)
    elif name == "aten.bitwise_not.default":
        formula, rule = ("x == ${TC}(0)" if x.elem == "u32" else "~x"), None
    elif formula is not None and "s0" in formula:
        scalars = (b.scalar(args[1]), 0)
    if formula is None:
        raise DelegateInvalidCompatibility(f"{name} is not supported")
    unary(b, x, args[-1], formula, rule, scalars)


def _binary_type(rule, a: TSlot, c: TSlot, out: TSlot) -> str:
    if rule == "f32":
        return "f32"
    if rule == "cmp":
        return compute_type(a, c)
    if rule == "int":
        return "u32" if a.elem == c.elem == "u32" else "i32"
    return "f32" if out.elem == "f32" else compute_type(a, c)


def binary(b: NodeBuilder, a: TSlot, c: TSlot, out_vid: int, formula: str, rule, alpha=1) -> TSlot:
    y = b.out(out_vid, lambda: broadcast(a.shape, c.shape))
    tc = _binary_type(rule, a, c, y)
    al = _scalar_for(tc, alpha)

    def params():
        return broadcast_params(y.shape, (a.shape, c.shape), al)

    b.dispatch(
        "binary",
        {"TA": a.elem, "TB": c.elem, "TO": y.elem, "TC": tc, "EXPR": formula.replace("${TC}", tc)},
        [a, c, y],
        params,
        lambda: grid(y.numel),
    )
    return y


def build_binary(b: NodeBuilder, op) -> None:
    name, args = op.name, op.args
    formula, rule = BINARY[name]
    alpha = 1
    if name in ("aten.add.Tensor", "aten.sub.Tensor", "aten.rsub.Tensor") and len(args) > 3:
        alpha = b.scalar(args[2], 1)
    if not b.is_tensor(args[0]):
        raise DelegateInvalidCompatibility(f"{name}: a scalar first operand is not supported")
    a = b.tensor(args[0])
    if not b.is_tensor(args[1]):
        other = b.scalar(args[1])
        form = SCALAR_FORMS.get(name)
        if form is None:
            raise DelegateInvalidCompatibility(f"{name}: a scalar second operand is not supported")
        if name in ("aten.add.Tensor", "aten.sub.Tensor"):
            other = other * alpha
        unary(
            b, a, args[-1], form, "cmp" if rule == "cmp" else ("f32" if rule == "f32" else None), (other, 0)
        )
        return
    binary(b, a, b.tensor(args[1]), args[-1], formula, rule, alpha)


FLOOR_DIV = "select(a / b, a / b - 1, (a - (a / b) * b != 0) && ((a < 0) != (b < 0)))"


def build_div_mode(b: NodeBuilder, op) -> None:
    args = op.args
    mode = b.value(args[2])
    a, c = b.tensor(args[0]), b.tensor(args[1])
    out = b.graph.tensor(args[-1])
    integer = not isinstance(out, TensorValue) or out.dtype.name not in ("FLOAT32", "FLOAT64")
    if mode is None:
        binary(b, a, c, args[-1], "a / b", "f32")
    elif mode == "trunc":
        binary(b, a, c, args[-1], "a / b" if integer else "trunc(a / b)", None if integer else "f32")
    elif mode == "floor":
        if integer:
            # The remainder is spelled out: WGSL's i32 `%` came out wrong for negative operands on
            # NVIDIA's Vulkan driver (it must truncate, as C's does).
            binary(b, a, c, args[-1], FLOOR_DIV, "int")
        else:
            binary(b, a, c, args[-1], "floor(a / b)", "f32")
    else:
        raise DelegateInvalidCompatibility(f"aten.div.Tensor_mode: rounding_mode={mode!r} is not supported")


def build_where(b: NodeBuilder, op) -> None:
    args = op.args
    cond = b.tensor(args[0])
    xa = b.tensor(args[1]) if b.is_tensor(args[1]) else None
    xb = b.tensor(args[2]) if b.is_tensor(args[2]) else None
    if xa is None or xb is None:
        raise DelegateInvalidCompatibility("aten.where.self: scalar operands are not supported")
    y = b.out(args[-1], lambda: broadcast(cond.shape, xa.shape, xb.shape))

    def params():
        return broadcast_params(y.shape, (cond.shape, xa.shape, xb.shape))

    b.dispatch(
        "where",
        {"TCOND": cond.elem, "TA": xa.elem, "TB": xb.elem, "TO": y.elem},
        [cond, xa, xb, y],
        params,
        lambda: grid(y.numel),
    )


OPS = {name: build_unary for name in UNARY}
OPS.update({name: build_unary for name in ("aten.gelu.default", "aten.bitwise_not.default")})
OPS.update({name: build_binary for name in BINARY})
OPS["aten.div.Tensor_mode"] = build_div_mode
OPS["aten.where.self"] = build_where
