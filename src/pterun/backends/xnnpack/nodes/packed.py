"""Float32 convolutions and fully connected nodes on oneDNN, with weights prepacked at load (CPU).

What TorchInductor's CPU freezing runs: each weight is reordered once into
oneDNN's blocked layout (``mkldnn_reorder_conv2d_weight``,
``_reorder_linear_weight``) and ``torch.ops.mkldnn._convolution_pointwise`` /
``_linear_pointwise`` apply it with the node's output clamp fused as a post-op
(``relu``, ``hardtanh``). PyTorch's x86 wheels have no XNNPACK
(``torch.ops.prepacked`` is missing there), and their float matrix products
through MKL are up to 5x slower than oneDNN's on these shapes.

These ops return a new tensor (there is no ``out=``), which the generated code
keeps as the value (``Builder.returned``) rather than copying it into a buffer;
a convolution's channels-last result feeds the next convolution as it is.

Used on the CPU where torch has the ops (``USE_MKLDNN`` builds), unless the
backend option ``onednn`` is False (``load_program(...,
backend_options={"XnnpackBackend": {"onednn": False}})``). Small products stay
on ``addmm`` with ``out=`` (oneDNN costs about 10 us a call more). oneDNN sums
in another order than XNNPACK and MKL: float rounding only (README.md).
"""

from __future__ import annotations

import functools
import math

import torch

from pterun.backends.xnnpack.compiler import Builder
from pterun.backends.xnnpack.graph import Datatype, Node

OPTION = "onednn"

# Matrix products of fewer multiply-adds run faster through addmm than through oneDNN's call.
MIN_LINEAR_MACS = 1 << 21


@functools.cache
def _has_ops() -> bool:
    try:
        return (torch.backends.mkldnn.is_available()
                and callable(torch._C._nn.mkldnn_reorder_conv2d_weight)
                and all(hasattr(torch.ops.mkldnn, op) for op in (
                    "_convolution_pointwise", "_linear_pointwise", "_reorder_linear_weight")))
    except (AttributeError, RuntimeError):
        return False


def enabled(b: Builder, x) -> bool:
    """Whether oneDNN runs a node reading ``x``: float32 (half types keep torch's own kernels), on the CPU."""
    return (x.datatype == Datatype.FP32 and b.device.type == "cpu" and b.options.get(OPTION, True) is not False
            and _has_ops())


def _post_op(node: Node, b: Builder) -> tuple[str, str] | None:
    """The node's output clamp as oneDNN's post-op (attribute, scalars), or None where it is invalid."""
    lo, hi = node.output_min, node.output_max
    if lo > hi or math.isnan(lo) or math.isnan(hi):
        return None  # the plain path reports it
    if math.isinf(lo) and lo < 0 and math.isinf(hi) and hi > 0:
        return "'none'", "[]"
    if lo == 0 and math.isinf(hi) and hi > 0:
        return "'relu'", "[]"
    return "'hardtanh'", b.number([float(lo), float(hi)])


def convolution(node: Node, b: Builder, x, filt: torch.Tensor, bias, y, xshape, shape, pad) -> bool:
    """Emits a 2-d or depthwise convolution (``filt`` in torch's layout, ``pad`` top, left, bottom, right);
    returns False where oneDNN does not take it (the caller runs it another way)."""
    post = _post_op(node, b)
    if not enabled(b, x) or post is None or node.kind == "XNNConvTranspose2d":
        return False
    p = node.p
    n, h, w, cin = xshape
    cout = shape[3]
    if p.groups == 1 and filt.shape[2:] == (1, 1) and (p.subsampling_height, p.subsampling_width) == (1, 1) \
            and not any(pad):
        # 1x1: a product over pixels (no NCHW needed), or addmm where small.
        return _linear(node, b, x.id, filt.reshape(cout, cin), bias, y, n * h * w, cin, cout, shape, post)
    top, left, bottom, right = pad
    if (top, left) == (bottom, right):
        src = b.nchw(x.id)
    else:
        # oneDNN pads symmetrically only: copy into a zero-bordered buffer.
        h, w = h + top + bottom, w + left + right
        buf = b.scratch((n, h, w, cin), fill=0.0)
        interior = b.bind(b.env[buf][:, top:top + xshape[1], left:left + xshape[2], :], f"{buf}_in")
        b.emit(f"{interior}.copy_({b.ref(x.id)})")
        src = b.permuted(buf, (0, 3, 1, 2))
        top = left = 0

    def prepare():
        return torch._C._nn.mkldnn_reorder_conv2d_weight(
            filt.contiguous().to_mkldnn(), [top, left], [p.subsampling_height, p.subsampling_width],
            [p.dilation_height, p.dilation_width], p.groups, [n, cin, h, w])

    weight = b.bind(b.cached("onednn", prepare), "wpk")  # packed once: right for any input shape
    op = _op(b, "conv_pw", torch.ops.mkldnn._convolution_pointwise.default)
    bias_name = b.ref(bias.id) if bias is not None else "None"
    b.returned(y.id, shape, (
        f"{op}({src}, {weight}, {bias_name}, {b.number([top, left])}, "
        f"{b.number([p.subsampling_height, p.subsampling_width])}, {b.number([p.dilation_height, p.dilation_width])}, "
        f"{b.number(p.groups)}, {post[0]}, {post[1]}, '')"), nchw=True)
    return True


def fully_connected(node: Node, b: Builder, x, w_nk: torch.Tensor | None, bias, y, rows: int, k: int, n: int,
                    shape) -> bool:
    """Emits a fully connected node with a constant filter (``w_nk``: [N, K]); False where oneDNN does not take it."""
    post = _post_op(node, b)
    if w_nk is None or post is None or not enabled(b, x) or (bias is not None and bias.data is None):
        return False
    return _linear(node, b, x.id, w_nk, bias, y, rows, k, n, shape, post)


def _linear(node: Node, b: Builder, xid: int, w_nk: torch.Tensor, bias, y, rows: int, k: int, n: int, shape,
            post) -> bool:
    if rows * k * n < MIN_LINEAR_MACS:
        return False
    x2 = b.view(xid, (rows, k))
    weight = b.bind(b.cached("onednn", lambda: torch.ops.mkldnn._reorder_linear_weight(
        w_nk.contiguous(), rows)), "wpk")  # packed once, with the first shape's rows as a hint: right for any
    op = _op(b, "linear_pw", torch.ops.mkldnn._linear_pointwise.default)
    bias_name = b.ref(bias.id) if bias is not None else "None"
    expr = f"{op}({x2}, {weight}, {bias_name}, {post[0]}, {post[1]}, '')"
    if len(shape) != 2:
        expr = f"{expr}.view({b.number(tuple(shape))})"
    b.returned(y.id, shape, expr)
    return True


def _op(b: Builder, name: str, op) -> str:
    if b.env.get(name) is not op:
        name = b.bind(op, name)
    return name
