"""Quantized fully connected nodes on the CPU, as integer products (``torch._int_mm``: int8 x int8 -> int32).

The int32 accumulators are XNNPACK's, exactly: the input's zero point is
folded into the bias at load (sum((x - zx) w) + b = sum(x w) + (b - zx sum(w)),
in wrapping int32 as XNNPACK packs it), so 8-bit rows enter the product as
they are. Dynamically quantized rows are corrected by their own zero point
times the weights' column sums after the product. What follows is XNNPACK's
float32 arithmetic: requantization (``qmath.emit_requantize``) for 8-bit
outputs, the row and channel scales and the bias for float ones.

Larger products go to oneDNN's u8 x s8 matrix product with prepacked weights
(``onednn::qlinear_pointwise``, up to twice as fast as ``_int_mm``'s s8 x s8),
which adds its float32 conversion of the int32 sum to a float32 buffer
holding the bias (8-bit outputs) or the rows' zero-point corrections (float
outputs: oneDNN takes one zero point per tensor, not per row). While both
addends are exact, below 2**24, their float32 sum is the exact sum rounded
once, which is XNNPACK's int32-to-float conversion of its accumulator. A
layer whose sums may reach past 2**24 only goes this way when its output is
8-bit and such a sum, times its requantization scale, saturates the output
either way (checked per channel at load from the weights' absolute sums and
the scales); else it stays with ``_int_mm``.

Either integer product is used only where it is exact on this CPU
(``isa.py``: VNNI, and a probe); where neither is, ``static_q8`` and
``dynamic`` decline (return False) and the node takes the float products of
``linear.py``, which are exact too.
"""

from __future__ import annotations

import torch

from pterun.backends.xnnpack.graph import Datatype
from pterun.backends.xnnpack.nodes import isa, native, qmath
from pterun.backends.xnnpack.nodes.common import emit_float_clamp, unsupported
from pterun.errors import InvalidArgument, InvalidProgram

QUANTIZED_WEIGHTS = (Datatype.QCINT8, Datatype.QINT8)
ONEDNN_MIN_MACS = 1 << 23  # below this, oneDNN's fixed cost per call (~15 us) outweighs its faster product
WEIGHTS_4BIT = (Datatype.QCINT4, Datatype.QBINT4)


def constant_filter(node, w, transposed: bool) -> torch.Tensor:
    """The constant filter as [N, K] integers."""
    if w.data is None:
        raise unsupported(node, w)
    return w.data if not transposed else w.data.t()


def unpack_4bit(packed: torch.Tensor, k: int, dtype: torch.dtype = torch.int16) -> torch.Tensor:
    """[N, ceil(K/2)] bytes, element 2i in the low nibble and 2i+1 in the high one, stored plus 8 -> ``dtype``
    [N, K] (int16, or any dtype that holds -8..7 exactly), by one lookup of each byte's pair."""
    pairs = _NIBBLE_PAIRS.to(dtype)
    return pairs.index_select(0, packed.reshape(-1).int()).view(packed.shape[0], -1)[:, :k]


_NIBBLE_PAIRS = torch.tensor([[(v & 0xF) - 8, (v >> 4) - 8] for v in range(256)], dtype=torch.int16)


