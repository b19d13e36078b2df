"""Nodes that move elements without arithmetic: reshape, transpose, slice, concatenate, pad, resize.

They work on any datatype (8-bit values keep their quantization), except
resize, which interpolates and is float only.
"""

from __future__ import annotations

from pterun.backends.xnnpack.compiler import Builder, numel
from pterun.backends.xnnpack.graph import INVALID_ID, Node
from pterun.backends.xnnpack.nodes import native, qmath
from pterun.backends.xnnpack.nodes.common import require_float, unsupported
from pterun.errors import InvalidArgument, InvalidProgram
from pterun.native import geometry

FLAG_ALIGN_CORNERS = 0x8
_NCHW = (0, 3, 1, 2)


def _same_type(node: Node, *values) -> None:
    first = values[0]
    if any(v.datatype != first.datatype or v.quant != first.quant for v in values[1:]):
        raise unsupported(node, *values)


def _moved(node: Node, b: Builder):
    """The node's input and output, of one type (elements are moved, not computed), and the input's shape."""
    x, y = b.value(node.p.input_id), b.value(node.p.output_id)
    _same_type(node, x, y)
    return x, y, b.shape(x.id)


def reshape(node: Node, b: Builder) -> None:
    p = node.p
    x, y, xshape = _moved(node, b)
    dims = list(p.new_shape)
    if len(dims) != p.num_dims:
        raise InvalidProgram(f"XNNPACK {node.where}: num_dims {p.num_dims} but {len(dims)} dimensions")
    inferred = [i for i, d in enumerate(dims) if d == 0]
    total = numel(xshape)
    if len(inferred) > 1:
        raise InvalidProgram(f"XNNPACK {node.where}: more than one inferred dimension in {dims}")
    if inferred:
        rest = numel([d for d in dims if d])
        if rest == 0 or total % rest:
            raise InvalidArgument(f"XNNPACK {node.where}: cannot reshape {list(xshape)} to {dims}")
        dims[inferred[0]] = total // rest
    if numel(dims) != total:
        raise InvalidArgument(f"XNNPACK {node.where}: cannot reshape {list(xshape)} to {dims}")
    shape = tuple(dims)
    if y.external_id is None:
        b.define(y.id, shape, buffer=False)
        b.alias(y.id, x.id, lambda t: t.view(shape), f"{{x}}.reshape({b.number(shape)})")
        return
    o = b.define(y.id, shape)
    if native.moves(b, ()):
        n = numel(shape)
        native.emit_moves(b, o, shape, b.storage_dtype(y), [(b.ref(x.id), [n], [1], 0, [1], 0)])
        return
    b.emit(f"{o}.copy_({b.view(x.id, shape)})")


def transpose(node: Node, b: Builder) -> None:
    p = node.p
    x, y, xshape = _moved(node, b)
    perm = tuple(p.perm)
    if sorted(perm) != list(range(len(xshape))):
        raise InvalidArgument(f"XNNPACK {node.where}: {list(perm)} does not permute {len(xshape)} dimensions")
    shape = tuple(xshape[i] for i in perm)
    o = b.define(y.id, shape)
    if native.moves(b, (len(shape),)):
        strides = geometry.contiguous_strides(xshape)
        native.emit_moves(b, o, shape, b.storage_dtype(y), [
            (b.ref(x.id), shape, [strides[i] for i in perm], 0, geometry.contiguous_strides(shape), 0)])
        return
    b.emit(f"{o}.copy_({b.permuted(b.ref(x.id), perm)})")


def slice_(node: Node, b: Builder) -> None:
    p = node.p
    x, y, xshape = _moved(node, b)
    if not len(p.offsets) == len(p.sizes) == len(xshape):
        raise InvalidArgument(f"XNNPACK {node.where}: slice of {len(p.sizes)} dimensions of {list(xshape)}")
    starts, sizes = [], []
    for dim, offset, size in zip(xshape, p.offsets, p.sizes):
        # As XNNPACK: the slice ends at offset + size, where 0 means "to the end", clipped to the input.
        end = offset + size
        n = max(dim - offset, 0) if end <= 0 else max(end - offset, 0)
        start = min(offset, dim)
        starts.append(start)
        sizes.append(max(min(n, dim - start), 0))
    o = b.define(y.id, tuple(sizes))
    if native.moves(b, (len(sizes),)):
        strides = geometry.contiguous_strides(xshape)
        offset = sum(start * stride for start, stride in zip(starts, strides))
        native.emit_moves(b, o, sizes, b.storage_dtype(y), [
            (b.ref(x.id), sizes, strides, offset, geometry.contiguous_strides(sizes), 0)])
        return
    index = ", ".join(f"{b.number(s)}:{b.number(s + n)}" for s, n in zip(starts, sizes))
    b.emit(f"{o}.copy_({b.ref(x.id)}[{index}])")


