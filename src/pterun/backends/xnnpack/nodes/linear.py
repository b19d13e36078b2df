"""Fully connected and batch matrix multiply nodes.

A fully connected node multiplies the input, flattened to rows of its last
dimension, by a filter of [output channels, input channels] (or its transpose
with XNN_FLAG_TRANSPOSE_WEIGHTS) and adds an optional bias. The filter may be
a constant or a value computed in the graph (a matmul by an activation).
"""

from __future__ import annotations

import torch

from pterun.backends.xnnpack.compiler import Builder, broadcast, numel
from pterun.backends.xnnpack.graph import INVALID_ID, Blockwise, Datatype, DynamicRows, Node
from pterun.backends.xnnpack.nodes import native, packed, qblock, qlinear, qmath
from pterun.backends.xnnpack.nodes.common import emit_float_clamp, is_float, require_float, unsupported
from pterun.errors import InvalidArgument, InvalidProgram

FLAG_TRANSPOSE_WEIGHTS = 0x1
_QUANTIZED_WEIGHTS, _4BIT_WEIGHTS = qlinear.QUANTIZED_WEIGHTS, qlinear.WEIGHTS_4BIT


def fully_connected(node: Node, b: Builder) -> None:
    p = node.p
    x, w, y = b.value(p.input1_id), b.value(p.filter_id), b.value(p.output_id)
    bias = None if p.bias_id == INVALID_ID else b.value(p.bias_id)
    transposed = bool(p.flags & FLAG_TRANSPOSE_WEIGHTS)
    wshape = b.shape(w.id)
    if len(wshape) != 2:
        raise InvalidProgram(f"XNNPACK {node.where}: filter has shape {list(wshape)}; expected 2 dimensions")
    k, n = (wshape[0], wshape[1]) if transposed else (wshape[1], wshape[0])
    xshape = b.shape(x.id)
    if not xshape or xshape[-1] != k:
        raise InvalidArgument(f"XNNPACK {node.where}: input {list(xshape)} does not have {k} input channels")
    if bias is not None and tuple(b.shape(bias.id)) != (n,):
        raise InvalidProgram(f"XNNPACK {node.where}: bias {list(b.shape(bias.id))} for {n} output channels")
    rows = numel(xshape[:-1])
    shape = (*xshape[:-1], n)
    if isinstance(x.quant, DynamicRows):
        return _dynamic(node, b, x, w, bias, y, rows, k, n, shape, transposed)
    if qmath.is_q8(x) and w.datatype in _QUANTIZED_WEIGHTS:
        return _static_q8(node, b, x, w, bias, y, rows, k, n, shape, transposed)
    require_float(node, x, w, y, *([bias] if bias is not None else []))
    w_nk = None if w.data is None else (w.data.t() if transposed else w.data)
    if _native_product(node, b, x, w_nk, bias, y, rows, k, n, shape):
        return
    if packed.fully_connected(node, b, x, w_nk, bias, y, rows, k, n, shape):
        return
    o = b.define(y.id, shape)
    x2 = b.view(x.id, (rows, k))
    o2 = b.view(y.id, (rows, n))
    wt = _kn(b, w.id, transposed)
    if bias is None:
        b.emit(f"torch.mm({x2}, {wt}, out={o2})")
    else:
        b.emit(f"torch.addmm({b.ref(bias.id)}, {x2}, {wt}, out={o2})")
    emit_float_clamp(node, b, o)


# The native product's work limit by float family (multiply-adds of a call): past it, oneDNN's packed kernels win.
NATIVE_GEMM_MACS = {"avx512f": 1 << 21, "avx2": 1 << 20}


def _native_product(node: Node, b: Builder, x, w_nk: torch.Tensor | None, bias, y, rows: int, k: int, n: int,
                    shape) -> bool:
    """A float32 product of ``x``'s rows with a constant filter [n, k] and bias through the native kernel (XNNPACK's
    order, its clamp fused), where it runs here and the call is small enough to win: PyTorch's addmm and the clamp
    apart cost 3-9 us a call."""
    lo, hi = node.output_min, node.output_max
    if (w_nk is None or w_nk.dtype != torch.float32 or not native.float_enabled(b) or not lo <= hi
            or x.datatype != Datatype.FP32 or y.datatype != Datatype.FP32
            or (bias is not None and (bias.data is None or bias.datatype != Datatype.FP32))
            or rows * k * n > NATIVE_GEMM_MACS.get(native.float_family() or "", 0)):
        return False
    weights = b.cached("gemm", lambda: native.conv_pack(w_nk, None if bias is None else bias.data))
    o = b.define(y.id, shape)
    native.emit_fully_connected(b, b.ref(x.id), weights, o, rows, k, n, lo, hi)
    return True


