"""Elementwise nodes: unary math and activations, binary arithmetic with broadcasting, softmax.

The float nodes XNNPACK computes with approximations of its own (``native.VOPS``, softmax) run pterun's native
twins of its kernels on the CPU where they are built, for ExecuTorch's bits; PyTorch's functions otherwise."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from pterun.backends.xnnpack.compiler import TRACEABLE_HELPERS, Builder, broadcast
from pterun.backends.xnnpack.graph import Datatype, Node, positive_normal
from pterun.backends.xnnpack.nodes import native, qmath
from pterun.backends.xnnpack.nodes.common import emit_float_clamp, float_bounds, require_float, unsupported
from pterun.errors import InvalidProgram


def _softmax(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch._softmax(x, -1, False, out=out)


TRACEABLE_HELPERS.add(_softmax)


# XNNPACK unary node -> a torch function writing ``out`` from ``x`` (called as fn(x, out=out)).
_UNARY: dict[str, Callable[..., torch.Tensor]] = {
    "XNNAbs": torch.abs,
    "XNNNegate": torch.neg,
    "XNNSquare": torch.square,
    "XNNSquareRoot": torch.sqrt,
    "XNNReciprocalSquareRoot": torch.rsqrt,
    "XNNExp": torch.exp,
    "XNNLog": torch.log,
    "XNNSin": torch.sin,
    "XNNCos": torch.cos,
    "XNNTanh": torch.tanh,
    "XNNSigmoid": torch.sigmoid,
    "XNNFloor": torch.floor,
    "XNNCeiling": torch.ceil,
    "XNNGelu": torch.ops.aten.gelu.out,
    "XNNHardswish": torch.ops.aten.hardswish.out,
    "XNNSoftmax": _softmax,
}

_BINARY = {
    "XNNAdd": "torch.add",
    "XNNSubtract": "torch.sub",
    "XNNMultiply": "torch.mul",
    "XNNDiv": "torch.div",
    "XNNMinimum": "torch.minimum",
    "XNNMaximum": "torch.maximum",
}
# Only these apply the node's output_min/output_max; XNNPACK ignores them on the others.
_BINARY_CLAMPED = ("XNNAdd", "XNNSubtract", "XNNMultiply", "XNNDiv")


def _pointwise(node: Node, b: Builder, lookup, call, param: float = 0.0) -> None:
    """y = f(x), elementwise: on 8-bit values through a table of ``lookup(t, out)`` (None: XNNPACK has no
    8-bit form); on float32 with XNNPACK's own kernel where the native kernels repeat it (``native.VOPS``, with
    ``param``), else as the call that ``call(x, out)`` writes, given the names of x and y."""
    x, y = b.value(node.p.input_id), b.value(node.p.output_id)
    if lookup is not None and qmath.is_q8(x) and qmath.is_q8(y):
        return _q8_lookup(node, b, x, y, lookup)
    require_float(node, x, y)
    shape = b.shape(x.id)
    o = b.define(y.id, shape)
    if _native_float(node, b, x):
        if node.kind == "XNNSoftmax":
            return native.emit_softmax(b, b.ref(x.id), o, shape)
        return native.emit_vunary(b, node.kind, b.ref(x.id), o, shape, param)
    b.emit(call(x, o))


def _native_float(node: Node, b: Builder, x) -> bool:
    """Whether float node ``node`` runs XNNPACK's kernel natively: PyTorch's functions round otherwise."""
    kind_native = node.kind in native.VOPS or node.kind == "XNNSoftmax"
    return kind_native and b.storage_dtype(x) == torch.float32 and native.float_enabled(b)


def unary(node: Node, b: Builder) -> None:
    fn = _UNARY[node.kind]
    lookup = None if node.kind == "XNNSoftmax" else lambda t, o: fn(t, out=o)
    name = node.kind.removeprefix("XNN").lower()
    _pointwise(node, b, lookup, lambda x, o: f"{b.bind(fn, name)}({b.ref(x.id)}, out={o})")


def leaky_relu(node: Node, b: Builder) -> None:
    slope = float(node.p.negative_slope)
    if not math.isfinite(slope):
        raise InvalidProgram(f"XNNPACK {node.where}: negative_slope is {slope}; this runtime needs a finite slope")
    _pointwise(
        node, b, lambda t, o: torch.ops.aten.leaky_relu.out(t, slope, out=o),
        lambda x, o: f"torch.ops.aten.leaky_relu.out({b.ref(x.id)}, {b.number(slope)}, out={o})",
    )


def elu(node: Node, b: Builder) -> None:
    alpha = float(node.p.alpha)
    if not positive_normal(alpha):  # XNNPACK refuses the node as well
        raise InvalidProgram(f"XNNPACK {node.where}: alpha is {alpha}; it must be a positive normal float")
    _pointwise(
        node, b, lambda t, o: torch.ops.aten.elu.out(t, alpha, 1, 1, out=o),
        lambda x, o: f"torch.ops.aten.elu.out({b.ref(x.id)}, {b.number(alpha)}, 1, 1, out={o})", alpha,
    )


def clamp(node: Node, b: Builder) -> None:
    p = node.p
    x, y = b.value(p.input_id), b.value(p.output_id)
    if qmath.is_q8(x) and qmath.is_q8(y):
        if (x.datatype, x.quant) != (y.datatype, y.quant):
            lo, hi = node.output_min, node.output_max
            return _q8_lookup(node, b, x, y, lambda t, o: torch.clamp(t, lo, hi, out=o))
        o = b.define(y.id, b.shape(x.id))
        qmin, qmax = qmath.output_bounds(node, y, node.where)
        b.emit(f"torch.clamp({b.ref(x.id)}, {b.number(qmin)}, {b.number(qmax)}, out={o})")
        return
    require_float(node, x, y)
    shape = b.shape(x.id)
    o = b.define(y.id, shape)
    if native.moves(b, ()) and b.storage_dtype(x) == torch.float32:
        lo, hi = float_bounds(node)
        native.emit_vbinary(b, "clamp", b.ref(x.id), shape, b.ref(x.id), shape, o, shape, lo, hi)
        return
    b.emit(f"{o}.copy_({b.ref(x.id)})")
    emit_float_clamp(node, b, o)


def _q8_lookup(node: Node, b: Builder, x, y, fn) -> None:
    """An 8-bit unary function as XNNPACK runs one without a kernel of its own: a 256-entry table of
    quantize(f(dequantize(q))), evaluated in float32."""
    if x.datatype != y.datatype:
        raise unsupported(node, x, y)
    sx, zx = qmath.per_tensor(x, node.where)
    so, zo = qmath.per_tensor(y, node.where)
    lo, hi = qmath.qrange(x)

    def table():
        q = torch.arange(lo, hi + 1, dtype=torch.float32)
        real = (q - float(zx)) * sx
        out = torch.empty_like(real)
        fn(real, out)
        inv = float(np.float32(1.0) / np.float32(so))
        r = torch.nan_to_num(out * inv + float(zo), nan=0.0)
        r = torch.round(r).clamp(lo, hi)
        return r.to(b.storage_dtype(y)).to(b.device)

    lut = b.bind(b.cached("lut", table), "lut")
    o = b.define(y.id, b.shape(x.id))
    shape = b.shape(x.id)
    index = b.scratch(shape, torch.int64)
    b.emit(f"{index}.copy_({b.ref(x.id)})")
    if lo:
        b.emit(f"{index}.sub_({b.number(lo)})")
    b.emit(f"torch.index_select({lut}, 0, {index}.view(-1), out={o}.view(-1))")


def copy(node: Node, b: Builder) -> None:
    p = node.p
    x, y = b.value(p.input_id), b.value(p.output_id)
    if x.datatype != y.datatype or x.quant != y.quant:
        raise unsupported(node, x, y)
    shape = b.shape(x.id)
    if y.external_id is None:
        # Values are written once, so a copy can share the source's memory.
        b.define(y.id, shape, buffer=False)
        b.alias(y.id, x.id, lambda t: t, "{x}")
        return
    o = b.define(y.id, shape)
    if native.moves(b, ()):
        native.emit_moves(b, o, shape, b.storage_dtype(y), [(b.ref(x.id), [math.prod(shape)], [1], 0, [1], 0)])
        return
    b.emit(f"{o}.copy_({b.ref(x.id)})")


def binary(node: Node, b: Builder) -> None:
    p = node.p
    x1, x2, y = b.value(p.input1_id), b.value(p.input2_id), b.value(p.output_id)
    shape = broadcast(b.shape(x1.id), b.shape(x2.id), node.where)
    if all(qmath.is_q8(v) for v in (x1, x2, y)) and node.kind in ("XNNAdd", "XNNSubtract"):
        return _q8_add(node, b, x1, x2, y, shape, sign=-1 if node.kind == "XNNSubtract" else 1)
    if all(qmath.is_q8(v) for v in (x1, x2, y)) and node.kind == "XNNMultiply":
        return _q8_multiply(node, b, x1, x2, y, shape)
    require_float(node, x1, x2, y)
    o = b.define(y.id, shape)
    if node.kind in native.BINARY_OPS and native.moves(b, (len(shape),)) and all(
            b.storage_dtype(v) == torch.float32 for v in (x1, x2, y)):
        lo, hi = float_bounds(node)
        native.emit_vbinary(b, node.kind, b.ref(x1.id), b.shape(x1.id), b.ref(x2.id), b.shape(x2.id), o, shape, lo,
                            hi)
        b.route("native float binary")
        return
    b.emit(f"{_BINARY[node.kind]}({b.ref(x1.id)}, {b.ref(x2.id)}, out={o})")
    if node.kind in _BINARY_CLAMPED:
        emit_float_clamp(node, b, o)


def prelu(node: Node, b: Builder) -> None:
    p = node.p
    x, slope, y = b.value(p.input1_id), b.value(p.input2_id), b.value(p.output_id)
    require_float(node, x, slope, y)
    shape = b.shape(x.id)
    o = b.define(y.id, shape)
    xs = b.ref(x.id)
    positive, scaled = b.scratch(shape, torch.bool), b.scratch(shape)
    b.emit(f"torch.gt({xs}, 0, out={positive})")
    b.emit(f"torch.mul({xs}, {b.ref(slope.id)}, out={scaled})")
    b.emit(f"torch.where({positive}, {xs}, {scaled}, out={o})")


def _q8_add(node, b, x1, x2, y, shape, sign: int) -> None:
    """XNNPACK's 8-bit add: integer multipliers of 20-odd bits and a rounding arithmetic shift."""
    s1, z1 = qmath.per_tensor(x1, node.where)
    s2, z2 = qmath.per_tensor(x2, node.where)
    so, zo = qmath.per_tensor(y, node.where)
    f32 = np.float32
    a_scale = f32(f32(s1) / f32(so))
    b_scale = f32(f32(sign * s2) / f32(so))
    biggest = max(abs(a_scale), abs(b_scale))
    if not 2.0 ** -10 <= biggest < 2.0 ** 8:
        raise unsupported(node, x1, x2, y)
    exponent = int(np.array([biggest], dtype=np.float32).view(np.uint32)[0] >> 23) - 127
    shift = 20 - exponent

    def multiplier(scale) -> int:
        bits = np.array([abs(scale)], dtype=np.float32).view(np.uint32)[0] + np.uint32(shift << 23)
        m = int(np.rint(np.array([bits], dtype=np.uint32).view(np.float32)[0]))
        return -m if np.signbit(scale) else m

    m1, m2 = multiplier(a_scale), multiplier(b_scale)
    bias = (1 << (shift - 1)) - m1 * z1 - m2 * z2
    qmin, qmax = qmath.output_bounds(node, y, node.where)
    if _native_q8(b, x1, x2, y, shape):
        return _emit_native_q8(b, "add", x1, x2, y, shape, m1, m2, bias, shift, 0.0, zo, qmin, qmax)
    o = b.define(y.id, shape)
    acc, other = b.scratch(shape, torch.int32), b.scratch(shape, torch.int32)
    b.emit(f"{acc}.copy_({b.ref(x1.id)})")
    b.emit(f"{acc}.mul_({b.number(m1)})")
    b.emit(f"{other}.copy_({b.ref(x2.id)})")
    b.emit(f"{other}.mul_({b.number(m2)})")
    b.emit(f"{acc}.add_({other})")
    b.emit(f"{acc}.add_({b.number(bias)})")
    b.emit(f"{acc}.bitwise_right_shift_({b.number(shift)})")
    if zo:
        b.emit(f"{acc}.add_({b.number(zo)})")
    b.emit(f"torch.clamp({acc}, {b.number(qmin)}, {b.number(qmax)}, out={acc})")
    b.emit(f"{o}.copy_({acc})")


