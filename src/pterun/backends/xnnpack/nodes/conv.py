"""Convolution nodes: 2-d, depthwise and transposed, on NHWC values.

XNNPACK's convolutions read and write NHWC. A contiguous NHWC buffer
permuted to NCHW is a channels-last NCHW tensor, so torch's convolution runs
on views of the buffers directly, writing its channels-last result in place.

Filters, in torch's layouts:
* XNNConv2d: [Cout, KH, KW, Cin/groups] -> [Cout, Cin/groups, KH, KW];
* XNNDepthwiseConv2d: [1, KH, KW, Cout] -> [Cout, 1, KH, KW] (groups = input channels);
* XNNConvTranspose2d: [Cout, KH, KW, Cin/groups], grouped by output channel ->
  [Cin, Cout/groups, KH, KW].
"""

from __future__ import annotations

import math

import torch

from pterun.backends.xnnpack.compiler import Builder
from pterun.backends.xnnpack.graph import INVALID_ID, Datatype, DynamicRows, Node
from pterun.backends.xnnpack.nodes import native, packed, qconv, qmath
from pterun.backends.xnnpack.nodes.common import emit_float_clamp, is_float, require_float, unsupported
from pterun.backends.xnnpack.nodes.qlinear import int_bias
from pterun.errors import InvalidArgument, InvalidProgram

_NCHW = (0, 3, 1, 2)