def int8_rows(wnk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Integer weights [N, K] (8-bit, or int16 within int8's range) -> (contiguous int8 [N, K], row sums and row
    sums of absolute values, both int64), without an int64 copy of the weights."""
    w8 = wnk.to(torch.int8).contiguous()
    k = wnk.shape[1]
    if wnk.dtype in (torch.int8, torch.uint8, torch.int16) and 256 * k < qmath.EXACT_F32:
        # float32 products with ones summed in any order: every partial sum is an integer below 2**24, exact
        wf, ones = wnk.float(), torch.ones(k)
        return w8, torch.mv(wf, ones).long(), torch.mv(wf.abs_(), ones).long()
    wide = wnk.to(torch.int64)
    return w8, wide.sum(1), wide.abs().sum(1)


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


def _onednn(rows: int, k: int, n: int) -> bool:
    """Whether a product is large enough for oneDNN (and oneDNN's product is exact on this CPU)."""
    return rows * k * n >= ONEDNN_MIN_MACS and isa.cpu().onednn


def _requantizes_exactly(worst: torch.Tensor, bias: torch.Tensor, rq: torch.Tensor) -> bool:
    """Whether float32(sum) + float32(bias) requantizes as float32(sum + bias) in every channel: one rounding
    of the exact sum while |sum| < 2**24 (and |bias| too), and beyond that the output saturates either way,
    as |sum + bias| * scale >= (2**24 - |bias|) * scale, which must then pass twice the widest 8-bit range."""
    limit = qmath.EXACT_F32
    bias = bias.abs().double()
    if bool((bias >= limit).any()):
        return False
    return bool(((worst.double() < limit) | (rq.double() * (limit - bias) >= 512)).all())


def _emit_onednn(b, xu: str, zero_point: int, packed, n: int, out: str) -> None:
    """``out`` += float32(sum((xu - zero_point) w)) for uint8 rows ``xu``, by oneDNN into ``out`` itself."""
    ones, zeros = torch.ones(n), torch.zeros(n, dtype=torch.int64)
    b.emit(f"torch.ops.onednn.qlinear_pointwise.binary({xu}, 1.0, {b.number(zero_point)}, {b.bind(packed, 'w')}, "
           f"{b.bind(ones, 'ones')}, {b.bind(zeros, 'zeros')}, {out}, None, 1.0, 0, torch.float32, 1.0, 0, "
           f"'sum', 1.0, 'none', [], '')")


def _unsigned(b, rows_name: str, shape) -> str:
    """int8 rows as uint8 rows plus 128 (the top bit flipped), in a buffer."""
    flipped = b.scratch(shape, torch.uint8)
    if rows_name in b.env:
        source = b.bind(b.env[rows_name].view(torch.uint8), "xu")
    else:
        source = f"{rows_name}.view(torch.uint8)"
    b.emit(f"torch.bitwise_xor({source}, 128, out={flipped})")
    return flipped


def static_q8(node, b, x, w, bias, y, rows: int, k: int, n: int, shape, transposed: bool) -> bool:
    """8-bit activations and int8 weights, int32 bias, 8-bit output: XNNPACK's qs8 / qs8_qc8w GEMM. False
    (nothing emitted) where no integer product is exact here."""
    plan = static_plan(node, b, x, w, bias, y, (rows, k, n), lambda: constant_filter(node, w, transposed))
    if plan is None:
        return False
    b.define(y.id, shape)
    x2, o2 = b.view(x.id, (rows, k)), b.view(y.id, (rows, n))
    emit_static(node, b, x, y, x2, o2, (rows, k, n), plan)
    return True


def static_plan(node, b, x, w, bias, y, mkn: tuple[int, int, int], filter_nk) -> tuple | None:
    """How 8-bit rows [M, K] times ``filter_nk()`` (int8 [N, K]) multiply on this CPU: (product, weights, bias,
    requantization scales), made once per node; None where neither integer product is exact here."""
    rows, k, n = mkn
    sx, zx = qmath.per_tensor(x, node.where)
    so, _ = qmath.per_tensor(y, node.where)
    unsigned = x.datatype == Datatype.QUINT8
    zx_signed = zx - 128 if unsigned else zx  # uint8 rows are multiplied as int8 rows: top bit flipped, minus 128
    lo, hi = qmath.qrange(x)

    use_native = native.enabled(b) and x.datatype == y.datatype == Datatype.QINT8

    def prepare():
        w8, sums, abs_sums = int8_rows(filter_nk().reshape(n, k))
        ints = int_bias(node, bias, n)
        scales = qmath.requant_scales(sx, qmath.weight_scales(w, n, node.where), so, node.where)
        if use_native:
            # a pointwise convolution over the rows: the kernels of native/qconv.c
            qmin, qmax = qmath.output_bounds(node, y, node.where)
            layer = native.qconv_pack(b, 1, k, n, (1, 1), (1, 1), (1, 1), (0, 0), w8.view(n, 1, 1, k), scales,
                                      ints, zx, qmath.per_tensor(y, node.where)[1], qmin, qmax)
            return "native", layer, None, None
        worst = abs_sums * max(hi - zx, zx - lo)
        if _onednn(rows, k, n) and _requantizes_exactly(worst, ints, scales):
            return "onednn", torch.ops.onednn.qlinear_prepack(w8, [rows, k]), ints.float(), scales
        if isa.cpu().int_mm:
            return "int_mm", _operand(w8), (ints - zx_signed * sums).to(torch.int32), scales
        return None

    plan = b.cached(("q8i", use_native), prepare)
    if plan is not None:
        b.route(f"native int8 product ({native.qconv_isa(plan[1])})" if plan[0] == "native"
                else f"{plan[0]} int8 product")
    return plan


def emit_static(node, b, x, y, x2: str, o2: str, mkn: tuple[int, int, int], plan: tuple) -> None:
    """Lines computing 8-bit ``o2`` [M, N] from 8-bit rows ``x2`` [M, K] by ``plan`` (``static_plan``), ``x``
    and ``y`` being the values whose quantization they follow."""
    rows, k, n = mkn
    _, zx = qmath.per_tensor(x, node.where)
    _, zo = qmath.per_tensor(y, node.where)
    qmin, qmax = qmath.output_bounds(node, y, node.where)
    unsigned = x.datatype == Datatype.QUINT8
    how, wkn, bias_t, rq = plan
    if how == "native":
        native.emit_qconv(b, wkn, (1, rows, 1, k), x2, (1, rows, 1, n), o2, (rows, n))
        return
    if how == "onednn":
        xu = x2 if unsigned else _unsigned(b, x2, (rows, k))
        acc = b.scratch((rows, n))
        b.emit(f"{acc}.copy_({b.bind(bias_t.expand(rows, n), 'bias')})")
        _emit_onednn(b, xu, zx if unsigned else zx + 128, wkn, n, acc)
        qmath.emit_requantize(b, acc, b.bind(rq, "rq"), zo, qmin, qmax, o2)
        return
    if unsigned:
        flipped = b.scratch((rows, k), torch.uint8)
        b.emit(f"torch.bitwise_xor({x2}, 128, out={flipped})")
        x2 = b.bind(b.env[flipped].view(torch.int8), "xs")
    acc = b.scratch((rows, n), torch.int32)
    b.emit(f"torch._int_mm({x2}, {b.bind(wkn, 'w')}, out={acc})")
    b.emit(f"{acc}.add_({b.bind(bias_t, 'bias')})")
    qmath.emit_requantize(b, acc, b.bind(rq, "rq"), zo, qmin, qmax, o2, work=b.scratch((rows, n)))


def dynamic(node, b, q, w, bias, y, rows: int, k: int, n: int, shape, transposed: bool) -> bool:
    """Rows quantized at run time times int8 (or 4-bit per-channel) weights, float output: qd8_f32_qc8w. False
    (nothing emitted) where no integer product is exact here."""

    # 4-bit per-channel weights (qc4w) stay with PyTorch: XNNPACK's kernels scale them by 16, so their float
    # conversions round elsewhere than 8-bit ones
    use_native = native.enabled(b) and w.datatype not in WEIGHTS_4BIT

    def prepare():
        data = constant_filter(node, w, transposed)
        w8, sums, abs_sums = int8_rows(unpack_4bit(data, k) if w.datatype in WEIGHTS_4BIT else data)
        scales = qmath.weight_scales(w, n, node.where)
        if use_native:
            layer = native.q8_pack(b, w8, scales, None if bias is None else b.constant(bias), node.output_min,
                                   node.output_max)
            return "native", layer, None, None
        if _onednn(rows, k, n) and float(abs_sums.max()) * 128 < qmath.EXACT_F32:  # |q|, |zp| <= 128
            packed = torch.ops.onednn.qlinear_prepack(w8, [rows, k])
            return "onednn", packed, -sums.float(), scales
        if isa.cpu().int_mm:
            return "int_mm", _operand(w8), sums.to(torch.int32), scales
        return None

    plan = b.cached(("qd8i", use_native), prepare)
    if plan is None:
        return False
    how, wkn, sums, wscale = plan
    b.route(f"native int8 product ({native.q8_isa(wkn)})" if how == "native" else f"{how} int8 product")
    if q.rows != rows:
        raise InvalidArgument(f"XNNPACK {node.where}: {q.rows} quantized rows for {rows} input rows")
    if how == "native":
        b.define(y.id, shape)
        native.emit_q8(b, wkn, rows, n, q.int8_rows(b), k, q.zero_points, q.scales, b.ref(y.id))
        return True
    ints, zero_points = q.ints(b)
    o = b.define(y.id, shape)
    o2 = b.view(y.id, (rows, n))
    if how == "onednn":
        # -zero_point * column sums first, then oneDNN adds the rows' raw sums: two exact addends
        acc = b.scratch((rows, n))
        b.emit(f"torch.mul({q.zero_points}, {b.bind(sums, 'wsum')}, out={acc})")
        _emit_onednn(b, _unsigned(b, ints, (rows, k)), 128, wkn, n, acc)
        qmath.emit_dequantize(b, o2, q.scales, b.bind(wscale, "wscale"), bias, acc=acc)
        emit_float_clamp(node, b, o)
        return True
    acc = b.scratch((rows, n), torch.int32)
    b.emit(f"torch._int_mm({ints}, {b.bind(wkn, 'w')}, out={acc})")
    b.emit(f"torch.addr({acc}, {zero_points}, {b.bind(sums, 'wsum')}, alpha=-1, out={acc})")
    qmath.emit_dequantize(b, o2, q.scales, b.bind(wscale, "wscale"), bias, acc=acc)
    emit_float_clamp(node, b, o)
    return True