def _q8_multiply(node, b, x1, x2, y, shape) -> None:
    """XNNPACK's 8-bit multiply: the exact product of the centered inputs, requantized in float32."""
    s1, z1 = qmath.per_tensor(x1, node.where)
    s2, z2 = qmath.per_tensor(x2, node.where)
    so, zo = qmath.per_tensor(y, node.where)
    f32 = np.float32
    scale = float(f32(f32(f32(s1) * f32(s2)) / f32(so)))
    qmin, qmax = qmath.output_bounds(node, y, node.where)
    if _native_q8(b, x1, x2, y, shape):
        return _emit_native_q8(b, "mul", x1, x2, y, shape, z1, z2, 0, 0, scale, zo, qmin, qmax)
    o = b.define(y.id, shape)
    acc, other = b.scratch(shape), b.scratch(shape)
    b.emit(f"{acc}.copy_({b.ref(x1.id)})")
    if z1:
        b.emit(f"{acc}.sub_({b.number(z1)})")
    b.emit(f"{other}.copy_({b.ref(x2.id)})")
    if z2:
        b.emit(f"{other}.sub_({b.number(z2)})")
    b.emit(f"{acc}.mul_({other})")
    qmath.emit_requantize(b, acc, b.number(scale), zo, qmin, qmax, o)


