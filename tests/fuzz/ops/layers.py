"""Layers with weights: linear, matmul, convolutions, pooling, normalizations, embedding, resampling,
attention. Weights are node constants (``Param``), drawn by the builder."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.fuzz.ops.registry import Invalid, Param, op
from tests.fuzz.spec import INTS


def _static(v, *dims) -> list[int]:
    sizes = [v.shape[d] for d in dims]
    if not all(isinstance(s, int) for s in sizes):
        raise Invalid("a layer's feature dim is dynamic")
    return sizes


def propose_linear(g):
    v = g.pick(
        dtypes=("float32",) * 6 + ("float16", "bfloat16"),
        min_rank=1,
        max_rank=4,
        where=lambda v: isinstance(v.shape[-1], int),
    )
    if v is None:
        return None
    return [v.name], {"out": g.randint(1, 8), "bias": g.chance(0.7)}


def linear_params(types, attrs):
    (k,) = _static(types[0], -1)
    dtype = types[0].dtype
    params = {"weight": Param((attrs["out"], k), dtype)}
    if attrs["bias"]:
        params["bias"] = Param((attrs["out"],), dtype)
    return params


@op("linear", propose_linear, params=linear_params, weight=1.5)
def linear(ctx, x, out, bias):
    return F.linear(x, ctx.param("weight"), ctx.params.get("bias"))


def propose_matmul(g):
    a = g.pick(dtypes=("float32",), min_rank=2, max_rank=4, where=lambda v: isinstance(v.shape[-1], int))
    if a is None:
        return None
    k, n = a.shape[-1], g.randint(1, 6)
    if g.chance(0.4):
        return [a.name], {"n": n}  # times a constant matrix
    batch = list(a.shape[:-2]) if g.chance(0.7) else []
    b = g.operand(tuple(batch + [k, n]), "float32", exact=True)
    return ([a.name, b], {"n": None}) if b else None


def matmul_params(types, attrs):
    if attrs["n"] is None:
        return {}
    (k,) = _static(types[0], -1)
    return {"b": Param((k, attrs["n"]))}


@op("matmul", propose_matmul, params=matmul_params, weight=1.0)
def matmul(ctx, a, b=None, n=None):
    return torch.matmul(a, ctx.param("b") if b is None else b)


def propose_bmm(g):
    a = g.pick(dtypes=("float32",), min_rank=3, max_rank=3, where=lambda v: isinstance(v.shape[-1], int))
    if a is None:
        return None
    b = g.operand((a.shape[0], a.shape[2], g.randint(1, 6)), "float32", exact=True)
    return ([a.name, b], {}) if b else None


@op("bmm", propose_bmm, weight=0.4)
def bmm(ctx, a, b):
    return torch.bmm(a, b)


def _spatial(g, v, nd):
    """(kernel, stride, padding, dilation) fitting the static spatial dims of ``v``."""
    sizes = [d for d in v.shape[-nd:]]
    if not all(isinstance(s, int) for s in sizes):
        return None
    kernel = [g.randint(1, min(3, s)) for s in sizes]
    stride = g.choice([1, 1, 2])
    dilation = 1 if g.chance(0.8) else 2
    padding = g.choice([0, 0, 1]) if all(k > 1 for k in kernel) else 0
    if any((k - 1) * dilation + 1 > s + 2 * padding for k, s in zip(kernel, sizes)):
        dilation = 1
    return kernel, stride, padding, dilation


def propose_conv(nd):
    def propose(g):
        v = g.pick(
            dtypes=("float32",),
            min_rank=nd + 2,
            max_rank=nd + 2,
            where=lambda v: isinstance(v.shape[1], int) and all(isinstance(d, int) for d in v.shape[2:]),
        )
        if v is None:
            return None
        fit = _spatial(g, v, nd)
        if fit is None:
            return None
        kernel, stride, padding, dilation = fit
        cin = v.shape[1]
        groups = g.choice([d for d in range(1, cin + 1) if cin % d == 0]) if g.chance(0.3) else 1
        out = groups * g.randint(1, max(1, 6 // groups))
        if g.chance(0.15) and groups == 1:
            groups, out = cin, cin  # depthwise
        return [v.name], {
            "out": out,
            "kernel": kernel,
            "stride": stride,
            "padding": padding,
            "dilation": dilation,
            "groups": groups,
            "bias": g.chance(0.7),
        }

    return propose


def conv_params(types, attrs):
    (cin,) = _static(types[0], 1)
    if cin % attrs["groups"] or attrs["out"] % attrs["groups"]:
        raise Invalid("groups divide neither channel count")
    params = {"weight": Param((attrs["out"], cin // attrs["groups"], *attrs["kernel"]))}
    if attrs["bias"]:
        params["bias"] = Param((attrs["out"],))
    return params


@op("conv1d", propose_conv(1), params=conv_params, weight=0.8)
def conv1d(ctx, x, out, kernel, stride, padding, dilation, groups, bias):
    return F.conv1d(x, ctx.param("weight"), ctx.params.get("bias"), stride, padding, dilation, groups)


@op("conv2d", propose_conv(2), params=conv_params, weight=2.0)
def conv2d(ctx, x, out, kernel, stride, padding, dilation, groups, bias):
    return F.conv2d(x, ctx.param("weight"), ctx.params.get("bias"), stride, padding, dilation, groups)


def propose_conv_transpose(g):
    v = g.pick(
        dtypes=("float32",),
        min_rank=4,
        max_rank=4,
        where=lambda v: all(isinstance(d, int) for d in v.shape[1:]),
    )
    if v is None:
        return None
    kernel = [g.randint(1, 3), g.randint(1, 3)]
    stride = g.choice([1, 2])
    padding = g.randint(0, min(kernel) - 1)
    cin = v.shape[1]
    groups = cin if g.chance(0.2) else 1
    return [v.name], {
        "out": groups * g.randint(1, 3),
        "kernel": kernel,
        "stride": stride,
        "padding": padding,
        "output_padding": g.randint(0, stride - 1) if padding or stride > 1 else 0,
        "groups": groups,
        "bias": g.chance(0.6),
    }


def conv_transpose_params(types, attrs):
    (cin,) = _static(types[0], 1)
    if cin % attrs["groups"] or attrs["out"] % attrs["groups"]:
        raise Invalid("groups divide neither channel count")
    params = {"weight": Param((cin, attrs["out"] // attrs["groups"], *attrs["kernel"]))}
    if attrs["bias"]:
        params["bias"] = Param((attrs["out"],))
    return params


@op("conv_transpose2d", propose_conv_transpose, params=conv_transpose_params, weight=0.4)
def conv_transpose2d(ctx, x, out, kernel, stride, padding, output_padding, groups, bias):
    return F.conv_transpose2d(
        x, ctx.param("weight"), ctx.params.get("bias"), stride, padding, output_padding, groups
    )


def _float_image(g, min_rank: int = 3):
    """A float32 tensor of rank ``min_rank`` to 4 whose last two dims (height and width) are static."""
    return g.pick(
        dtypes=("float32",), min_rank=min_rank, max_rank=4,
        where=lambda v: all(isinstance(d, int) for d in v.shape[-2:]),
    )


def propose_pool(g):
    v = _float_image(g)
    if v is None:
        return None
    kernel = [g.randint(1, min(3, s)) for s in v.shape[-2:]]
    stride = g.choice([1, 2, None])
    padding = g.randint(0, min(kernel) // 2)
    return [v.name], {
        "kernel": kernel,
        "stride": stride,
        "padding": padding,
        "ceil_mode": g.chance(0.2),
        "count_include_pad": g.chance(0.5),
    }


@op("max_pool2d", propose_pool, weight=0.8)
def max_pool2d(ctx, x, kernel, stride, padding, ceil_mode, count_include_pad):
    return F.max_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode)


@op("avg_pool2d", propose_pool, weight=0.8)
def avg_pool2d(ctx, x, kernel, stride, padding, ceil_mode, count_include_pad):
    return F.avg_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad)


def propose_adaptive(g):
    v = _float_image(g)
    if v is None:
        return None
    h, w = v.shape[-2:]
    size = (
        [1, 1]
        if g.chance(0.5)
        else [
            g.choice([d for d in range(1, h + 1) if h % d == 0]),
            g.choice([d for d in range(1, w + 1) if w % d == 0]),
        ]
    )
    return [v.name], {"size": size}


@op("adaptive_avg_pool2d", propose_adaptive, weight=0.3)
def adaptive_avg_pool2d(ctx, x, size):
    return F.adaptive_avg_pool2d(x, size)


def propose_layer_norm(g):
    v = g.pick(dtypes=("float32",), min_rank=1, where=lambda v: isinstance(v.shape[-1], int))
    if v is None:
        return None
    count = 2 if v.rank >= 2 and isinstance(v.shape[-2], int) and g.chance(0.3) else 1
    return [v.name], {"dims": count, "affine": g.chance(0.7), "eps": g.choice([1e-5, 1e-6])}


def layer_norm_params(types, attrs):
    shape = tuple(_static(types[0], *range(-attrs["dims"], 0)))
    return {"weight": Param(shape), "bias": Param(shape)} if attrs["affine"] else {}


@op("layer_norm", propose_layer_norm, params=layer_norm_params, weight=0.7)
def layer_norm(ctx, x, dims, affine, eps):
    return F.layer_norm(x, x.shape[-dims:], ctx.params.get("weight"), ctx.params.get("bias"), eps)


def propose_channels(g, min_rank=2):
    v = g.pick(
        dtypes=("float32",), min_rank=min_rank, max_rank=4, where=lambda v: isinstance(v.shape[1], int)
    )
    return v


def propose_batch_norm(g):
    v = propose_channels(g)
    return ([v.name], {"affine": g.chance(0.7)}) if v else None


def batch_norm_params(types, attrs):
    (c,) = _static(types[0], 1)
    params = {"mean": Param((c,)), "var": Param((c,), init="positive")}
    if attrs["affine"]:
        params.update(weight=Param((c,)), bias=Param((c,)))
    return params


@op("batch_norm", propose_batch_norm, params=batch_norm_params, weight=0.5)
def batch_norm(ctx, x, affine):
    p = ctx.params
    return F.batch_norm(x, p["mean"], p["var"], p.get("weight"), p.get("bias"), training=False, eps=1e-5)


def propose_group_norm(g):
    v = propose_channels(g, min_rank=3)
    if v is None:
        return None
    c = v.shape[1]
    return [v.name], {"groups": g.choice([d for d in range(1, c + 1) if c % d == 0]), "affine": g.chance(0.7)}


def group_norm_params(types, attrs):
    (c,) = _static(types[0], 1)
    return {"weight": Param((c,)), "bias": Param((c,))} if attrs["affine"] else {}


@op("group_norm", propose_group_norm, params=group_norm_params, weight=0.3)
def group_norm(ctx, x, groups, affine):
    return F.group_norm(x, groups, ctx.params.get("weight"), ctx.params.get("bias"), 1e-5)


def propose_embedding(g):
    v = g.pick(dtypes=INTS, max_rank=3)
    return ([v.name], {"num": g.randint(2, 10), "dim": g.randint(1, 8)}) if v else None


def embedding_params(types, attrs):
    return {"table": Param((attrs["num"], attrs["dim"]))}


@op("embedding", propose_embedding, params=embedding_params, weight=0.4)
def embedding(ctx, x, num, dim):
    return F.embedding(x.abs().remainder(num), ctx.param("table"))


def propose_interpolate(g):
    v = _float_image(g, min_rank=4)
    if v is None:
        return None
    mode = g.choice(["nearest", "bilinear", "bilinear"])
    size = [g.randint(1, 8), g.randint(1, 8)] if g.chance(0.5) else [2 * v.shape[-2], 2 * v.shape[-1]]
    return [v.name], {
        "size": size,
        "mode": mode,
        "align_corners": g.chance(0.3) if mode == "bilinear" else None,
    }


@op("interpolate", propose_interpolate, weight=0.3)
def interpolate(ctx, x, size, mode, align_corners):
    return F.interpolate(x, size=size, mode=mode, align_corners=align_corners)


def propose_attention(g):
    q = g.pick(dtypes=("float32",), min_rank=3, max_rank=4, where=lambda v: isinstance(v.shape[-1], int))
    if q is None:
        return None
    kv_shape = tuple(q.shape[:-2]) + (g.randint(1, 6), q.shape[-1])
    k = g.operand(kv_shape, "float32", exact=True)
    v = g.operand(kv_shape, "float32", exact=True) if k else None
    return ([q.name, k, v], {"causal": False}) if v else None


@op("attention", propose_attention, weight=0.3)
def attention(ctx, q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