def _kn(b: Builder, vid: int, transposed: bool) -> str:
    """The filter as a [K, N] operand (a view: matmul reads transposed operands as they are)."""
    name = b.ref(vid)
    if transposed:
        return name
    if name in b.env:
        return b.bind(b.env[name].t(), f"{name}_t")
    return f"{name}.t()"


def _static_q8(node, b, x, w, bias, y, rows, k, n, shape, transposed) -> None:
    """int8 activations and weights, int32 bias, int8 output: XNNPACK's qs8 / qs8_qc8w GEMM."""
    if not qmath.is_q8(y) or x.datatype != y.datatype:
        raise unsupported(node, x, w, y)
    sx, zx = qmath.per_tensor(x, node.where)
    so, zo = qmath.per_tensor(y, node.where)
    qmin, qmax = qmath.output_bounds(node, y, node.where)
    lo, hi = qmath.qrange(x)
    if b.device.type == "cpu" and qlinear.static_q8(node, b, x, w, bias, y, rows, k, n, shape, transposed):
        return

    def prepare():
        wnk = qlinear.constant_filter(node, w, transposed).to(torch.float64)  # [N, K]
        scales = qmath.weight_scales(w, n, node.where)
        bias_int = qlinear.int_bias(node, bias, n).to(torch.float64)
        span = max(hi - zx, zx - lo)
        ranges = qmath.pieces(wnk.abs(), span)
        # the bias joins the float32 product where the sums stay exact with it, else the float64 sum
        worst = float(wnk.abs().sum(1).max()) * span if k else 0.0
        in_product = len(ranges) == 1 and worst + (float(bias_int.abs().max()) if n else 0.0) < qmath.EXACT_F32
        added = bias_int.float() if in_product else bias_int
        return (wnk.t().contiguous().float().to(b.device), added.to(b.device),
                qmath.requant_scales(sx, scales, so, node.where).to(b.device), ranges)

    wkn, bias_t, rq, ranges = b.cached("q8", prepare)
    b.define(y.id, shape)
    x2, o2 = b.view(x.id, (rows, k)), b.view(y.id, (rows, n))
    xf, acc = b.scratch((rows, k)), b.scratch((rows, n))
    b.emit(f"{xf}.copy_({x2})")
    if zx:
        b.emit(f"{xf}.sub_({b.number(zx)})")
    _emit_exact_product(b, xf, wkn, ranges, bias_t, acc, rows, n)
    qmath.emit_requantize(b, acc, b.bind(rq, "rq"), zo, qmin, qmax, o2)


def _emit_exact_product(b, xf: str, wkn: torch.Tensor, ranges, bias: torch.Tensor | None, out: str, rows: int,
                        n: int) -> None:
    """float32 ``out`` [M, N] = float32 rows of integers ``xf`` [M, K] times integer weights ``wkn`` [K, N]
    (float32) plus ``bias``, rounded once: one float32 product where its sums are exact (a float32 bias is
    added in it), else a float32 product per range of ``ranges`` (each exact) summed in float64 with the
    (float64) bias."""
    w = b.bind(wkn, "w")
    if len(ranges) == 1 and (bias is None or bias.dtype == torch.float32):
        if bias is None:
            b.emit(f"torch.mm({xf}, {w}, out={out})")
        else:
            b.emit(f"torch.addmm({b.bind(bias, 'bias')}, {xf}, {w}, out={out})")
        b.route("float32 product of integers")
        return
    parts = b.scratch((len(ranges), rows, n))
    for i, (start, stop) in enumerate(ranges):
        piece = b.bind(b.env[xf][:, start:stop], "xpiece")
        b.emit(f"torch.mm({piece}, {b.bind(wkn[start:stop], 'wpiece')}, out={b.bind(b.env[parts][i], 'part')})")
    total = b.scratch((rows, n), torch.float64)
    b.emit(f"torch.sum({parts}, 0, dtype=torch.float64, out={total})")
    if bias is not None:
        b.emit(f"{total}.add_({b.bind(bias, 'bias')})")
    b.emit(f"{out}.copy_({total})")
    b.route(f"float32 product of integers in {len(ranges)} pieces, summed in float64")