def _native_q8(b, x1, x2, y, shape) -> bool:
    """Whether the native kernels compute an 8-bit add or multiply: signed values, up to 6 dimensions."""
    return native.enabled(b) and len(shape) <= 6 and all(v.datatype == Datatype.QINT8 for v in (x1, x2, y))


def _emit_native_q8(b, op: str, x1, x2, y, shape, a_param: int, b_param: int, bias: int, shift: int, scale: float,
                    zo: int, qmin: int, qmax: int) -> None:
    """XNNPACK's qs8 vadd or vmul with its parameters (``native.qbinary_make``), natively."""
    a_shape, b_shape = b.shape(x1.id), b.shape(x2.id)
    kernel = b.cached(("q8" + op, a_shape, b_shape), lambda: native.qbinary_make(
        op, shape, a_shape, b_shape, a_param, b_param, bias, shift, scale, zo, qmin, qmax))
    b.route(f"native int8 {op} ({native.qbinary_isa(kernel)})")
    o = b.define(y.id, shape)
    native.emit_qbinary(b, kernel, b.ref(x1.id), b.ref(x2.id), o, shape)


TRANSLATORS = {
    **{kind: unary for kind in _UNARY},
    "XNNLeakyReLU": leaky_relu,
    "XNNELU": elu,
    "XNNClamp": clamp,
    "XNNCopy": copy,
    "XNNPReLU": prelu,
    **{kind: binary for kind in _BINARY},
}
