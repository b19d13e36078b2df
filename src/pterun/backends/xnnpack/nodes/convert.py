"""The convert node: quantize, dequantize, and XNNPACK's dynamic (per-row) quantization.

A dynamically quantized value (qdint8) only feeds fully connected and
convolution nodes, so it is kept as what they consume, registered in
``Builder.dynamic`` rather than stored: a ``DynamicQuant`` holding the
quantized rows and one dequantization scale per row, from which a consumer
asks for int8 rows and zero points (integer products) or float32 rows of
``q - zero_point`` (exact integers, for float products). Each form is computed
once, by the first consumer that asks for it. Where pterun's native kernels
run, they quantize the rows (one call, int8 rows first; on a CUDA device a
Triton kernel does, qd8_triton.py), and convert between
float32 and signed 8-bit values of one scale as XNNPACK's kernels do (a NaN
quantizes to 127); elsewhere PyTorch's ops do, in the same arithmetic (NaN
apart).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from pterun.backends.xnnpack.compiler import Builder, numel
from pterun.backends.xnnpack.graph import Datatype, DynamicRows, Node
from pterun.backends.xnnpack.nodes import native, qmath
from pterun.backends.xnnpack.nodes.common import is_float, unsupported
from pterun.errors import InvalidProgram


@dataclass
class DynamicQuant:
    """A qdint8 value: its rows as float32 integers in [-128, 127] (``quantized``) or as int8 (``rows8``, where the
    native kernels quantized them), whichever was made first, the other on demand; ``zero_points`` float32
    [rows, 1], ``scales`` the dequantization scale of each row [rows, 1]."""

    quantized: str | None
    zero_points: str
    scales: str
    rows: int
    shape: tuple[int, int]
    _rows8: str | None = None
    _ints: tuple[str, str] | None = None
    _centered: str | None = None
    forms: dict = field(default_factory=dict)  # other forms a consumer derives once (nodes/qblock.py)

    def float_rows(self, b: Builder) -> str:
        """float32 rows of integers [rows, length]."""
        if self.quantized is None:
            self.quantized = b.scratch(self.shape)
            b.emit(f"{self.quantized}.copy_({self._rows8})")
        return self.quantized

    def int8_rows(self, b: Builder) -> str:
        """int8 rows [rows, length]."""
        if self._rows8 is None:
            self._rows8 = b.scratch(self.shape, torch.int8)
            b.emit(f"{self._rows8}.copy_({self.quantized})")
        return self._rows8

    def ints(self, b: Builder) -> tuple[str, str]:
        """int8 rows [rows, length] and int32 zero points [rows]."""
        if self._ints is None:
            zpi = b.scratch((self.rows,), torch.int32)
            rows = self.int8_rows(b)
            b.emit(f"{zpi}.copy_({b.bind(b.env[self.zero_points].view(-1), 'zp_flat')})")
            self._ints = rows, zpi
        return self._ints

    def centered(self, b: Builder) -> str:
        """float32 rows of q - zero_point."""
        if self._centered is None:
            self._centered = b.scratch(self.shape)
            b.emit(f"torch.sub({self.float_rows(b)}, {self.zero_points}, out={self._centered})")
        return self._centered


def convert(node: Node, b: Builder) -> None:
    p = node.p
    x, y = b.value(p.input_id), b.value(p.output_id)
    shape = b.shape(x.id)
    table = getattr(p, "lookup", None)
    if table is not None:  # a round trip through float32 (optimize.drop_round_trips)
        return _lookup(node, b, x, y, shape, table)
    if is_float(x) and isinstance(y.quant, DynamicRows) and y.datatype == Datatype.QDINT8:
        return _dynamic_quantize(node, b, x, y, shape)
    if is_float(x) and qmath.is_q8(y):
        scale, zp = qmath.per_tensor(y, node.where)
        lo, hi = qmath.qrange(y)
        inv = float(np.float32(1.0) / np.float32(scale))
        o = b.define(y.id, shape)
        if _native(b, x, y):
            return native.emit_convert_s8(b, True, b.ref(x.id), o, shape, inv, zp)
        acc = b.scratch(shape)
        b.emit(f"torch.mul({b.ref(x.id)}, {b.number(inv)}, out={acc})")
        b.emit(f"{acc}.clamp_({b.number(lo - zp)}, {b.number(hi - zp)})")
        b.emit(f"torch.round({acc}, out={acc})")
        if zp:
            b.emit(f"{acc}.add_({b.number(zp)})")
        b.emit(f"{o}.copy_({acc})")
        return
    if qmath.is_q8(x) and is_float(y):
        scale, zp = qmath.per_tensor(x, node.where)
        o = b.define(y.id, shape)
        if _native(b, y, x):
            return native.emit_convert_s8(b, False, b.ref(x.id), o, shape, scale, zp)
        b.emit(f"{o}.copy_({b.ref(x.id)})")
        if zp:
            b.emit(f"{o}.sub_({b.number(zp)})")
        b.emit(f"{o}.mul_({b.number(scale)})")
        return
    if is_float(x) and is_float(y):
        o = b.define(y.id, shape)
        b.emit(f"{o}.copy_({b.ref(x.id)})")
        return
    if qmath.is_q8(x) and qmath.is_q8(y) and (x.datatype, x.quant) == (y.datatype, y.quant):
        o = b.define(y.id, shape)
        b.emit(f"{o}.copy_({b.ref(x.id)})")
        return
    raise unsupported(node, x, y)


def _lookup(node: Node, b: Builder, x, y, shape, table) -> None:
    """8-bit ``y`` = table[x - the type's lowest value], by the native kernels or an index into the table."""
    if x.datatype != y.datatype or not (qmath.is_q8(x) and qmath.is_q8(y)) or len(table) != 256:
        raise unsupported(node, x, y)
    lo, _ = qmath.qrange(x)
    o = b.define(y.id, shape)
    dtype = b.storage_dtype(y)
    if native.enabled(b) and x.datatype == Datatype.QINT8:
        # by the byte: 0..127 are the values 0..127, 128..255 the values -128..-1
        by_byte = b.cached("lookup", lambda: torch.tensor(np.concatenate([table[128:], table[:128]]), dtype=dtype))
        return native.emit_lookup_s8(b, by_byte, b.ref(x.id), o, shape)
    values = b.bind(b.cached("lookup", lambda: torch.tensor(table, dtype=dtype).to(b.device)), "lut")
    index = b.scratch(shape, torch.int64)
    b.emit(f"{index}.copy_({b.ref(x.id)})")
    if lo:
        b.emit(f"{index}.sub_({b.number(lo)})")
    b.emit(f"torch.index_select({values}, 0, {index}.view(-1), out={o}.view(-1))")


def _native(b: Builder, f, q) -> bool:
    """Whether the native kernels convert between float32 value ``f`` and signed 8-bit value ``q``."""
    return native.enabled(b) and f.datatype == Datatype.FP32 and q.datatype == Datatype.QINT8


def _dynamic_quantize(node: Node, b: Builder, x, y, shape) -> None:
    """Per row: the range widened to include 0, scale 255 / range, a nudged zero point (XNNPACK's qd8)."""
    if y.external_id is not None:
        raise unsupported(node, x, y)
    nonbatch = y.quant.num_nonbatch_dims
    if not 0 < nonbatch <= len(shape):
        raise InvalidProgram(f"XNNPACK {node.where}: {nonbatch} non-batch dimensions of {list(shape)}")
    rows, length = numel(shape[:-nonbatch]), numel(shape[-nonbatch:])
    b.shapes[y.id] = tuple(shape)  # no buffer: consumers read the rows registered below
    col = (rows, 1)
    on_cpu = native.enabled(b)
    kernel = None if on_cpu else _triton_rows(b, x)
    if on_cpu or kernel is not None:
        q8, zp, inv = b.scratch((rows, length), torch.int8), b.scratch(col), b.scratch(col)
        if kernel is None:  # the rows as x's elements in order: no view of them needed
            native.emit_quantize_rows(b, b.ref(x.id), rows, length, q8, zp, inv)
        else:
            b.emit(f"{b.bind(kernel, 'quantize_rows')}({b.view(x.id, (rows, length))}, {q8}, {zp}, {inv})")
        b.dynamic[y.id] = DynamicQuant(None, zp, inv, rows, (rows, length), _rows8=q8)
        return
    x2 = b.view(x.id, (rows, length))
    d, s, zp, inv = (b.scratch(col) for _ in range(4))
    cond = b.scratch(col, torch.bool)
    q = b.scratch((rows, length))
    # Both ends of a row side by side ([2, rows, 1]: min, max), so that one op does both ends' arithmetic.
    ends, scaled, err, cand = (b.scratch((2, rows, 1)) for _ in range(4))

    def pair(lo: float, hi: float) -> str:
        return b.bind(torch.tensor([lo, hi], device=b.device).view(2, 1, 1), "pair")

    def halves(name: str) -> tuple[str, str]:
        return b.bind(b.env[name][0], f"{name}_0"), b.bind(b.env[name][1], f"{name}_1")

    mn, mx = halves(ends)
    c255 = b.bind(torch.tensor(255.0, device=b.device), "c255")
    inf = float("inf")
    for line in (
        # amin and amax, not aminmax: its CPU kernel is not vectorized (16x slower on 2048-wide rows)
        f"torch.amin({x2}, 1, keepdim=True, out={mn})",
        f"torch.amax({x2}, 1, keepdim=True, out={mx})",
        f"torch.clamp({ends}, {pair(-inf, 0.0)}, {pair(0.0, inf)}, out={ends})",
        f"torch.sub({mx}, {mn}, out={d})",
        f"torch.div({c255}, {d}, out={s})",
        f"torch.eq({d}, 0.0, out={cond})",
        f"{s}.masked_fill_({cond}, 1.0)",
        # zero point: from whichever end of the range has the smaller error, clamped and rounded.
        # (qmin + min*s) + (qmax + max*s) > 0 exactly when qmin + min*s > -(qmax + max*s), in float32 too
        f"torch.mul({ends}, {s}, out={scaled})",
        f"torch.addcmul({pair(-128.0, -127.0)}, {scaled}, {pair(1.0, -1.0)}, out={err})",
        "torch.gt({}, {}, out={})".format(*halves(err), cond),
        f"torch.sub({pair(-128.0, 127.0)}, {scaled}, out={cand})",
        "torch.where({}, {}, {}, out={})".format(cond, *halves(cand), zp),
        # XNNPACK's x86 max(zp, qmin) is `qmin < zp ? zp : qmin`, which takes qmin for a NaN zero point (an
        # infinite scale, for a range below 255 / FLT_MAX, times the 0 end of the range)
        f"{zp}.nan_to_num_(nan=-128.0)",
        f"{zp}.clamp_(-128.0, 127.0)",
        f"torch.round({zp}, out={zp})",
        # the rows: clamp(rint(x * s) + zp)
        f"torch.mul({x2}, {s}, out={q})",
        f"torch.round({q}, out={q})",
        f"{q}.add_({zp})",
        # 0 times an infinite scale is NaN, which XNNPACK's x86 min(x * scale, 32767) turns into 32767: 127
        f"{q}.nan_to_num_(nan=127.0)",
        f"{q}.clamp_(-128.0, 127.0)",
        f"torch.reciprocal({s}, out={inv})",
    ):
        b.emit(line)
    b.dynamic[y.id] = DynamicQuant(q, zp, inv, rows, (rows, length))


def _triton_rows(b: Builder, x):
    """On a CUDA device, the one-kernel row quantization of float32 rows (qd8_triton.py); None where it does not
    run (no Triton, ``native=False``, half-precision rows), and PyTorch's ops below do the same arithmetic."""
    if b.device.type != "cuda" or b.options.get("native", True) is False or x.datatype != Datatype.FP32:
        return None
    try:
        from pterun.backends.xnnpack.nodes.qd8_triton import quantize_rows
    except ImportError:
        return None
    return quantize_rows


TRANSLATORS = {"XNNConvert": convert}