def _dynamic(node, b, x, w, bias, y, rows, k, n, shape, transposed) -> None:
    """Rows quantized at run time times int8 weights, float output: XNNPACK's qd8_f32_qc8w GEMM."""
    if w.datatype not in (*_QUANTIZED_WEIGHTS, *_4BIT_WEIGHTS) or not is_float(y) or y.datatype != Datatype.FP32:
        raise unsupported(node, x, w, y)
    if bias is not None and (bias.datatype != Datatype.FP32 or bias.data is None):
        raise unsupported(node, bias)
    q = b.dynamic.get(x.id)
    if q is None:
        raise unsupported(node, x)
    cpu = b.device.type == "cpu"
    if cpu and not isinstance(w.quant, Blockwise) and qlinear.dynamic(node, b, q, w, bias, y, rows, k, n, shape,
                                                                       transposed):
        return
    if not transposed and isinstance(w.quant, Blockwise) and qblock.applies(w, k, n):
        if q.rows != rows:
            raise InvalidArgument(f"XNNPACK {node.where}: {q.rows} quantized rows for {rows} input rows")
        qblock.dynamic(node, b, q, w, bias, y, rows, k, n, shape)
        return

    def prepare():
        if isinstance(w.quant, Blockwise):
            # Block scales are folded into the weights (exact: a 4-bit integer times a bf16 scale), so
            # the products are summed in another order than XNNPACK's per-block sums: float rounding only.
            if transposed or w.quant.axis != 0:
                raise unsupported(node, w)
            ints, size, scales = qlinear.unpack_4bit(w.data, k, torch.float32), w.quant.block_size, w.quant.scales
            if ints.is_contiguous() and k == size * scales.shape[1]:  # whole blocks: scaled in place
                ints.view(n, -1, size).mul_(scales.unsqueeze(2))
            else:
                ints = ints * scales.repeat_interleave(size, dim=1)[:, :k]
            return ints.t().contiguous().to(b.device), torch.ones(n, device=b.device), None
        if w.datatype in _4BIT_WEIGHTS:
            if transposed:
                raise unsupported(node, w)
            wnk = qlinear.unpack_4bit(qlinear.constant_filter(node, w, transposed), k, torch.float64)
        else:
            wnk = qlinear.constant_filter(node, w, transposed).to(torch.float64)
        scales = qmath.weight_scales(w, n, node.where)
        return wnk.t().contiguous().float().to(b.device), scales.to(b.device), qmath.pieces(wnk.abs(), 255)

    wkn, wscale, ranges = b.cached("qd8", prepare)
    if q.rows != rows:
        raise InvalidArgument(f"XNNPACK {node.where}: {q.rows} quantized rows for {rows} input rows")
    o = b.define(y.id, shape)
    o2 = b.view(y.id, (rows, n))
    if ranges is None:  # block-scaled weights folded into floats
        b.emit(f"torch.mm({q.centered(b)}, {b.bind(wkn, 'w')}, out={o2})")
        b.route("float32 product of block-scaled weights")
    else:
        _emit_exact_product(b, q.centered(b), wkn, ranges, None, o2, rows, n)
    qmath.emit_dequantize(b, o2, q.scales, b.bind(wscale, "wscale"), bias)
    emit_float_clamp(node, b, o)


def batch_matrix_multiply(node: Node, b: Builder) -> None:
    p = node.p
    x1, x2, y = b.value(p.input1_id), b.value(p.input2_id), b.value(p.output_id)
    require_float(node, x1, x2, y)
    s1, s2 = b.shape(x1.id), b.shape(x2.id)
    transposed = bool(p.flags & FLAG_TRANSPOSE_WEIGHTS)
    if len(s1) < 2 or len(s2) < 2:
        raise InvalidArgument(f"XNNPACK {node.where}: operands {list(s1)} and {list(s2)} are not matrices")
    m, k = s1[-2:]
    k2, n = (s2[-1], s2[-2]) if transposed else s2[-2:]
    if k != k2:
        raise InvalidArgument(f"XNNPACK {node.where}: cannot multiply {list(s1)} by {list(s2)}")
    batch = broadcast(s1[:-2], s2[:-2], f"{node.where} batch dimensions of {list(s1)} and {list(s2)}")
    o = b.define(y.id, (*batch, m, n))
    a, c = b.ref(x1.id), b.ref(x2.id)
    if transposed:
        c = f"{c}.transpose(-1, -2)"
    if s1[:-2] == batch and s2[:-2] == batch:
        nb = numel(batch)
        a3 = b.view(x1.id, (nb, m, k))
        c3 = b.view(x2.id, (nb, *s2[-2:]))
        if transposed:
            c3 = f"{c3}.transpose(1, 2)"
        b.emit(f"torch.bmm({a3}, {c3}, out={b.view(y.id, (nb, m, n))})")
    else:
        b.emit(f"torch.matmul({a}, {c}, out={o})")


TRANSLATORS = {
    "XNNFullyConnected": fully_connected,
    "XNNBatchMatrixMultiply": batch_matrix_multiply,
}
