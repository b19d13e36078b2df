"""Static 8-bit 2-d convolutions on the CPU: pterun's native kernels, or integer matrix products
(``qlinear.emit_static``).

Where the native kernels run (``native.enabled``) they take every signed 8-bit convolution but transposed
ones, dense, grouped and depthwise, with the weights packed once at load (``native/qconv.c``: XNNPACK's integer
sums and its requantization, bit for bit).

Elsewhere (``native=False``, unsigned values), dense convolutions are integer products: each output pixel is
one row of the product, its window of the NHWC input, [kernel height, kernel width, channels] in the filter's
own order. A 1x1 convolution with unit strides and no padding reads the input's pixels as they are; any other
gathers its windows (im2col) with one copy of a strided view. Padding holds the input's zero point, as XNNPACK
pads, so it adds nothing once the zero point is folded into the bias: the int32 sums are XNNPACK's, and so,
after its requantization, is every output. Where no integer product is exact on this CPU (``isa.py``),
``static_q8`` declines and the node takes the float convolution of ``conv.py``, exact too.
"""

from __future__ import annotations

from pterun.backends.xnnpack.graph import Datatype
from pterun.backends.xnnpack.nodes import native, qlinear, qmath

MIN_RUN = 16  # bytes of a window row below which gathering windows costs more than the float convolution


def native_q8(node, b, x, f, bias, y, xshape, shape) -> bool:
    """Emits a signed 8-bit XNNConv2d or XNNDepthwiseConv2d with the native kernels; False (nothing emitted)
    where they do not run or the values are not signed 8-bit ones."""
    if not (native.enabled(b) and node.kind in ("XNNConv2d", "XNNDepthwiseConv2d") and qmath.is_q8(y)
            and x.datatype == y.datatype == Datatype.QINT8):
        return False
    p = node.p
    cout = shape[3]
    depthwise = node.kind == "XNNDepthwiseConv2d"
    cin_g = 1 if depthwise else p.group_input_channels
    sx, zx = qmath.per_tensor(x, node.where)
    so, zo = qmath.per_tensor(y, node.where)
    qmin, qmax = qmath.output_bounds(node, y, node.where)

    def prepare():
        # XNNPACK's filters: [cout, kh, kw, cin / groups], a depthwise one [1, kh, kw, cout]
        filt = f.data.permute(3, 1, 2, 0) if depthwise else f.data
        scales = qmath.requant_scales(sx, qmath.weight_scales(f, cout, node.where), so, node.where)
        return native.qconv_pack(
            b, p.groups, cin_g, cout // p.groups, (p.kernel_height, p.kernel_width),
            (p.subsampling_height, p.subsampling_width), (p.dilation_height, p.dilation_width),
            (p.padding_top, p.padding_left), filt, scales, qlinear.int_bias(node, bias, cout), zx, zo, qmin, qmax)

    layer = b.cached("q8conv", prepare)
    kind = "depthwise" if depthwise else "grouped" if p.groups > 1 else "dense"
    b.route(f"native int8 {kind} convolution ({native.qconv_isa(layer)})")
    o = b.define(y.id, shape)
    native.emit_qconv(b, layer, xshape, b.ref(x.id), shape, o)
    return True


def takes(node, b, cin: int) -> bool:
    """Whether this module computes ``node``: a dense (one group) XNNConv2d on the CPU, whose window rows
    (kernel width x channels, when contiguous) are long enough to gather quickly."""
    p = node.p
    run = cin * (p.kernel_width if p.dilation_width == 1 else 1)
    pointwise = p.kernel_height == p.kernel_width == 1
    return node.kind == "XNNConv2d" and p.groups == 1 and b.device.type == "cpu" and (pointwise or run >= MIN_RUN)


def static_q8(node, b, x, f, bias, y, xshape, shape) -> bool:
    """Emits the convolution as an integer product; False (nothing emitted) where none is exact here."""
    p = node.p
    n, h, w, cin = xshape
    _, oh, ow, cout = shape
    kh, kw = p.kernel_height, p.kernel_width
    pads = (p.padding_top, p.padding_bottom, p.padding_left, p.padding_right)
    rows, k = n * oh * ow, kh * kw * cin
    plan = qlinear.static_plan(node, b, x, f, bias, y, (rows, k, cout), lambda: f.data)
    if plan is None:
        return False
    b.define(y.id, shape)
    o2 = b.view(y.id, (rows, cout))
    pointwise = kh == kw == 1 and p.subsampling_height == p.subsampling_width == 1 and not any(pads)
    if pointwise:
        x2 = b.view(x.id, (rows, cin))
    else:
        x2 = _windows(node, b, x, xshape, (oh, ow), pads, rows, k)
    qlinear.emit_static(node, b, x, y, x2, o2, (rows, k, cout), plan)
    return True


def _windows(node, b, x, xshape, out_hw, pads, rows: int, k: int) -> str:
    """A [pixels, kh * kw * channels] buffer of every output pixel's input window, filled on each call."""
    p = node.p
    n, h, w, cin = xshape
    top, bottom, left, right = pads
    dtype = b.storage_dtype(x)
    name = b.ref(x.id)
    if any(pads) or name not in b.env:
        # A buffer of our own, bordered by the zero point: the caller's tensor may have any strides.
        padded = b.scratch((n, h + top + bottom, w + left + right, cin), dtype, fill=int(x.quant.zero_point))
        interior = b.bind(b.env[padded][:, top:top + h, left:left + w, :], f"{padded}_in")
        b.emit(f"{interior}.copy_({name})")
        source, hp, wp = b.env[padded], h + top + bottom, w + left + right
    else:
        source, hp, wp = b.env[name], h, w
    windows = (n, *out_hw, p.kernel_height, p.kernel_width, cin)
    strides = (hp * wp * cin, p.subsampling_height * wp * cin, p.subsampling_width * cin,
               p.dilation_height * wp * cin, p.dilation_width * cin, 1)
    cols = b.scratch((rows, k), dtype)
    view, target = source.as_strided(windows, strides), b.env[cols].view(windows)
    if p.dilation_width == 1:
        # One copy per kernel row, of runs of kernel width x channels bytes: faster than one copy of short runs.
        for i in range(p.kernel_height):
            b.emit(f"{b.bind(target[:, :, :, i], 'cols')}.copy_({b.bind(view[:, :, :, i], 'windows')})")
    else:
        b.emit(f"{b.bind(target, 'cols')}.copy_({b.bind(view, 'windows')})")
    return cols
