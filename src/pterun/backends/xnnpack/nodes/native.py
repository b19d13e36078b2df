"""pterun's native kernels (``pterun/native``: C sources, the extension ``_kernels``) as the translators use them.

The kernels repeat XNNPACK's quantized arithmetic in its order, bit for bit (``native/native.h``), at the speed of
SIMD code with 4-bit weights held as 4 bits, where PyTorch's x86 build has no such kernels; and XNNPACK's
float elementwise kernels (sigmoid, square roots, softmax, ...), whose approximations PyTorch does not share.
They are built with the package (``setup.py``); where they are missing (a platform without a C compiler at
install time) or turned off (``XnnpackBackend`` option ``native=False``), every node takes its PyTorch path:
the same bits for the quantized layers, float32 rounding for the float elementwise nodes. ``available`` says
which, and why.

Generated code calls them with integers: the data pointers of buffers fixed at translation are bound as numbers,
others (the caller's arguments) are read with ``data_ptr()`` on each call, of a contiguous form. Every size passed
is checked against the graph before packing, since the C side trusts what it is given.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from types import ModuleType

import numpy as np
import torch

from pterun import native as _native
from pterun.backends.xnnpack.nodes import isa
from pterun.errors import DelegateInvalidCompatibility, Internal
from pterun.native import ISAS, geometry

_built = _native.kernels
_MISSING = _native.missing


def _kernels() -> ModuleType:
    """The native module, for a node that chose a native kernel (``enabled`` said it is built)."""
    if _built is None:
        raise Internal(f"a node chose a native kernel: {_MISSING}")
    return _built

FAMILIES = {"avx512vnni": 0, "avx2": 1}  # native.h's pn_family, by isa.block_kernels' names


@functools.cache
def available() -> tuple[bool, str]:
    """Whether the native kernels run here, and a sentence saying which kernels and why."""
    if _built is None:
        return False, _MISSING + "; quantized layers and float elementwise nodes take their PyTorch path"
    threads = "PyTorch's OpenMP threads" if _kernels().parallel_team() else "threads of their own"
    return True, f"pterun's native kernels ({_kernels().cpu_isa()}, on {threads})"


def kernel_isa() -> str:
    """The instruction set the kernels use on this CPU ("avx512vnni", "avx2" or "portable")."""
    return _kernels().cpu_isa()


def enabled(b) -> bool:
    """Whether the current translation uses them: on the CPU, where built, unless the caller turned them off."""
    return b.device.type == "cpu" and _built is not None and b.options.get("native", True) is not False


def _fixed(b, name: str) -> bool:
    tensor = b.env.get(name)
    return isinstance(tensor, torch.Tensor) and tensor.is_contiguous()


def _pointer(b, name: str) -> str:
    """The data pointer of fixed contiguous tensor ``name``, a number bound beside it (``<name>_ptr``: the source
    stays the same from one process to the next, so the load cache keeps its code)."""
    address, bound = b.env[name].data_ptr(), f"{name}_ptr"
    return bound if b.env.get(bound) == address else b.bind(address, bound)


def source(b, name: str) -> str:
    """A pointer expression for tensor ``name`` read by a kernel as contiguous rows: a number where it is fixed,
    else the pointer of its contiguous form, made on each call (the caller's tensor as it is where it is
    contiguous already; the local keeps a copy alive through the call)."""
    if _fixed(b, name):
        return _pointer(b, name)
    local = f"{name}_c{b.next_id()}"
    b.emit(f"{local} = {name}.contiguous()")
    return f"{local}.data_ptr()"


def target(b, name: str, shape, dtype=torch.float32) -> tuple[str, str | None]:
    """A pointer expression a kernel writes contiguous rows through, for tensor ``name`` (of the elements of
    ``shape``), and the line to emit after the call (None where the kernel writes ``name`` itself: a fixed
    contiguous tensor). A caller's tensor is written directly where it is contiguous, as the program's planned
    buffers are; one of other strides is written through a buffer of the translation's, then copied."""
    if _fixed(b, name):
        return _pointer(b, name), None
    buffer = b.scratch(tuple(shape), dtype)
    direct = f"{name}_p{b.next_id()}"
    b.emit(f"{direct} = {name}.data_ptr() if {name}.is_contiguous() else None")
    into = f"({_pointer(b, buffer)} if {direct} is None else {direct})"
    return into, f"if {direct} is None: {name}.copy_({buffer}.view({name}.shape))"


