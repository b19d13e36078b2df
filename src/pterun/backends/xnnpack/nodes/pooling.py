"""Pooling nodes on NHWC values: max, average (padding excluded from the count), global average."""

from __future__ import annotations

import numpy as np
import torch

from pterun.backends.xnnpack.compiler import Builder
from pterun.backends.xnnpack.graph import Datatype, Node
from pterun.backends.xnnpack.nodes import native, qmath
from pterun.backends.xnnpack.nodes.common import emit_float_clamp, float_bounds, require_float, unsupported
from pterun.errors import InvalidArgument

FLAG_KEEP_DIMS = 0x40
_NCHW = (0, 3, 1, 2)


def _window(node: Node, b: Builder, xshape, dilated: bool):
    p = node.p
    if len(xshape) != 4:
        raise InvalidArgument(f"XNNPACK {node.where}: input {list(xshape)} is not 4-d")
    dh = max(p.dilation_height, 1) if dilated else 1
    dw = max(p.dilation_width, 1) if dilated else 1
    if min(p.pooling_height, p.pooling_width, p.stride_height, p.stride_width) < 1:
        raise InvalidArgument(f"XNNPACK {node.where}: pooling parameters {vars(p)} are invalid")
    n, h, w, c = xshape
    oh = (h + p.padding_top + p.padding_bottom - dh * (p.pooling_height - 1) - 1) // p.stride_height + 1
    ow = (w + p.padding_left + p.padding_right - dw * (p.pooling_width - 1) - 1) // p.stride_width + 1
    if oh < 1 or ow < 1:
        raise InvalidArgument(f"XNNPACK {node.where}: input {list(xshape)} is smaller than the pooling window")
    return (n, oh, ow, c), (dh, dw)


def max_pooling(node: Node, b: Builder) -> None:
    p = node.p
    x, y = b.value(p.input_id), b.value(p.output_id)
    xshape = b.shape(x.id)
    shape, dilation = _window(node, b, xshape, dilated=True)
    quantized = qmath.is_q8(x) and qmath.is_q8(y)
    if quantized and x.datatype != y.datatype:
        raise unsupported(node, x, y)
    if quantized:
        return _q8_max(node, b, x, y, xshape, shape, dilation)
    require_float(node, x, y)
    if _returned_max(node, b, x, y, shape, dilation):
        return
    o = b.define(y.id, shape)
    n, h, w, c = xshape
    # Padding never wins a max: pad with -inf.
    padded = (n, h + p.padding_top + p.padding_bottom, w + p.padding_left + p.padding_right, c)
    src = b.scratch(padded, fill=float("-inf"))
    interior = b.bind(b.env[src][:, p.padding_top:p.padding_top + h, p.padding_left:p.padding_left + w, :], "pin")
    b.emit(f"{interior}.copy_({b.ref(x.id)})")
    idx = b.bind(torch.empty((n, c, shape[1], shape[2]), dtype=torch.int64, device=b.device), "idx")
    b.emit(
        f"torch.ops.aten.max_pool2d_with_indices.out({b.permuted(src, _NCHW)}, "
        f"{b.number([p.pooling_height, p.pooling_width])}, {b.number([p.stride_height, p.stride_width])}, [0, 0], "
        f"{b.number(list(dilation))}, "
        f"False, out={b.permuted(o, _NCHW)}, indices={idx})"
    )
    emit_float_clamp(node, b, o)


def _q8_max(node: Node, b: Builder, x, y, xshape, shape, dilation) -> None:
    """8-bit max pooling on the 8-bit values themselves: the maximum of one strided view per window offset."""
    p = node.p
    o = b.define(y.id, shape)
    qmin, qmax = qmath.output_bounds(node, y, node.where)
    if native.enabled(b) and x.datatype == Datatype.QINT8:
        window = (p.pooling_height, p.pooling_width, p.stride_height, p.stride_width, *dilation, p.padding_top,
                  p.padding_left)
        return native.emit_qmaxpool(b, b.ref(x.id), o, xshape, shape, window, qmin, qmax)
    n, h, w, c = xshape
    _, oh, ow, _ = shape
    dtype = b.storage_dtype(x)
    name = b.ref(x.id)
    if p.padding_top or p.padding_bottom or p.padding_left or p.padding_right or name not in b.env:
        # Padding holds the type's least value, which never wins a max.
        padded = (n, h + p.padding_top + p.padding_bottom, w + p.padding_left + p.padding_right, c)
        src = b.scratch(padded, dtype, fill=int(torch.iinfo(dtype).min))
        interior = b.env[src][:, p.padding_top:p.padding_top + h, p.padding_left:p.padding_left + w, :]
        b.emit(f"{b.bind(interior, 'pin')}.copy_({name})")
        source = b.env[src]
    else:
        source = b.env[name]
    views = []
    for i in range(p.pooling_height):
        for j in range(p.pooling_width):
            top, left = i * dilation[0], j * dilation[1]
            view = source[:, top:top + p.stride_height * (oh - 1) + 1:p.stride_height,
                          left:left + p.stride_width * (ow - 1) + 1:p.stride_width, :]
            views.append(b.bind(view, "win"))
    if len(views) == 1:
        b.emit(f"{o}.copy_({views[0]})")
    else:
        b.emit(f"torch.maximum({views[0]}, {views[1]}, out={o})")
        for view in views[2:]:
            b.emit(f"torch.maximum({o}, {view}, out={o})")
    if (qmin, qmax) != qmath.qrange(y):
        b.emit(f"{o}.clamp_({b.number(qmin)}, {b.number(qmax)})")


