"""Shape operators: views (no dispatch) and strided copies (shaders/copy.wgsl).

Every tensor of a compiled graph is contiguous in its buffer, so a view,
squeeze, unsqueeze, clone or same-type copy is the source's memory under a
new shape and costs nothing at run time. Everything that moves data
(permute, expand, slice, select, cat, split, repeat, flip, pad, casts) is one
strided-copy dispatch per output (per input for cat).
"""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.graph import DType
from pterun.backends.webgpu.ops.common import contiguous_strides, grid, norm_dim, padded
from pterun.backends.webgpu.slots import ELEM, TSlot
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument


def convert_expr(src: TSlot, dst: TSlot) -> str:
    if dst.dtype == DType.BOOL and src.dtype != DType.BOOL:
        return f"select(0u, 1u, x != {src.elem}(0))"
    if dst.elem == src.elem:
        return "x"
    return f"{dst.elem}(x)"


def copy(b: NodeBuilder, src: TSlot, dst: TSlot, plan) -> None:
    """One strided copy from ``src`` to ``dst``; ``plan()`` gives (sizes, src strides, src offset,
    dst strides, dst offset) for the current shapes."""

    def params():
        sizes, sst, soff, dstr, doff = plan()
        n = math.prod(sizes)
        flags = (1 if list(sst) == contiguous_strides(sizes) else 0) | (
            2 if list(dstr) == contiguous_strides(sizes) else 0
        )
        return [n, len(sizes), soff, doff, flags, 0, 0, 0, *padded(sizes, 1), *padded(sst), *padded(dstr)]

    def work():
        sizes = plan()[0]
        return grid(math.prod(sizes))

    b.dispatch(
        "copy", {"TI": src.elem, "TO": dst.elem, "CONVERT": convert_expr(src, dst)}, [src, dst], params, work
    )


def _view_shape(sizes: list[int], n: int) -> tuple[int, ...]:
    sizes = list(sizes)
    if sizes.count(-1) > 1:
        raise InvalidArgument(f"view sizes {sizes} have more than one -1")
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = n // known if known else 0
    if math.prod(sizes) != n:
        raise InvalidArgument(f"cannot view {n} elements as {sizes}")
    return tuple(sizes)


def build_view(b: NodeBuilder, op) -> None:
    x = b.tensor(op.args[0])
    sizes = b.ints(op.args[1])
    b.alias(op.args[-1], x, lambda: _view_shape(sizes(), x.numel))


def build_squeeze(b: NodeBuilder, op) -> None:
    x = b.tensor(op.args[0])
    serialized = b.graph.tensor(op.args[0]).dims
    rank = len(serialized)
    if op.name == "aten.squeeze_copy.default":
        dims = [d for d in range(rank) if serialized[d] == 1]
    else:
        dims = [norm_dim(d, rank) for d in b.static_ints(op.args[1])]
        # Whether a dimension goes is decided by the serialized shape: the output's rank is fixed.
        dims = [d for d in dims if serialized[d] == 1]
    keep = [d for d in range(rank) if d not in dims]
    b.alias(op.args[-1], x, lambda: tuple(x.shape[d] for d in keep))


def build_unsqueeze(b: NodeBuilder, op) -> None:
    x = b.tensor(op.args[0])
    rank = b.rank(op.args[0])
    dim = norm_dim(b.scalar(op.args[1]), rank + 1)

    def shape():
        s = list(x.shape)
        s.insert(dim, 1)
        return tuple(s)

    b.alias(op.args[-1], x, shape)


def build_identity(b: NodeBuilder, op) -> None:
    """clone, alias, prepack, copy and type conversions.

    Values are never overwritten once computed, so a copy that keeps the element type can be the
    source's own memory; only a change of what the words hold costs a dispatch.
    """
    src_vid = op.args[1] if op.name == "aten.copy.default" else op.args[0]
    x = b.tensor(src_vid)
    out = b.graph.tensor(op.args[-1])
    # To bool, or to half from a wider float, the values change (bools become 0/1, floats are rounded).
    narrows = out.dtype in (DType.BOOL, DType.FLOAT16) and x.dtype != out.dtype
    same = ELEM[out.dtype] == x.elem and not narrows
    if same:
        b.alias(op.args[-1], x, lambda: x.shape)
        return
    y = b.out(op.args[-1], lambda: x.shape)
    copy(b, x, y, lambda: (x.shape, contiguous_strides(x.shape), 0, contiguous_strides(x.shape), 0))


