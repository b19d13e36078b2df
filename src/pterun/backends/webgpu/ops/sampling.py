"""Resampling: upsample_nearest2d and upsample_bilinear2d (shaders/upsample2d.wgsl), grid_sampler_2d
(shaders/grid_sampler.wgsl) and et_vk.grid_priors (shaders/grid_priors.wgsl)."""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import grid, require_f32
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument


def _scale(size: int, out: int, factor: float | None, align_corners: bool, bilinear: bool) -> float:
    """PyTorch's area_pixel_compute_scale (bilinear) and compute_scales_value (nearest)."""
    if bilinear and align_corners:
        return (size - 1) / (out - 1) if out > 1 else 0.0
    if factor is not None and factor > 0:
        return 1.0 / factor
    return size / out if out else 0.0


def build_upsample(b: NodeBuilder, op) -> None:
    args = op.args
    bilinear = op.name == "aten.upsample_bilinear2d.vec"
    x = b.tensor(args[0])
    require_f32(b, x)
    sizes = b.static_ints(args[1]) if b.value(args[1]) is not None else []
    align = bool(b.scalar(args[2], False)) if bilinear else False
    factors_vid = args[3] if bilinear else args[2]
    factors = list(b.value(factors_vid).items) if b.value(factors_vid) is not None else []
    if x.ndim != 4 or (not sizes and len(factors) != 2):
        raise DelegateInvalidCompatibility(f"{op.name}: needs an [N, C, H, W] input and two sizes or factors")

    def out_size():
        h, w = x.shape[-2:]
        if sizes:
            return tuple(sizes)
        return math.floor(h * factors[0]), math.floor(w * factors[1])

    y = b.out(args[-1], lambda: (*x.shape[:-2], *out_size()))

    def params():
        h, w = x.shape[-2:]
        oh, ow = out_size()
        fh, fw = (None, None) if sizes else factors
        return [y.numel, h, w, oh, ow, _scale(h, oh, fh, align, bilinear), _scale(w, ow, fw, align, bilinear),
                int(align)]

    b.dispatch("upsample2d", {"BILINEAR": "true" if bilinear else "false"}, [x, y], params,
               lambda: grid(y.numel))


def build_grid_sampler(b: NodeBuilder, op) -> None:
    args = op.args
    x, g = b.tensor(args[0]), b.tensor(args[1])
    require_f32(b, x, g)
    mode, padding, align = int(b.scalar(args[2])), int(b.scalar(args[3])), bool(b.scalar(args[4]))
    if mode not in (0, 1) or padding not in (0, 1, 2) or x.ndim != 4:
        raise DelegateInvalidCompatibility(
            f"{op.name}: interpolation {mode} and padding {padding} (of a 4-d input) are not supported"
        )

    def shape():
        if g.ndim != 4 or g.shape[0] != x.shape[0] or g.shape[3] != 2:
            raise InvalidArgument(f"{op.name}: grid {list(g.shape)} for input {list(x.shape)}")
        return (x.shape[0], x.shape[1], g.shape[1], g.shape[2])

    y = b.out(args[-1], shape)
    b.dispatch("grid_sampler", {}, [x, g, y],
               lambda: [y.numel, *x.shape[1:], g.shape[1], g.shape[2], mode, padding, int(align)],
               lambda: grid(y.numel))


def build_grid_priors(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    stride, offset = int(b.scalar(args[1])), float(b.scalar(args[2]))
    if x.ndim < 2:
        raise DelegateInvalidCompatibility(f"{op.name}: needs an input of two dimensions or more")
    y = b.out(args[-1], lambda: (x.shape[-2] * x.shape[-1], 2))
    if y.elem != "f32":
        raise DelegateInvalidCompatibility(f"{op.name}: only a float32 result is supported")
    b.dispatch("grid_priors", {}, [y], lambda: [y.numel // 2, x.shape[-1], stride, offset],
               lambda: grid(y.numel // 2))


OPS = {
    "aten.upsample_nearest2d.vec": build_upsample,
    "aten.upsample_bilinear2d.vec": build_upsample,
    "aten.grid_sampler_2d.default": build_grid_sampler,
    "et_vk.grid_priors.default": build_grid_priors,
}