def _returned_max(node: Node, b: Builder, x, y, shape, dilation) -> bool:
    """Float32 on the CPU with padding torch takes (symmetric, at most half the window): max_pool2d pads
    with -inf itself and computes no indices, at under half the cost of the padded copy and indices."""
    p = node.p
    if (x.datatype != Datatype.FP32 or b.device.type != "cpu" or p.padding_top != p.padding_bottom
            or p.padding_left != p.padding_right or 2 * p.padding_top > p.pooling_height
            or 2 * p.padding_left > p.pooling_width):
        return False
    b.returned(y.id, shape, (
        f"torch.max_pool2d({b.nchw(x.id)}, {b.number([p.pooling_height, p.pooling_width])}, "
        f"{b.number([p.stride_height, p.stride_width])}, {b.number([p.padding_top, p.padding_left])}, "
        f"{b.number(list(dilation))}, False)"), nchw=True)
    emit_float_clamp(node, b, b.nchw(y.id) if y.external_id is None else b.ref(y.id))
    return True


def average_pooling(node: Node, b: Builder) -> None:
    p = node.p
    x, y = b.value(p.input_id), b.value(p.output_id)
    require_float(node, x, y)
    xshape = b.shape(x.id)
    shape, _ = _window(node, b, xshape, dilated=False)
    if p.padding_top != p.padding_bottom or p.padding_left != p.padding_right or \
            2 * p.padding_top > p.pooling_height or 2 * p.padding_left > p.pooling_width:
        raise unsupported(node, x, y)
    o = b.define(y.id, shape)
    b.emit(
        f"torch.ops.aten.avg_pool2d.out({b.permuted(b.ref(x.id), _NCHW)}, "
        f"{b.number([p.pooling_height, p.pooling_width])}, {b.number([p.stride_height, p.stride_width])}, "
        f"{b.number([p.padding_top, p.padding_left])}, False, False, None, "
        f"out={b.permuted(o, _NCHW)})"
    )
    emit_float_clamp(node, b, o)


def global_average_pooling(node: Node, b: Builder) -> None:
    p = node.p
    x, y = b.value(p.input_id), b.value(p.output_id)
    xshape = b.shape(x.id)
    if len(xshape) != 4:
        raise InvalidArgument(f"XNNPACK {node.where}: input {list(xshape)} is not 4-d")
    n, h, w, c = xshape
    shape = (n, 1, 1, c) if p.flags & FLAG_KEEP_DIMS else (n, c)
    if qmath.is_q8(x) and qmath.is_q8(y):
        return _q8_mean(node, b, x, y, shape, h * w)
    require_float(node, x, y)
    o = b.define(y.id, shape)
    if native.enabled(b) and h * w > 0:
        # XNNPACK's order (each channel's pixels in turn, times 1 / pixels): its bits, which torch.mean's are not.
        return native.emit_mean(b, b.ref(x.id), o, xshape, shape, *float_bounds(node))
    out4 = b.view(y.id, (n, 1, 1, c))
    b.emit(f"torch.mean({b.ref(x.id)}, dim=(1, 2), keepdim=True, out={out4})")
    emit_float_clamp(node, b, o)


def _q8_mean(node: Node, b: Builder, x, y, shape, count: int) -> None:
    """XNNPACK's 8-bit mean: an int32 sum requantized by (in/out scale) / count with the zero point folded in."""
    sx, zx = qmath.per_tensor(x, node.where)
    so, zo = qmath.per_tensor(y, node.where)
    if x.datatype != y.datatype:
        raise unsupported(node, x, y)
    f32 = np.float32
    scale = f32(f32(f32(sx) / f32(so)) * f32(f32(1.0) / f32(count)))
    zero = f32(f32(zo) - f32(f32(count * zx) * scale))
    lo, hi = qmath.qrange(y)
    qmin, qmax = qmath.output_bounds(node, y, node.where)
    o = b.define(y.id, shape)
    if native.enabled(b) and x.datatype == Datatype.QINT8:
        return native.emit_qmean(b, b.ref(x.id), o, b.shape(x.id), shape, float(scale), float(zero), max(lo, qmin),
                                 min(hi, qmax))
    n, c = shape[0], shape[-1]
    xf = b.scratch(b.shape(x.id))
    acc = b.scratch((n, 1, 1, c))
    b.emit(f"{xf}.copy_({b.ref(x.id)})")
    b.emit(f"torch.sum({xf}, dim=(1, 2), keepdim=True, out={acc})")
    b.emit(f"{acc}.mul_({b.number(float(scale))})")
    b.emit(f"{acc}.add_({b.number(float(zero))})")
    b.emit(f"torch.round({acc}, out={acc})")
    b.emit(f"{acc}.clamp_({b.number(max(lo, qmin))}, {b.number(min(hi, qmax))})")
    b.emit(f"{b.view(y.id, (n, 1, 1, c))}.copy_({acc})")


TRANSLATORS = {
    "XNNMaxPooling2d": max_pooling,
    "XNNAvgPooling2d": average_pooling,
    "XNNGlobalAvgPooling2d": global_average_pooling,
}