def concatenate(node: Node, b: Builder) -> None:
    p = node.p
    count = int(node.kind[-1])
    ids = [p.input1_id, p.input2_id, p.input3_id, p.input4_id, p.input5_id][:count]
    if any(i == INVALID_ID for i in ids):
        raise InvalidProgram(f"XNNPACK {node.where}: missing input among {ids}")
    xs = [b.value(i) for i in ids]
    y = b.value(p.output_id)
    _same_type(node, *xs, y)
    shapes = [b.shape(x.id) for x in xs]
    rank = len(shapes[0])
    axis = p.axis
    if not 0 <= axis < rank or any(len(s) != rank for s in shapes) or any(
        s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:] for s in shapes
    ):
        raise InvalidArgument(f"XNNPACK {node.where}: cannot concatenate {[list(s) for s in shapes]} on {axis}")
    shape = list(shapes[0])
    shape[axis] = sum(s[axis] for s in shapes)
    o = b.define(y.id, tuple(shape))
    if native.moves(b, (rank,)):
        out_strides, pieces, at = geometry.contiguous_strides(shape), [], 0
        for x, xshape in zip(xs, shapes):
            pieces.append((b.ref(x.id), xshape, geometry.contiguous_strides(xshape), 0, out_strides,
                           at * out_strides[axis]))
            at += xshape[axis]
        native.emit_moves(b, o, shape, b.storage_dtype(y), pieces)
        return
    b.emit(f"torch.cat([{', '.join(b.ref(x.id) for x in xs)}], {b.number(axis)}, out={o})")


def constant_pad(node: Node, b: Builder) -> None:
    p = node.p
    x, y, xshape = _moved(node, b)
    pre, post = list(p.pre_paddings), list(p.post_paddings)
    if not len(pre) == len(post) == len(xshape):
        raise InvalidArgument(f"XNNPACK {node.where}: paddings {pre}, {post} for shape {list(xshape)}")
    shape = tuple(d + a + c for d, a, c in zip(xshape, pre, post))
    value = p.padding_value
    if x.quant is not None:
        # An 8-bit tensor is padded with the quantized padding value.
        scale, zp = qmath.per_tensor(y, node.where)
        lo, hi = qmath.qrange(y)
        value = qmath.quantize_bound(value, scale, zp, lo, hi)
    if native.moves(b, (len(shape),)):
        # The border never changes: a buffer filled once, its interior written each call (then copied whole into an
        # output).
        dtype = b.storage_dtype(y)
        if y.external_id is None:
            buf = o = b.define(y.id, shape, private=True)
            b.env[buf].fill_(value)
        else:
            o, buf = b.define(y.id, shape), b.scratch(shape, dtype, fill=value)
        strides = geometry.contiguous_strides(shape)
        offset = sum(a * stride for a, stride in zip(pre, strides))
        native.emit_moves(b, buf, shape, dtype, [
            (b.ref(x.id), xshape, geometry.contiguous_strides(xshape), 0, strides, offset)])
        if buf != o:
            native.emit_moves(b, o, shape, dtype, [(buf, [numel(shape)], [1], 0, [1], 0)])
        return
    if y.external_id is None:
        # The border never changes: fill it once, then write only the interior each call.
        buf = b.define(y.id, shape, private=True)
        b.env[buf].fill_(value)
        inner = b.bind(b.env[buf][tuple(slice(a, a + d) for a, d in zip(pre, xshape))], f"{buf}_in")
        b.emit(f"{inner}.copy_({b.ref(x.id)})")
        return
    o = b.define(y.id, shape)
    index = ", ".join(f"{b.number(a)}:{b.number(a + d)}" for a, d in zip(pre, xshape))
    b.emit(f"{o}.fill_({b.number(float(value))})")
    b.emit(f"{o}[{index}].copy_({b.ref(x.id)})")


def resize_bilinear(node: Node, b: Builder) -> None:
    p = node.p
    x, y = b.value(p.input_id), b.value(p.output_id)
    require_float(node, x, y)
    xshape = b.shape(x.id)
    if len(xshape) != 4 or p.new_height < 1 or p.new_width < 1:
        raise InvalidArgument(f"XNNPACK {node.where}: cannot resize {list(xshape)} to {p.new_height}x{p.new_width}")
    n, _, _, c = xshape
    o = b.define(y.id, (n, p.new_height, p.new_width, c))
    align = bool(p.flags & FLAG_ALIGN_CORNERS)
    b.emit(
        f"torch.ops.aten.upsample_bilinear2d.out({b.permuted(b.ref(x.id), _NCHW)}, "
        f"{b.number([p.new_height, p.new_width])}, {align}, None, None, out={b.permuted(o, _NCHW)})"
    )


TRANSLATORS = {
    "XNNStaticReshape": reshape,
    "XNNStaticTranspose": transpose,
    "XNNStaticSlice": slice_,
    "XNNConcatenate2": concatenate,
    "XNNConcatenate3": concatenate,
    "XNNConcatenate4": concatenate,
    "XNNConcatenate5": concatenate,
    "XNNStaticConstantPad": constant_pad,
    "XNNStaticResizeBilinear2D": resize_bilinear,
}