def _torch_filter(node: Node, f: torch.Tensor) -> torch.Tensor:
    p = node.p
    if node.kind == "XNNConv2d":
        return f.permute(0, 3, 1, 2)
    if node.kind == "XNNDepthwiseConv2d":
        return f.permute(3, 0, 1, 2)
    g, cout, kh, kw, cin_g = p.groups, f.shape[0], f.shape[1], f.shape[2], f.shape[3]
    return f.reshape(g, cout // g, kh, kw, cin_g).permute(0, 4, 1, 2, 3).reshape(g * cin_g, cout // g, kh, kw)


def _geometry(node: Node, b: Builder, xshape, wshape) -> tuple[tuple[int, ...], int, int]:
    """The output shape, and input and output channel counts, checked against the node's parameters."""
    p = node.p
    if len(xshape) != 4 or len(wshape) != 4:
        raise InvalidArgument(f"XNNPACK {node.where}: input {list(xshape)} or filter {list(wshape)} is not 4-d")
    n, h, w, cin = xshape
    groups, cin_g, cout_g = p.groups, p.group_input_channels, p.group_output_channels
    if min(groups, cin_g, cout_g, p.kernel_height, p.kernel_width, p.subsampling_height,
           p.subsampling_width, p.dilation_height, p.dilation_width) < 1:
        raise InvalidProgram(f"XNNPACK {node.where}: convolution parameters {vars(p)} are invalid")
    if node.kind == "XNNDepthwiseConv2d":
        expected_in, cout = groups, groups * (cout_g // cin_g)
        expected_filter = (1, p.kernel_height, p.kernel_width, cout)
    else:
        expected_in, cout = groups * cin_g, groups * cout_g
        expected_filter = (cout, p.kernel_height, p.kernel_width, cin_g)
    if cin != expected_in or tuple(wshape) != expected_filter:
        raise InvalidArgument(
            f"XNNPACK {node.where}: input {list(xshape)} and filter {list(wshape)} do not fit "
            f"{groups} groups of {cin_g} -> {cout_g} channels"
        )
    kh = (p.kernel_height - 1) * p.dilation_height + 1
    kw = (p.kernel_width - 1) * p.dilation_width + 1
    if node.kind == "XNNConvTranspose2d":
        oh = p.subsampling_height * (h - 1) + p.adjustment_height + kh - p.padding_top - p.padding_bottom
        ow = p.subsampling_width * (w - 1) + p.adjustment_width + kw - p.padding_left - p.padding_right
    else:
        oh = (h + p.padding_top + p.padding_bottom - kh) // p.subsampling_height + 1
        ow = (w + p.padding_left + p.padding_right - kw) // p.subsampling_width + 1
    if oh < 1 or ow < 1:
        raise InvalidArgument(f"XNNPACK {node.where}: input {list(xshape)} is smaller than the kernel")
    return (n, oh, ow, cout), cin, cout


def convolution(node: Node, b: Builder) -> None:
    p = node.p
    x, f, y = b.value(p.input1_id), b.value(p.filter_id), b.value(p.output_id)
    bias = None if p.bias_id == INVALID_ID else b.value(p.bias_id)
    if f.data is None or (bias is not None and bias.data is None):
        raise unsupported(node, f)
    xshape = b.shape(x.id)
    shape, _, cout = _geometry(node, b, xshape, f.dims)
    if bias is not None and tuple(bias.dims) != (cout,):
        raise InvalidProgram(f"XNNPACK {node.where}: bias {list(bias.dims)} for {cout} output channels")
    transposed = node.kind == "XNNConvTranspose2d"
    groups = p.groups
    symmetric = p.padding_top == p.padding_bottom and p.padding_left == p.padding_right
    if transposed and not symmetric:
        raise unsupported(node, x, f, y)
    if isinstance(x.quant, DynamicRows):
        return _dynamic(node, b, x, f, bias, y, xshape, shape, cout, symmetric)
    quantized = qmath.is_q8(x) and f.datatype in (Datatype.QCINT8, Datatype.QINT8)
    if quantized and qconv.native_q8(node, b, x, f, bias, y, xshape, shape):
        return
    if (quantized and qconv.takes(node, b, xshape[3]) and qmath.is_q8(y) and y.datatype == x.datatype
            and qconv.static_q8(node, b, x, f, bias, y, xshape, shape)):
        return
    if not quantized:
        require_float(node, x, f, y, *([bias] if bias is not None else []))
        pad = (p.padding_top, p.padding_left, p.padding_bottom, p.padding_right)
        if not transposed and _native_depthwise(node, b, f, bias, x, y, xshape, shape):
            return
        if not transposed and _native_dense(node, b, f, bias, x, y, xshape, shape):
            return
        if packed.convolution(node, b, x, _torch_filter(node, f.data), bias, y, xshape, shape, pad):
            return
    o = b.define(y.id, shape)

    if quantized:
        if not qmath.is_q8(y) or y.datatype != x.datatype:
            raise unsupported(node, x, f, y)
        sx, zx = qmath.per_tensor(x, node.where)
        so, zo = qmath.per_tensor(y, node.where)
        lo, hi = qmath.qrange(x)

        def prepare():
            wt = _torch_filter(node, f.data.to(torch.float64))
            per_out = wt.transpose(0, 1) if transposed else wt
            sums = per_out.abs().reshape(per_out.shape[0], -1).sum(1)
            if transposed:
                # Each output of a transposed convolution sums over every group's share of the kernel.
                sums = sums.reshape(-1).repeat(groups)[:cout] if sums.numel() != cout else sums
            bias_int = int_bias(node, bias, cout).to(torch.float64)
            dtype = qmath.accumulator_dtype(sums, max(hi - zx, zx - lo), bias_int.abs())
            if b.device.type == "cuda":
                dtype = torch.float64  # cuDNN may pick float32 algorithms (Winograd, FFT) that round
            wt = wt.to(dtype).contiguous(memory_format=torch.channels_last).to(b.device)
            scales = qmath.requant_scales(sx, qmath.weight_scales(f, cout, node.where), so, node.where)
            return wt, bias_int.to(dtype).to(b.device), scales.to(b.device), dtype

        wt, bias_t, rq, dtype = b.cached("q8", prepare)
        b.route(f"{'float32' if dtype == torch.float32 else 'float64'} convolution of integers")
        xf = b.scratch(_padded(xshape, p, symmetric), dtype, fill=None if symmetric else 0.0)
        b.emit(f"{_interior(b, xf, xshape, p, symmetric)}.copy_({b.ref(x.id)})")
        if zx:
            # Only the interior: padding is the zero point, which is 0 once centered.
            b.emit(f"{_interior(b, xf, xshape, p, symmetric)}.sub_({b.number(zx)})")
        acc = b.scratch(shape, dtype)
        _emit_conv(node, b, xf, b.bind(wt, "w"), b.bind(bias_t, "bias"), acc, symmetric)
        if dtype != torch.float32:
            acc32 = b.scratch(shape)
            b.emit(f"{acc32}.copy_({acc})")
            acc = acc32
        qmin, qmax = qmath.output_bounds(node, y, node.where)
        qmath.emit_requantize(b, acc, b.bind(rq, "rq"), zo, qmin, qmax, o)
        return

    def prepare_float():
        return _torch_filter(node, f.data).contiguous(memory_format=torch.channels_last).to(b.device)

    wt = b.cached("f", prepare_float)
    bias_name = b.ref(bias.id) if bias is not None else "None"
    if symmetric:
        src = b.ref(x.id)
    else:
        src = b.scratch(_padded(xshape, p, symmetric), fill=0.0)
        b.emit(f"{_interior(b, src, xshape, p, symmetric)}.copy_({b.ref(x.id)})")
    _emit_conv(node, b, src, b.bind(wt, "w"), bias_name, o, symmetric)
    emit_float_clamp(node, b, o)


# The native depthwise kernel's work limit (multiply-adds a call) per family: below it the kernel beats oneDNN at
# one thread on an AVX-512 Xeon (16 x 16 x 32: 4.9 against 35 us; 7 x 7 x 960: 27 against 45; 28 x 28 x 192:
# 70 against 69), above it oneDNN's blocked kernels win (112 x 112 x 32: 212 against 184 us); the AVX2 form,
# half the width, breaks even near a quarter of that.
NATIVE_DEPTHWISE_MACS = {"avx512f": 1 << 21, "avx2": 1 << 19}


# The native dense convolution's work limit by float family (multiply-adds of a call): past it, oneDNN's blocked
# kernels win.
NATIVE_DENSE_MACS = {"avx512f": 1 << 21, "avx2": 1 << 20}


def _native_dense(node: Node, b: Builder, f, bias, x, y, xshape, shape) -> bool:
    """A float32 convolution of one group (1 x 1 ones included: a product over pixels) through the native kernel,
    in XNNPACK's order with its clamp fused, where it runs here and the call is small enough to win: oneDNN costs
    20-30 us a call however small the image, addmm and a clamp apart 3-9 us."""
    p = node.p
    lo, hi = node.output_min, node.output_max
    taps = p.kernel_height * p.kernel_width
    if (p.groups != 1 or not native.float_enabled(b) or not lo <= hi or taps > native.CONV_MAX_TAPS
            or f.datatype != Datatype.FP32 or (bias is not None and bias.datatype != Datatype.FP32)):
        return False
    if math.prod(shape) * xshape[3] * taps > NATIVE_DENSE_MACS.get(native.float_family() or "", 0):
        return False
    weights = b.cached("conv", lambda: native.conv_pack(_torch_filter(node, f.data).to(torch.float32),
                                                        None if bias is None else bias.data.to(torch.float32)))
    o = b.define(y.id, shape)
    window = (p.subsampling_height, p.subsampling_width, p.dilation_height, p.dilation_width, p.padding_top,
              p.padding_left)
    native.emit_conv(b, b.ref(x.id), weights, o, xshape, shape, (p.kernel_height, p.kernel_width), window, lo, hi)
    return True


def _native_depthwise(node: Node, b: Builder, f, bias, x, y, xshape, shape) -> bool:
    """A float32 depthwise convolution (one kernel per channel) through the native kernel, where it runs here and
    the call is small enough to win: oneDNN, PyTorch's only way to it, costs about 33 us a call however small the
    image."""
    p = node.p
    channels = xshape[3]
    lo, hi = node.output_min, node.output_max
    if (p.groups != channels or shape[3] != channels or not native.float_enabled(b) or not lo <= hi
            or f.datatype != Datatype.FP32 or (bias is not None and bias.datatype != Datatype.FP32)):
        return False
    macs = shape[0] * shape[1] * shape[2] * channels * p.kernel_height * p.kernel_width
    if macs > NATIVE_DEPTHWISE_MACS.get(native.float_family() or "", 0):
        return False

    def prepare():
        # torch's [c, 1, kh, kw] as the kernel reads it: [kh, kw, c], a channel's taps c apart
        return _torch_filter(node, f.data).to(torch.float32).permute(2, 3, 0, 1).reshape(
            p.kernel_height, p.kernel_width, channels).contiguous()

    weights = b.cached("dw", prepare)
    o = b.define(y.id, shape)
    window = (p.subsampling_height, p.subsampling_width, p.dilation_height, p.dilation_width, p.padding_top,
              p.padding_left)
    native.emit_dwconv(b, b.ref(x.id), weights, b.ref(bias.id) if bias is not None else None, o, xshape, shape,
                       window, lo, hi)
    return True


def _dynamic(node: Node, b: Builder, x, f, bias, y, xshape, shape, cout: int, symmetric: bool) -> None:
    """Images quantized at run time (one scale per image) with int8 filters, float output (qd8_f32_qc8w)."""
    if f.datatype not in (Datatype.QCINT8, Datatype.QINT8) or not is_float(y) or y.datatype != Datatype.FP32:
        raise unsupported(node, x, f, y)
    if bias is not None and bias.datatype != Datatype.FP32:
        raise unsupported(node, bias)
    q = b.dynamic.get(x.id)
    if q is None or not symmetric:
        raise unsupported(node, x, f, y)
    count, row_scale = q.rows, q.scales
    n = xshape[0]
    if count == n:
        scale_shape = (n, 1, 1, 1)
    elif count == n * xshape[1] * xshape[2] and tuple(shape[:3]) == tuple(xshape[:3]):
        scale_shape = (*xshape[:3], 1)  # a pointwise convolution: one scale per pixel
    else:
        raise unsupported(node, x, f, y)

    def prepare():
        wt = _torch_filter(node, f.data.to(torch.float64))
        dtype = qmath.accumulator_dtype(wt.abs().reshape(wt.shape[0], -1).sum(1), 255, None)
        if node.kind == "XNNConvTranspose2d" or b.device.type == "cuda":
            dtype = torch.float64
        wt = wt.to(dtype).contiguous(memory_format=torch.channels_last).to(b.device)
        return wt, qmath.weight_scales(f, cout, node.where).to(b.device), dtype

    wt, wscale, dtype = b.cached("qd8", prepare)
    b.route(f"{'float32' if dtype == torch.float32 else 'float64'} convolution of integers")
    o = b.define(y.id, shape)
    rows = q.centered(b)
    src = b.bind(b.env[rows].view(xshape), "xq") if dtype == torch.float32 else b.scratch(xshape, dtype)
    if dtype != torch.float32:
        b.emit(f"{src}.copy_({rows}.view({b.number(tuple(xshape))}))")
    acc = o if dtype == torch.float32 else b.scratch(shape, dtype)
    _emit_conv(node, b, src, b.bind(wt, "w"), "None", acc, symmetric)
    if acc != o:
        b.emit(f"{o}.copy_({acc})")
    rscale = b.bind(b.env[row_scale].view(scale_shape), "rscale")
    qmath.emit_dequantize(b, o, rscale, b.bind(wscale, "wscale"), bias)
    emit_float_clamp(node, b, o)


def _padded(xshape, p, symmetric: bool) -> tuple[int, ...]:
    if symmetric:
        return tuple(xshape)
    n, h, w, c = xshape
    return n, h + p.padding_top + p.padding_bottom, w + p.padding_left + p.padding_right, c


def _interior(b: Builder, buf: str, xshape, p, symmetric: bool) -> str:
    if symmetric:
        return buf
    h, w = xshape[1], xshape[2]
    view = b.env[buf][:, p.padding_top:p.padding_top + h, p.padding_left:p.padding_left + w, :]
    return b.bind(view, f"{buf}_in")


def _pointwise(node: Node) -> bool:
    p = node.p
    return (node.kind == "XNNConv2d" and p.groups == 1 and p.kernel_height == p.kernel_width == 1
            and p.subsampling_height == p.subsampling_width == 1
            and not (p.padding_top or p.padding_right or p.padding_bottom or p.padding_left))


def _emit_conv(node: Node, b: Builder, x: str, w: str, bias: str, out: str, symmetric: bool) -> None:
    p = node.p
    weight = b.env[w]
    if _pointwise(node):
        # A 1x1 convolution over NHWC is a matrix product over pixels, as XNNPACK runs it too.
        cout, cin = weight.shape[0], weight.shape[1]
        w2 = b.bind(weight.reshape(cout, cin).t(), f"{w}_kn")
        x2, o2 = b.reshaped(x, (-1, cin)), b.reshaped(out, (-1, cout))
        if bias == "None":
            b.emit(f"torch.mm({x2}, {w2}, out={o2})")
        else:
            b.emit(f"torch.addmm({bias}, {x2}, {w2}, out={o2})")
        return
    transposed = node.kind == "XNNConvTranspose2d"
    pad = [p.padding_top, p.padding_left] if symmetric else [0, 0]
    stride = [p.subsampling_height, p.subsampling_width]
    dilation = [p.dilation_height, p.dilation_width]
    adjust = [p.adjustment_height, p.adjustment_width] if transposed else [0, 0]
    # The functional convolution and a copy beat convolution.out, which does the same plus checks.
    b.emit(
        f"{b.permuted(out, _NCHW)}.copy_(torch.convolution({b.permuted(x, _NCHW)}, {w}, {bias}, {b.number(stride)}, "
        f"{b.number(pad)}, {b.number(dilation)}, {transposed}, {b.number(adjust)}, {b.number(p.groups)}))"
    )


TRANSLATORS = {
    "XNNConv2d": convolution,
    "XNNDepthwiseConv2d": convolution,
    "XNNConvTranspose2d": convolution,
}