def _function(b, name: str, function) -> str:
    """``function`` under ``name`` in the generated code, bound once per translation."""
    if b.env.get(name) is not function:
        name = b.bind(function, name)
    return name


def threads(b) -> str:
    """The intra-op threads of the call (the method's choice, set for the call)."""
    return _function(b, "threads", torch.get_num_threads)


def qb4w_pack(b, family: str, n: int, k: int, block: int, weights: torch.Tensor, scales: torch.Tensor,
              start: torch.Tensor, bias: torch.Tensor | None, out_min: float, out_max: float):
    """A packed 4-bit block layer (kept alive by the translation that binds it)."""
    if weights.dtype != torch.uint8 or weights.numel() != n * ((k + 1) // 2) or not weights.is_contiguous():
        raise DelegateInvalidCompatibility(f"XNNPACK {b.where}: 4-bit weights of {weights.numel()} bytes for "
                                           f"{n} x {k} values")
    if block % 32 or k % block:
        raise DelegateInvalidCompatibility(f"XNNPACK {b.where}: blocks of {block} inputs over {k}; XNNPACK's "
                                           "4-bit kernels take blocks of a multiple of 32 that divide the inputs")
    scales = scales.float().contiguous()
    start = start.float().contiguous()
    bias = None if bias is None else bias.float().contiguous()
    if tuple(scales.shape) != (n, k // block) or start.numel() != n or (bias is not None and bias.numel() != n):
        raise DelegateInvalidCompatibility(f"XNNPACK {b.where}: block scales, start values or bias do not fit "
                                           f"{n} outputs of {k // block} blocks")
    return _kernels().qb4w_pack(ISAS[kernel_isa()], FAMILIES[family], n, k, block, weights.data_ptr(),
                             scales.data_ptr(), start.data_ptr(), 0 if bias is None else bias.data_ptr(),
                             float(out_min), float(out_max))


def qb4w_start_sums(b, n: int, k: int, block: int, chunk: int, weights: torch.Tensor,
                    scales: torch.Tensor) -> torch.Tensor:
    """XNNPACK's start values of a 4-bit block layer, float32 [n], from its packed nibbles and block scales."""
    if weights.dtype != torch.uint8 or weights.numel() != n * ((k + 1) // 2) or not weights.is_contiguous():
        raise DelegateInvalidCompatibility(f"XNNPACK {b.where}: 4-bit weights of {weights.numel()} bytes for "
                                           f"{n} x {k} values")
    scales = scales.float().contiguous()
    if block <= 0 or k % block or chunk <= 0 or block % chunk or tuple(scales.shape) != (n, k // block):
        raise DelegateInvalidCompatibility(f"XNNPACK {b.where}: block scales of shape {list(scales.shape)} for {n} "
                                           f"outputs of {k} inputs in blocks of {block}")
    start = torch.empty(n, dtype=torch.float32)
    _kernels().qb4w_start_sums(n, k, block, chunk, weights.data_ptr(), scales.data_ptr(), start.data_ptr())
    return start


def qb4w_isa(layer) -> str:
    return _kernels().qb4w_isa(layer)


def emit_qb4w(b, layer, rows: int, n: int, x: str, x_stride: int, zero_points: str, scales: str, out: str) -> None:
    """Lines computing ``out`` (rows x n values, in any shape) from int8 rows ``x`` with a packed layer."""
    run = _function(b, "qb4w_run", _kernels().qb4w_run)
    into, after = target(b, out, (rows, n))
    b.emit(f"{run}({b.bind(layer, 'layer')}, {rows}, {source(b, x)}, {x_stride}, {source(b, zero_points)}, "
           f"{source(b, scales)}, {into}, {n}, {threads(b)}())")
    if after:
        b.emit(after)


def emit_quantize_rows(b, x: str, rows: int, cols: int, q: str, zero_points: str, scales: str) -> None:
    """Lines quantizing the float rows of ``x`` (rows x cols values, in any shape) into fixed int8 rows ``q``, zero
    points and scales."""
    run = _function(b, "quantize_rows", _kernels().quantize_rows)
    b.emit(f"{run}({ISAS[kernel_isa()]}, {source(b, x)}, {rows}, {cols}, {cols}, {_pointer(b, q)}, {cols}, "
           f"{_pointer(b, zero_points)}, {_pointer(b, scales)})")


def q8_pack(b, weights: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None, out_min: float,
            out_max: float):
    """A packed 8-bit layer for rows quantized at run time: int8 weights [n, k], float32 channel scales, an
    optional float32 bias, the output's clamp."""
    n, k = weights.shape
    weights = weights.to(torch.int8).contiguous()
    scale = scale.float().contiguous()
    bias = None if bias is None else bias.float().contiguous()
    if scale.numel() != n or (bias is not None and bias.numel() != n):
        raise DelegateInvalidCompatibility(f"XNNPACK {b.where}: scales or bias do not fit {n} outputs")
    return _kernels().q8_pack(ISAS[kernel_isa()], n, k, weights.data_ptr(), k, scale.data_ptr(),
                           0 if bias is None else bias.data_ptr(), float(out_min), float(out_max))


def q8_isa(layer) -> str:
    return _kernels().q8_isa(layer)


def emit_q8(b, layer, rows: int, n: int, x: str, x_stride: int, zero_points: str, scales: str, out: str) -> None:
    """Lines computing float32 ``out`` (rows x n values, in any shape) from int8 rows ``x`` with a packed 8-bit
    layer."""
    run = _function(b, "q8_run", _kernels().q8_run)
    into, after = target(b, out, (rows, n))
    b.emit(f"{run}({b.bind(layer, 'layer')}, {rows}, {source(b, x)}, {x_stride}, {source(b, zero_points)}, "
           f"{source(b, scales)}, {into}, {n}, {threads(b)}())")
    if after:
        b.emit(after)


def emit_convert_s8(b, quantize: bool, x: str, out: str, shape, scale: float, zero_point: int) -> None:
    """Lines converting ``x`` into ``out`` (both of ``shape``) between float32 and signed 8-bit values:
    quantizing with XNNPACK's 1 / scale (``scale``), or dequantizing with the scale."""
    name = "quantize_s8" if quantize else "dequantize_s8"
    run = _function(b, name, getattr(_kernels(), name))
    into, after = target(b, out, shape, torch.int8 if quantize else torch.float32)
    b.emit(f"{run}({ISAS[kernel_isa()]}, {source(b, x)}, {into}, {math.prod(shape)}, {b.number(float(scale))}, "
           f"{int(zero_point)}, {threads(b)}())")
    if after:
        b.emit(after)
    b.route(f"native {'quantize' if quantize else 'dequantize'} ({kernel_isa()})")


def emit_lookup_s8(b, table: torch.Tensor, x: str, out: str, shape) -> None:
    """Lines setting signed 8-bit ``out`` to ``table`` [256] (int8, indexed by each value's byte) at ``x``."""
    run = _function(b, "lookup_s8", _kernels().lookup_s8)
    into, after = target(b, out, shape, torch.int8)
    b.emit(f"{run}({ISAS[kernel_isa()]}, {_pointer(b, b.bind(table, 'table'))}, {source(b, x)}, {into}, "
           f"{math.prod(shape)}, {threads(b)}())")
    if after:
        b.emit(after)
    b.route(f"native table of 8-bit values ({kernel_isa()})")


def qconv_pack(b, groups: int, cin_g: int, cout_g: int, kernel: tuple[int, int], strides: tuple[int, int],
               dilations: tuple[int, int], top_left: tuple[int, int], weights: torch.Tensor, scale: torch.Tensor,
               bias: torch.Tensor | None, input_zero_point: int, out_zero_point: int, qmin: int, qmax: int):
    """A packed static 8-bit convolution: int8 weights [groups * cout_g, kh, kw, cin_g], float32 requantization
    scales and an optional int32 bias per output channel."""
    kh, kw = kernel
    cout = groups * cout_g
    weights = weights.to(torch.int8).contiguous()
    scale = scale.float().contiguous()
    bias = None if bias is None else bias.to(torch.int32).contiguous()
    if tuple(weights.shape) != (cout, kh, kw, cin_g) or scale.numel() != cout or (
            bias is not None and bias.numel() != cout):
        raise DelegateInvalidCompatibility(f"XNNPACK {b.where}: filter {list(weights.shape)}, scales or bias do "
                                           f"not fit {groups} groups of {cin_g} -> {cout_g} channels")
    return _kernels().qconv_pack(ISAS[kernel_isa()], groups, cin_g, cout_g, kh, kw, *strides, *dilations, *top_left,
                              weights.data_ptr(), scale.data_ptr(), 0 if bias is None else bias.data_ptr(),
                              int(input_zero_point), int(out_zero_point), int(qmin), int(qmax))


def qconv_isa(layer) -> str:
    return _kernels().qconv_isa(layer)


def emit_qconv(b, layer, xshape, x: str, shape, out: str, out_shape=None) -> None:
    """Lines computing int8 NHWC ``out`` of ``shape`` from int8 NHWC ``x`` of ``xshape`` with a packed
    convolution (whose channels the caller checked against both); ``out_shape``: ``out``'s own shape, of the
    same elements, where it is not ``shape``."""
    run = _function(b, "qconv_run", _kernels().qconv_run)
    into, after = target(b, out, shape if out_shape is None else out_shape, torch.int8)
    n, h, w, _ = xshape
    b.emit(f"{run}({b.bind(layer, 'layer')}, {n}, {h}, {w}, {source(b, x)}, {shape[1]}, {shape[2]}, {into}, "
           f"{threads(b)}())")
    if after:
        b.emit(after)


QOPS = {"add": 0, "mul": 1}  # native.h's pn_qop


def qbinary_make(op: str, shape, a_shape, b_shape, a_param: int, b_param: int, bias: int, shift: int,
                 scale: float, out_zero_point: int, qmin: int, qmax: int):
    """An 8-bit add or multiply over output ``shape`` (at most 6 dimensions) of contiguous operands of shapes
    ``a_shape`` and ``b_shape`` that broadcast to it."""
    ndim = len(shape)
    strides = (*geometry.broadcast_strides(a_shape, shape), *geometry.broadcast_strides(b_shape, shape))
    walk = torch.tensor([*shape, *strides], dtype=torch.int64)
    return _kernels().qbinary_make(ISAS[kernel_isa()], QOPS[op], ndim, walk.data_ptr(), int(a_param), int(b_param),
                                int(bias), int(shift), float(scale), int(out_zero_point), int(qmin), int(qmax))


def qbinary_isa(op) -> str:
    return _kernels().qbinary_isa(op)


def emit_qbinary(b, op, a: str, b_name: str, out: str, shape) -> None:
    """Lines computing int8 ``out`` of ``shape`` from int8 operands ``a`` and ``b_name`` with ``op``."""
    run = _function(b, "qbinary_run", _kernels().qbinary_run)
    into, after = target(b, out, shape, torch.int8)
    b.emit(f"{run}({b.bind(op, 'qop')}, {source(b, a)}, {source(b, b_name)}, {into}, {threads(b)}())")
    if after:
        b.emit(after)


def emit_qmean(b, x: str, out: str, xshape, shape, scale: float, zero: float, qmin: int, qmax: int) -> None:
    """Lines setting signed 8-bit ``out`` of ``shape`` ([n, c] or [n, 1, 1, c]) to XNNPACK's global mean of NHWC
    ``x``."""
    n, h, w, c = xshape
    run = _function(b, "qmean_s8", _kernels().qmean_s8)
    into, after = target(b, out, shape, torch.int8)
    b.emit(f"{run}({source(b, x)}, {into}, {n}, {h}, {w}, {c}, {b.number(float(scale))}, {b.number(float(zero))}, "
           f"{int(qmin)}, {int(qmax)}, {threads(b)}())")
    if after:
        b.emit(after)
    b.route(f"native int8 mean ({kernel_isa()})")


def emit_mean(b, x: str, out: str, xshape, shape, lo: float, hi: float) -> None:
    """Lines setting float ``out`` of ``shape`` ([n, c] or [n, 1, 1, c]) to XNNPACK's global mean of NHWC ``x``
    (each channel summed in pixel order, times 1 / pixels), clamped to [lo, hi]."""
    n, h, w, c = xshape
    run = _function(b, "mean_f32", _kernels().mean_f32)
    into, after = target(b, out, shape)
    b.emit(f"{run}({source(b, x)}, {into}, {n}, {h * w}, {c}, {b.number(float(lo))}, {b.number(float(hi))}, "
           f"{threads(b)}())")
    if after:
        b.emit(after)
    b.route("native float mean")


def emit_qmaxpool(b, x: str, out: str, xshape, shape, window: tuple[int, ...], qmin: int, qmax: int) -> None:
    """Lines computing signed 8-bit NHWC ``out`` of ``shape``, the max pooling of ``x`` by ``window`` (kernel
    height and width, strides, dilations, top and left padding)."""
    n, h, w, c = xshape
    run = _function(b, "qmaxpool_s8", _kernels().qmaxpool_s8)
    into, after = target(b, out, shape, torch.int8)
    bound = b.bind(torch.tensor(window, dtype=torch.int64), "window")
    b.emit(f"{run}({source(b, x)}, {into}, {n}, {h}, {w}, {c}, {shape[1]}, {shape[2]}, {_pointer(b, bound)}, "
           f"{int(qmin)}, {int(qmax)}, {threads(b)}())")
    if after:
        b.emit(after)
    b.route(f"native int8 max pooling ({kernel_isa()})")


# -- moves and float binary arithmetic (pterun/native/move.c) ------------------------------------------------------

BINARY_OPS = {"XNNAdd": "add", "XNNSubtract": "sub", "XNNMultiply": "mul", "XNNDiv": "div"}  # native.geometry's


def moves(b, ranks) -> bool:
    """Whether the native kernels move a node's elements: on, and no walk of more than ``MOVE_DIMS`` dimensions."""
    return enabled(b) and all(r <= geometry.MOVE_DIMS for r in ranks)


def emit_moves(b, out: str, shape, dtype: torch.dtype, pieces) -> None:
    """Lines writing ``out`` (contiguous, of ``shape``) by copies, one per piece: (x, sizes, x_strides, x_offset,
    out_strides, out_offset), x a contiguous tensor's name, strides and offsets in elements."""
    run = _function(b, "copy_strided", _kernels().copy_strided)
    into, after = target(b, out, shape, dtype)
    for x, sizes, x_strides, x_offset, y_strides, y_offset in pieces:
        if math.prod(sizes) == 0:
            continue
        sizes, x_strides, y_strides = geometry.collapsed(list(sizes), list(x_strides), list(y_strides))
        walk = b.bind(torch.tensor([x_offset, y_offset, *sizes, *x_strides, *y_strides], dtype=torch.int64),
                      "geometry")
        b.emit(f"{run}({source(b, x)}, {into}, {dtype.itemsize}, {len(sizes)}, {_pointer(b, walk)}, {threads(b)}())")
    if after:
        b.emit(after)


def emit_vbinary(b, kind: str, a: str, a_shape, b_name: str, b_shape, out: str, shape, lo: float, hi: float) -> None:
    """Lines computing float32 ``out`` of ``shape``: ``kind``'s operation of ``a`` and ``b_name`` (contiguous,
    broadcast to ``shape``), or ``a`` itself for "clamp", clamped to [lo, hi]."""
    run = _function(b, "vbinary", _kernels().vbinary)
    into, after = target(b, out, shape)
    walk = geometry.binary_geometry(shape, a_shape, b_shape)
    if walk is None:  # the caller asked ``moves`` first
        raise Internal(f"XNNPACK {b.where}: a float binary node of {len(shape)} dimensions")
    if math.prod(shape):
        op = geometry.BINARY_OPS[kind if kind == "clamp" else BINARY_OPS[kind]]
        first = source(b, a)
        second = first if kind == "clamp" else source(b, b_name)
        bound = b.bind(torch.tensor(walk, dtype=torch.int64), "geometry")
        b.emit(f"{run}({op}, {first}, {second}, {into}, {len(walk) // 4}, {_pointer(b, bound)}, "
               f"{b.number(float(lo))}, {b.number(float(hi))}, {threads(b)}())")
    if after:
        b.emit(after)


# -- XNNPACK's float elementwise kernels (pterun/native/vunary.c, vsoftmax.c) --------------------------------------

VFAMILIES = {"avx512f": 0, "avx2": 1}  # native.h's pn_vfamily, by isa.float_kernels' names
# native.h's pn_vop, by the node each computes
VOPS = {
    "XNNSigmoid": 0, "XNNReciprocalSquareRoot": 1, "XNNSquareRoot": 2, "XNNSin": 3, "XNNCos": 4, "XNNExp": 5,
    "XNNTanh": 6, "XNNGelu": 7, "XNNLog": 8, "XNNHardswish": 9, "XNNELU": 10,
}


@functools.cache
def float_family() -> str | None:
    """The family of XNNPACK's float elementwise kernels the native kernels repeat on this CPU, or None where
    they do not (not built, not x86-64, or a CPU without the family's instructions)."""
    if _built is None:
        return None
    family = isa.cpu().float_kernels
    return family if family in VFAMILIES and _kernels().vfamily_runs(VFAMILIES[family]) else None


def float_enabled(b) -> bool:
    """Whether the current translation computes float elementwise nodes with the native kernels."""
    return enabled(b) and float_family() is not None


def _chosen_family() -> str:
    """float_family(), for a node that chose a native float kernel (``float_runs`` said there is one)."""
    family = float_family()
    if family is None:
        raise Internal("a node chose a native float kernel, and this CPU runs none")
    return family


def emit_vunary(b, kind: str, x: str, out: str, shape, param: float = 0.0) -> None:
    """Lines computing float32 ``out`` = f(``x``) elementwise, f node type ``kind``'s kernel (``param``: ELU's
    alpha)."""
    family = _chosen_family()
    run = _function(b, "vunary", _kernels().vunary)
    into, after = target(b, out, shape)
    b.emit(f"{run}({VOPS[kind]}, {VFAMILIES[family]}, {source(b, x)}, {into}, {math.prod(shape)}, "
           f"{b.number(float(param))}, {threads(b)}())")
    if after:
        b.emit(after)
    b.route(f"XNNPACK's {family} float kernel (native)")


def emit_dwconv(b, x: str, weights: torch.Tensor, bias: str | None, out: str, xshape, shape, window, out_min: float,
                out_max: float) -> None:
    """Lines computing float32 ``out`` [n, oh, ow, c], the depthwise convolution of ``x`` [n, h, w, c] with
    ``weights`` [kh, kw, c] (contiguous, fixed) and ``bias`` [c] (or None), ``window`` = (sh, sw, dh, dw, top,
    left), clamped to [out_min, out_max]. The sizes come from the translation's shapes, which the call's
    arguments were checked against."""
    family = _chosen_family()
    n, h, w, c = xshape
    _, oh, ow, _ = shape
    kh, kw, _ = weights.shape
    run = _function(b, "dwconv", _kernels().dwconv)
    into, after = target(b, out, shape)
    bias_pointer = source(b, bias) if bias is not None else "0"
    b.emit(f"{run}({VFAMILIES[family]}, {source(b, x)}, {_pointer(b, b.bind(weights, 'dw'))}, {bias_pointer}, "
           f"{into}, {n}, {h}, {w}, {c}, {kh}, {kw}, {', '.join(str(int(v)) for v in window)}, {oh}, {ow}, "
           f"{b.number(float(out_min))}, {b.number(float(out_max))}, {threads(b)}())")
    if after:
        b.emit(after)
    b.route(f"XNNPACK's {family} float depthwise convolution (native)")


CONV_TILE = 16  # output channels per tile of gemm.c's packed weights
CONV_MAX_TAPS = 256  # gemm.c's widest window


def conv_pack(filt: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """A float filter [cout, cin, kh, kw] (torch's layout; [n, k] for a fully connected layer) and its bias [cout]
    (or none) as gemm.c reads them: per tile of 16 output channels, their biases, then each tap's (kernel row,
    then column) input channels' 16 weights; zeros past the last output channel.

    In NumPy, on the loading thread: PyTorch splits a copy this size over its threads, and on a machine whose
    other cores are busy each such copy waited milliseconds for them (a 256 x 256 layer: 0.03 against 8 ms)."""
    cout = filt.shape[0]
    taps = filt.numpy().reshape(cout, filt.shape[1], -1).transpose(2, 1, 0).reshape(-1, cout)  # [taps * cin, cout]
    tiles, full = -(-cout // CONV_TILE), cout // CONV_TILE
    packed = np.zeros((tiles, taps.shape[0] + 1, CONV_TILE), dtype=np.float32)
    packed[:full, 1:, :] = taps[:, :full * CONV_TILE].reshape(len(taps), full, CONV_TILE).transpose(1, 0, 2)
    packed[full:, 1:, :cout - full * CONV_TILE] = taps[:, full * CONV_TILE:]
    if bias is not None:
        first = np.zeros(tiles * CONV_TILE, dtype=np.float32)
        first[:cout] = bias.numpy()
        packed[:, 0, :] = first.reshape(tiles, CONV_TILE)
    return torch.from_numpy(packed)


def emit_conv(b, x: str, packed: torch.Tensor, out: str, xshape, shape, kernel: tuple[int, int], window,
              out_min: float, out_max: float, what: str = "convolution") -> None:
    """Lines computing float32 ``out`` [n, oh, ow, cout], the dense convolution of ``x`` [n, h, w, cin] with the
    filter and bias ``conv_pack`` made, ``kernel`` = (kh, kw) taps, ``window`` = (sh, sw, dh, dw, top, left),
    clamped to [out_min, out_max]. A fully connected layer of ``rows`` rows of ``k``: xshape (1, rows, 1, k)."""
    family = _chosen_family()
    n, h, w, cin = xshape
    _, oh, ow, cout = shape
    run = _function(b, "conv", _kernels().conv)
    into, after = target(b, out, shape)
    b.emit(f"{run}({VFAMILIES[family]}, {source(b, x)}, {_pointer(b, b.bind(packed, 'packed'))}, {into}, {n}, {h}, "
           f"{w}, {cin}, {cout}, {kernel[0]}, {kernel[1]}, {', '.join(str(int(v)) for v in window)}, {oh}, {ow}, "
           f"{b.number(float(out_min))}, {b.number(float(out_max))}, {threads(b)}())")
    if after:
        b.emit(after)
    b.route(f"XNNPACK's {family} float {what} (native)")


def emit_fully_connected(b, x: str, packed: torch.Tensor, out: str, rows: int, k: int, n: int, out_min: float,
                         out_max: float) -> None:
    """Lines computing float32 ``out`` (``rows`` rows of ``n``, whatever its rank) = ``x`` (rows of ``k``) times
    the weights ``conv_pack`` made of an [n, k] filter, plus their bias, clamped."""
    emit_conv(b, x, packed, out, (1, rows, 1, k), (1, rows, 1, n), (1, 1), (1, 1, 1, 1, 0, 0), out_min, out_max,
              "fully connected product")


def emit_softmax(b, x: str, out: str, shape) -> None:
    """Lines computing float32 ``out``, the softmax of ``x`` along its last dimension."""
    family = _chosen_family()
    cols = shape[-1] if shape else 1
    rows = math.prod(shape) // cols if cols else 0
    run = _function(b, "softmax", _kernels().softmax)
    into, after = target(b, out, shape)
    if rows:
        b.emit(f"{run}({VFAMILIES[family]}, {source(b, x)}, {into}, {rows}, {cols}, {threads(b)}())")
    if after and rows:
        b.emit(after)
    b.route(f"XNNPACK's {family} float softmax (native)")


# What a translation may do and still be made again from a recording of its native calls: call the kernels the
# recording keeps, read the thread count, and look at its arguments (their pointers, layouts and sizes, a view).
_RECORDED = ("quantize_rows", "qb4w_run", "q8_run", "quantize_s8", "dequantize_s8", "lookup_s8", "qconv_run",
             "qbinary_run", "qmean_s8", "qmaxpool_s8", "vunary", "softmax", "dwconv", "conv", "copy_strided",
             "vbinary", "mean_f32")
_LOOKS = frozenset({"data_ptr", "is_contiguous", "resize_", "view"})
_SYNTAX = (ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign, ast.Expr, ast.If, ast.IfExp,
           ast.Delete, ast.Del, ast.Load, ast.Store, ast.Name, ast.Constant, ast.Tuple, ast.Call, ast.Attribute,
           ast.Compare, ast.Is, ast.IsNot, ast.Eq, ast.NotEq, ast.UnaryOp, ast.USub)
_ARGUMENT = re.compile(r"a\d+")
_CALL = re.compile(r"(?<![\w.])(?<!def )([A-Za-z_][\w.]*)\(")  # what a line calls: a name, or a name's attribute
_COMMENT = re.compile(r"^\s*#.*$", re.MULTILINE)


def native_only(source: str, env: dict) -> bool:
    """Whether a translation's code, called with contiguous arguments, does nothing but native calls a recording
    keeps (``native/module.c``): so a recording of one call is the whole call. Its other lines then only size its
    outputs, take pointers, and copy from a buffer where an argument is not contiguous (``target``: not taken),
    or copy an argument that is not (``source``: a no-op for one that is)."""
    kernels = _built
    if kernels is None:
        return False
    recorded = {id(getattr(kernels, name)) for name in _RECORDED} | {id(torch.get_num_threads)}
    # Most translations call a torch function or method somewhere: found in the text, that answers at once what
    # the syntax tree below would (a tenth of a float ViT's warm load went to parsing 25 such translations).
    for target in _CALL.findall(_COMMENT.sub("", source)):
        head, _, attr = target.rpartition(".")
        if (attr not in _LOOKS and attr not in ("contiguous", "copy_")) if head else id(env.get(attr)) not in recorded:
            return False
    tree = ast.parse(source)
    fallbacks = {id(node) for branch in ast.walk(tree) if isinstance(branch, ast.If) and _is_none_test(branch.test)
                 for statement in branch.body for node in ast.walk(statement)}
    for node in ast.walk(tree):
        if not isinstance(node, _SYNTAX):
            return False
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if isinstance(fn, ast.Name):
            if id(env.get(fn.id)) not in recorded:
                return False
        elif not isinstance(fn, ast.Attribute):
            return False
        elif fn.attr == "contiguous":
            if not (isinstance(fn.value, ast.Name) and _ARGUMENT.fullmatch(fn.value.id)):
                return False
        elif fn.attr == "copy_":
            if id(node) not in fallbacks:
                return False
        elif fn.attr not in _LOOKS:
            return False
    return True


def _is_none_test(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Is) and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None)