def build_permute(b: NodeBuilder, op) -> None:
    x = b.tensor(op.args[0])
    rank = b.rank(op.args[0])
    if op.name == "aten.t_copy.default":
        dims = [1, 0] if rank == 2 else list(range(rank))
    else:
        dims = [norm_dim(d, rank) for d in b.static_ints(op.args[1])]
    if sorted(dims) != list(range(rank)):
        raise InvalidArgument(f"permute dims {dims} are not a permutation of {rank} dims")
    y = b.out(op.args[-1], lambda: tuple(x.shape[d] for d in dims))

    def plan():
        st = contiguous_strides(x.shape)
        return y.shape, [st[d] for d in dims], 0, contiguous_strides(y.shape), 0

    copy(b, x, y, plan)


def build_expand(b: NodeBuilder, op) -> None:
    x = b.tensor(op.args[0])
    sizes = b.ints(op.args[1])

    def shape():
        want = list(sizes())
        pad = len(want) - x.ndim
        return tuple(x.shape[d - pad] if (s == -1 and d >= pad) else s for d, s in enumerate(want))

    y = b.out(op.args[-1], shape)

    def plan():
        pad = y.ndim - x.ndim
        st = contiguous_strides(x.shape)
        strides = [0] * y.ndim
        for d in range(x.ndim):
            if x.shape[d] != 1:
                if x.shape[d] != y.shape[d + pad]:
                    raise InvalidArgument(f"cannot expand {list(x.shape)} to {list(y.shape)}")
                strides[d + pad] = st[d]
        return y.shape, strides, 0, contiguous_strides(y.shape), 0

    copy(b, x, y, plan)


def build_repeat(b: NodeBuilder, op) -> None:
    x = b.tensor(op.args[0])
    reps = b.static_ints(op.args[1])
    y = b.out(op.args[-1], lambda: _repeat_shape(x.shape, reps))

    def plan():
        pad = len(reps) - x.ndim
        xs = (1,) * pad + tuple(x.shape)
        st = [0] * pad + contiguous_strides(x.shape)
        # Index space [r0, s0, r1, s1, ...]: the repeat coordinate has source stride 0.
        sizes, sst = [], []
        for r, s, t in zip(reps, xs, st, strict=True):
            sizes += [r, s]
            sst += [0, t]
        dst_full = contiguous_strides(y.shape)
        dstr = []
        for k, s in enumerate(xs):
            dstr += [dst_full[k] * s, dst_full[k]]
        return sizes, sst, 0, dstr, 0

    copy(b, x, y, plan)


def _repeat_shape(shape, reps):
    pad = len(reps) - len(shape)
    xs = (1,) * pad + tuple(shape)
    return tuple(r * s for r, s in zip(reps, xs, strict=True))


