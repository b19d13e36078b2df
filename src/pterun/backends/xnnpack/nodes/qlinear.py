"""Quantized fully connected nodes on the CPU, as integer products (``torch._int_mm``: int8 x int8 -> int32).

The int32 accumulators are XNNPACK's, exactly: the input's zero point is
folded into the bias at load (sum((x - zx) w) + b = sum(x w) + (b - zx sum(w)),
in wrapping int32 as XNNPACK packs it), so 8-bit rows enter the product as
they are. Dynamically quantized rows are corrected by their own zero point
times the weights' column sums after the product. What follows is XNNPACK's
float32 arithmetic: requantization (``qmath.emit_requantize``) for 8-bit
outputs, the row and channel scales and the bias for float ones.
"""

from __future__ import annotations

import torch

from pterun.backends.xnnpack.graph import Datatype
from pterun.backends.xnnpack.nodes import qmath
from pterun.backends.xnnpack.nodes.common import emit_float_clamp, unsupported
from pterun.errors import InvalidArgument, InvalidProgram

QUANTIZED_WEIGHTS = (Datatype.QCINT8, Datatype.QINT8)
WEIGHTS_4BIT = (Datatype.QCINT4, Datatype.QBINT4)


def constant_filter(node, w, transposed: bool) -> torch.Tensor:
    """The constant filter as [N, K] integers."""
    if w.data is None:
        raise unsupported(node, w)
    return w.data if not transposed else w.data.t()


def unpack_4bit(packed: torch.Tensor, k: int) -> torch.Tensor:
    """[N, ceil(K/2)] bytes, element 2i in the low nibble and 2i+1 in the high one, stored plus 8 -> int [N, K]."""
    low, high = (packed & 0xF).to(torch.int16), (packed >> 4).to(torch.int16)
    return torch.stack([low, high], dim=2).reshape(packed.shape[0], -1)[:, :k] - 8


def int_bias(node, bias, n: int) -> torch.Tensor:
    """The int32 bias of an 8-bit product as int64 [n] (zeros without one)."""
    if bias is None:
        return torch.zeros(n, dtype=torch.int64)
    if bias.data is None or bias.datatype not in (Datatype.QINT32, Datatype.QCINT32, Datatype.INT32):
        raise unsupported(node, bias)
    if bias.data.numel() != n:
        raise InvalidProgram(f"XNNPACK {node.where}: bias has {bias.data.numel()} values for {n} channels")
    return bias.data.reshape(n).to(torch.int64)


def _operand(wnk: torch.Tensor) -> torch.Tensor:
    # [K, N] as the transpose of a contiguous [N, K]: the layout _int_mm multiplies fastest, one row or many.
    return wnk.to(torch.int8).contiguous().t()


def static_q8(node, b, x, w, bias, y, rows: int, k: int, n: int, shape, transposed: bool) -> None:
    """8-bit activations and int8 weights, int32 bias, 8-bit output: XNNPACK's qs8 / qs8_qc8w GEMM."""
    sx, zx = qmath.per_tensor(x, node.where)
    so, zo = qmath.per_tensor(y, node.where)
    qmin, qmax = qmath.output_bounds(node, y, node.where)
    unsigned = x.datatype == Datatype.QUINT8
    zx_signed = zx - 128 if unsigned else zx  # uint8 rows are multiplied as int8 rows: top bit flipped, minus 128

    def prepare():
        wnk = constant_filter(node, w, transposed).to(torch.int64)
        folded = int_bias(node, bias, n) - zx_signed * wnk.sum(1)
        scales = qmath.requant_scales(sx, qmath.weight_scales(w, n, node.where), so, node.where)
        return _operand(wnk), folded.to(torch.int32), scales

    wkn, folded, rq = b.cached("q8i", prepare)
    b.define(y.id, shape)
    x2, o2 = b.view(x.id, (rows, k)), b.view(y.id, (rows, n))
    if unsigned:
        flipped = b.scratch((rows, k), torch.uint8)
        b.emit(f"torch.bitwise_xor({x2}, 128, out={flipped})")
        x2 = b.bind(b.env[flipped].view(torch.int8), "xs")
    acc = b.scratch((rows, n), torch.int32)
    b.emit(f"torch._int_mm({x2}, {b.bind(wkn, 'w')}, out={acc})")
    b.emit(f"{acc}.add_({b.bind(folded, 'bias')})")
    qmath.emit_requantize(b, acc, b.bind(rq, "rq"), zo, qmin, qmax, o2, work=b.scratch((rows, n)))


def dynamic(node, b, q, w, bias, y, rows: int, k: int, n: int, shape, transposed: bool) -> None:
    """Rows quantized at run time times int8 (or 4-bit per-channel) weights, float output: qd8_f32_qc8w."""

    def prepare():
        data = constant_filter(node, w, transposed)
        wnk = (unpack_4bit(data, k) if w.datatype in WEIGHTS_4BIT else data).to(torch.int64)
        return _operand(wnk), wnk.sum(1).to(torch.int32), qmath.weight_scales(w, n, node.where)

    wkn, sums, wscale = b.cached("qd8i", prepare)
    if q.rows != rows:
        raise InvalidArgument(f"XNNPACK {node.where}: {q.rows} quantized rows for {rows} input rows")
    ints, zero_points = q.ints(b)
    o = b.define(y.id, shape)
    o2 = b.view(y.id, (rows, n))
    acc = b.scratch((rows, n), torch.int32)
    b.emit(f"torch._int_mm({ints}, {b.bind(wkn, 'w')}, out={acc})")
    b.emit(f"torch.addr({acc}, {zero_points}, {b.bind(sums, 'wsum')}, alpha=-1, out={acc})")
    qmath.emit_dequantize(b, o2, q.scales, b.bind(wscale, "wscale"), bias, acc=acc)
    emit_float_clamp(node, b, o)
