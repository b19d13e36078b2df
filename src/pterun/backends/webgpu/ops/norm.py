"""Normalizations: et_vk.rms_norm and native_layer_norm over trailing dimensions, inference batch norm.

Kernels: shaders/rms_norm.wgsl, shaders/layer_norm.wgsl, shaders/batch_norm.wgsl.
"""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import grid, row_dispatches
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument


def build_rms_norm(b: NodeBuilder, op) -> None:
    args = op.args
    x, w = b.tensor(args[0]), b.tensor(args[1])
    eps = float(b.scalar(args[2], 1e-6))
    if x.elem != "f32" or w.elem != "f32":
        raise DelegateInvalidCompatibility("et_vk.rms_norm: only float32 is supported")

    def shape():
        if w.numel != x.shape[-1]:
            raise InvalidArgument(f"rms_norm: weight {list(w.shape)} for input {list(x.shape)}")
        return x.shape

    y = b.out(args[-1], shape)

    def layout():
        return (math.prod(x.shape[:-1]), x.shape[-1]) if x.shape else (1, 1)

    row_dispatches(b, "rms_norm", {}, [x, w, y], lambda: [*layout(), eps], layout)


def build_layer_norm(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    normalized = b.static_ints(args[1])
    w = b.tensor(args[2]) if b.is_tensor(args[2]) else None
    bias = b.tensor(args[3]) if b.is_tensor(args[3]) else None
    eps = float(b.scalar(args[4], 1e-5))
    outs = b.outputs(args[-1])
    if x.elem != "f32":
        raise DelegateInvalidCompatibility("native_layer_norm: only float32 is supported")
    k = len(normalized)

    def rows():
        if list(x.shape[x.ndim - k :]) != list(normalized):
            raise InvalidArgument(f"layer_norm over {normalized} of a {list(x.shape)} input")
        return math.prod(x.shape[: x.ndim - k])

    y = b.out(outs[0], lambda: x.shape)
    stats_shape = lambda: (*x.shape[: x.ndim - k], *([1] * k))  # noqa: E731
    mean = (
        b.out(outs[1], stats_shape) if len(outs) > 1 else b.scratch(math.prod(b.graph.tensor(args[0]).dims))
    )
    rstd = (
        b.out(outs[2], stats_shape) if len(outs) > 2 else b.scratch(math.prod(b.graph.tensor(args[0]).dims))
    )
    length = math.prod(normalized)
    row_dispatches(
        b,
        "layer_norm",
        {},
        [x, w or x, bias or x, y, mean, rstd],
        lambda: [rows(), length, eps, int(w is not None), int(bias is not None)],
        lambda: (rows(), length),
    )


def build_batch_norm(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    w = b.tensor(args[1]) if b.is_tensor(args[1]) else None
    bias = b.tensor(args[2]) if b.is_tensor(args[2]) else None
    mean, var = b.tensor(args[3]), b.tensor(args[4])
    eps = float(b.scalar(args[6], 1e-5))
    if x.elem != "f32" or x.ndim < 2:
        raise DelegateInvalidCompatibility("batch norm: needs a float32 input with a channel dimension")
    outs = b.outputs(args[-1])
    y = b.out(outs[0], lambda: x.shape)
    # The saved statistics of training mode are empty tensors in inference.
    for vid in outs[1:]:
        b.out(vid, lambda: (0,))

    def params():
        return [x.numel, x.shape[1], math.prod(x.shape[2:]), eps, int(w is not None), int(bias is not None)]

    b.dispatch("batch_norm", {}, [x, w or x, bias or x, mean, var, y], params, lambda: grid(x.numel))


def build_group_norm(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    w = b.tensor(args[1]) if b.is_tensor(args[1]) else None
    bias = b.tensor(args[2]) if b.is_tensor(args[2]) else None
    groups = int(b.scalar(args[6]))
    eps = float(b.scalar(args[7], 1e-5))
    if x.elem != "f32" or x.ndim < 2 or groups < 1:
        raise DelegateInvalidCompatibility("native_group_norm: needs a float32 input with a channel dimension")
    outs = b.outputs(args[-1])

    def layout():
        n, c = x.shape[0], x.shape[1]
        if c % groups:
            raise InvalidArgument(f"native_group_norm: {c} channels in {groups} groups")
        return n, c // groups, math.prod(x.shape[2:])

    y = b.out(outs[0], lambda: x.shape)
    stats = [b.out(vid, lambda: (x.shape[0], groups)) for vid in outs[1:3]]
    while len(stats) < 2:
        stats.append(b.scratch(b.graph.tensor(args[0]).dims[0] * groups))
    b.dispatch(
        "group_norm",
        {},
        [x, w or x, bias or x, y, *stats],
        lambda: [layout()[0] * groups, layout()[1], layout()[2], eps, int(w is not None), int(bias is not None),
                 groups],
        lambda: grid(layout()[0] * groups),
    )


OPS = {
    "et_vk.rms_norm.default": build_rms_norm,
    "aten.native_group_norm.default": build_group_norm,
    "aten.native_layer_norm.default": build_layer_norm,
    "aten._native_batch_norm_legit_no_training.default": build_batch_norm,
}