def _slice_bounds(size: int, start, end, step: int) -> tuple[int, int]:
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, max(0, -(-(end - start) // step))


def build_slice(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    rank = b.rank(args[0])
    dim = norm_dim(b.scalar(args[1], 0), rank)
    start = b.opt_int(args[2])
    end = b.opt_int(args[3])
    step = b.scalar(args[4], 1) if len(args) > 5 else 1
    if step <= 0:
        raise DelegateInvalidCompatibility(f"slice step {step} is not supported")

    def bounds():
        return _slice_bounds(x.shape[dim], start(), end(), step)

    def shape():
        s = list(x.shape)
        s[dim] = bounds()[1]
        return tuple(s)

    y = b.out(args[-1], shape)

    def plan():
        st = contiguous_strides(x.shape)
        first = bounds()[0]
        sst = list(st)
        sst[dim] *= step
        return y.shape, sst, first * st[dim], contiguous_strides(y.shape), 0

    copy(b, x, y, plan)


def build_select(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    rank = b.rank(args[0])
    dim = norm_dim(b.scalar(args[1]), rank)
    index = b.int(args[2])

    def at():
        i, size = index(), x.shape[dim]
        if not -size <= i < size:
            raise InvalidArgument(f"select index {i} is out of range for size {size}")
        return i % size

    y = b.out(args[-1], lambda: tuple(s for d, s in enumerate(x.shape) if d != dim))

    def plan():
        st = contiguous_strides(x.shape)
        return (
            y.shape,
            [s for d, s in enumerate(st) if d != dim],
            at() * st[dim],
            contiguous_strides(y.shape),
            0,
        )

    copy(b, x, y, plan)


def build_cat(b: NodeBuilder, op) -> None:
    args = op.args
    xs = b.tensors(args[0])
    rank = b.rank(args[-1])
    dim = norm_dim(b.scalar(args[1], 0) if len(args) > 2 else 0, rank)
    # torch.cat skips 1-d empty tensors whatever the other inputs' rank.
    parts = [x for x in xs if b.rank(x.vid) == rank]

    def shape():
        base = list(parts[0].shape)
        base[dim] = sum(x.shape[dim] for x in parts)
        return tuple(base)

    y = b.out(args[-1], shape)
    for k, x in enumerate(parts):

        def plan(k=k, x=x):
            ost = contiguous_strides(y.shape)
            offset = sum(p.shape[dim] for p in parts[:k]) * ost[dim]
            return x.shape, contiguous_strides(x.shape), 0, ost, offset

        copy(b, x, y, plan)


def build_split(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    rank = b.rank(args[0])
    dim = norm_dim(b.scalar(args[2], 0), rank)
    outs = b.outputs(args[-1])
    if op.name == "aten.split_with_sizes_copy.default":
        sizes = b.static_ints(args[1])

        def chunks():
            return list(sizes)
    else:
        size = b.int(args[1])

        def chunks():
            total, step = x.shape[dim], size()
            return [min(step, total - s) for s in range(0, total, step)] if step else []

    for k, vid in enumerate(outs):

        def shape(k=k):
            s = list(x.shape)
            c = chunks()
            s[dim] = c[k] if k < len(c) else 0
            return tuple(s)

        y = b.out(vid, shape)

        def plan(k=k, y=y):
            st = contiguous_strides(x.shape)
            return y.shape, st, sum(chunks()[:k]) * st[dim], contiguous_strides(y.shape), 0

        copy(b, x, y, plan)


def build_flip(b: NodeBuilder, op) -> None:
    x = b.tensor(op.args[0])
    rank = b.rank(op.args[0])
    dims = {norm_dim(d, rank) for d in b.static_ints(op.args[1])}
    y = b.out(op.args[-1], lambda: x.shape)

    def plan():
        st = contiguous_strides(x.shape)
        offset = sum((x.shape[d] - 1) * st[d] for d in dims if x.shape[d] > 0)
        return (
            x.shape,
            [-s if d in dims else s for d, s in enumerate(st)],
            offset,
            contiguous_strides(x.shape),
            0,
        )

    copy(b, x, y, plan)


def build_pad(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    pads = b.static_ints(args[1])
    value = b.scalar(args[2], 0) if len(args) > 3 else 0
    if any(p < 0 for p in pads):
        raise DelegateInvalidCompatibility("constant_pad_nd with negative padding is not supported")

    def widths():
        w = [(0, 0)] * x.ndim
        for k in range(len(pads) // 2):
            d = x.ndim - 1 - k
            w[d] = (pads[2 * k], pads[2 * k + 1])
        return w

    y = b.out(args[-1], lambda: tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, widths(), strict=True)))
    fill_value = float(value) if y.elem == "f32" else int(value)
    b.dispatch(
        "fill",
        {"TO": y.elem},
        [y],
        lambda: [y.numel, fill_value, 0 if y.elem != "f32" else 0.0],
        lambda: grid(y.numel),
    )

    def plan():
        ost = contiguous_strides(y.shape)
        offset = sum(lo * s for (lo, _), s in zip(widths(), ost, strict=True))
        return x.shape, contiguous_strides(x.shape), 0, ost, offset

    copy(b, x, y, plan)


OPS = {
    "aten.view_copy.default": build_view,
    "aten._unsafe_view.default": build_view,
    "aten.squeeze_copy.dims": build_squeeze,
    "aten.squeeze_copy.dim": build_squeeze,
    "aten.squeeze_copy.default": build_squeeze,
    "aten.unsqueeze_copy.default": build_unsqueeze,
    "aten.clone.default": build_identity,
    "aten.alias_copy.default": build_identity,
    "aten.copy.default": build_identity,
    "et_vk.prepack.default": build_identity,
    "dim_order_ops._clone_dim_order.default": build_identity,
    "dim_order_ops._to_dim_order_copy.default": build_identity,
    "aten._to_copy.default": build_identity,
    "aten.permute_copy.default": build_permute,
    "aten.t_copy.default": build_permute,
    "aten.expand_copy.default": build_expand,
    "aten.repeat.default": build_repeat,
    "aten.slice_copy.Tensor": build_slice,
    "aten.select_copy.int": build_select,
    "aten.cat.default": build_cat,
    "aten.split_with_sizes_copy.default": build_split,
    "aten.split_copy.Tensor": build_split,
    "aten.flip.default": build_flip,
    "aten.constant_pad_nd.default": build_pad,
}

__all__ = ["OPS", "copy"]
