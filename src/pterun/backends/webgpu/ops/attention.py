"""Attention and the KV cache: llama's sdpa_with_kv_cache and update_cache, et_vk.sdpa, and
et_vk.select_as_symint (the start position an exporter reads from an input tensor).

Attention is three dispatches: the scores of every (query row, key) pair (shaders/attn_scores.wgsl, the
causal mask and grouped-query heads included), a softmax over each row (shaders/softmax.wgsl), and the
weighted sum of the values (shaders/attn_out.wgsl). Scores and probabilities live in the node's scratch
memory, sized for the longest context the keys can have.

sdpa_with_kv_cache first writes the new keys and values into the caches at the start position (the
caches are graph inputs the delegate also returns: it updates them in place), then attends over
positions [0, start + S) with query s seeing positions up to start + s, as ExecuTorch's custom op does.
"""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import contiguous_strides, grid, norm_dim, require_f32, row_dispatches
from pterun.backends.webgpu.ops.shape import copy
from pterun.backends.webgpu.slots import TSlot
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument

SCORES_PER_CHUNK = 1 << 24  # scores of one chunk of rows: 64 MiB, half the binding every device offers


def _attend(b: NodeBuilder, q: TSlot, k: TSlot, v: TSlot, y: TSlot, layout, *, scale, mask=None,
            causal_start=None, rows_bound: int, ctx_bound: int) -> None:
    """The attention dispatches, chunk by chunk of rows. ``layout()`` -> (B, S, H, group, ctx, D, q strides,
    k strides, v strides, out strides, mask strides), strides of (b, h, s or j)."""
    chunk = max(1, min(rows_bound, SCORES_PER_CHUNK // max(1, ctx_bound)))
    scores = b.scratch(max(1, chunk * ctx_bound))
    probs = b.scratch(max(1, chunk * ctx_bound))  # a dispatch cannot write the buffer it reads

    def scale_for(d: int) -> float:
        return float(scale) if scale is not None else 1.0 / math.sqrt(d)

    def add_chunk(first: int) -> None:
        def rows():
            bs, s, h, _, ctx, *_ = layout()
            return max(0, min(chunk, bs * h * s - first)), ctx

        def scores_params():
            bs, s, h, group, ctx, d, qs, ks, _, _, ms = layout()
            start = causal_start() if causal_start is not None else 0
            return [rows()[0] * ctx, ctx, d, s, h, group, start, int(causal_start is not None), scale_for(d),
                    int(mask is not None), *qs, *ks, *ms, first]

        def out_params():
            bs, s, h, group, ctx, d, _, _, vs, os_, _ = layout()
            return [rows()[0] * d, ctx, d, s, h, group, *vs, *os_, first]

        b.dispatch("attn_scores", {}, [q, k, mask if mask is not None else q, scores], scores_params,
                   lambda: grid(math.prod(rows())))
        row_dispatches(b, "softmax", {"LOG": "false"}, [scores, probs], lambda: [*rows(), 1], rows)
        b.dispatch("attn_out", {}, [probs, v, y], out_params, lambda: grid(rows()[0] * layout()[5]))

    for first in range(0, rows_bound, chunk):
        add_chunk(first)


def _heads(q_heads: int, kv_heads: int, what: str) -> int:
    if kv_heads <= 0 or q_heads % kv_heads:
        raise InvalidArgument(f"{what}: {q_heads} query heads cannot share {kv_heads} key/value heads")
    return q_heads // kv_heads


def build_sdpa_with_kv_cache(b: NodeBuilder, op) -> None:
    args = op.args
    q, k, v, k_cache, v_cache = (b.tensor(a) for a in args[:5])
    require_f32(b, q, k, v, k_cache, v_cache)
    start = b.int(args[5])
    if b.value(args[7]) is not None:
        raise DelegateInvalidCompatibility(f"{op.name}: an attention mask is not supported")
    if not bool(b.scalar(args[9], True)):
        raise DelegateInvalidCompatibility(f"{op.name}: only causal attention is supported")
    scale = b.scalar(args[10]) if len(args) > 11 else None
    if any(t.ndim != 4 for t in (q, k, v, k_cache, v_cache)):
        raise DelegateInvalidCompatibility(f"{op.name}: needs [B, S, H, D] tensors")

    def checked():
        bs, s, hq, d = q.shape
        pos = start()
        cap, hkv = k_cache.shape[1], k_cache.shape[2]
        if tuple(k.shape) != (bs, s, hkv, d) or tuple(v.shape) != tuple(k.shape) or \
                tuple(v_cache.shape) != tuple(k_cache.shape) or k_cache.shape[0] != bs or k_cache.shape[3] != d:
            raise InvalidArgument(
                f"{op.name}: q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)} and caches "
                f"{list(k_cache.shape)}, {list(v_cache.shape)} do not fit"
            )
        if pos < 0 or pos + s > cap:
            raise InvalidArgument(f"{op.name}: positions [{pos}, {pos + s}) are outside the cache of {cap}")
        return bs, s, hq, hkv, d, pos, cap

    for new, cache in ((k, k_cache), (v, v_cache)):

        def plan(new=new, cache=cache):
            bs, s, _, hkv, d, pos, cap = checked()
            return new.shape, contiguous_strides(new.shape), 0, contiguous_strides(cache.shape), pos * hkv * d

        copy(b, new, cache, plan)
    y = b.out(args[-1], lambda: q.shape)

    def layout():
        bs, s, hq, hkv, d, pos, cap = checked()
        per_b_q, per_b_k = s * hq * d, cap * hkv * d
        qs = (per_b_q, d, hq * d)
        ks = (per_b_k, d, hkv * d)
        return bs, s, hq, _heads(hq, hkv, op.name), pos + s, d, qs, ks, ks, qs, (0, 0, 0)

    dims = b.graph.tensor(args[0]).dims
    cache_dims = b.graph.tensor(args[3]).dims
    _attend(b, q, k_cache, v_cache, y, layout, scale=scale, causal_start=start,
            rows_bound=math.prod(dims[:3]), ctx_bound=cache_dims[1])


def build_update_cache(b: NodeBuilder, op) -> None:
    args = op.args
    value, cache = b.tensor(args[0]), b.tensor(args[1])
    start = b.int(args[2])
    if value.elem != cache.elem or value.ndim != 4 or cache.ndim != 4:
        raise DelegateInvalidCompatibility(f"{op.name}: needs [B, S, H, D] tensors of one type")

    def plan():
        bs, s, h, d = value.shape
        pos = start()
        if cache.shape[0] != bs or tuple(cache.shape[2:]) != (h, d) or pos < 0 or pos + s > cache.shape[1]:
            raise InvalidArgument(
                f"{op.name}: {list(value.shape)} at position {pos} does not fit the cache {list(cache.shape)}"
            )
        return value.shape, contiguous_strides(value.shape), 0, contiguous_strides(cache.shape), pos * h * d

    copy(b, value, cache, plan)
    # The operator's own result is a placeholder ExecuTorch's kernel leaves as it is; here it is zeros.
    y = b.out(args[-1], lambda: tuple(b.graph.tensor(args[-1]).dims))
    b.dispatch("fill", {"TO": y.elem}, [y], lambda: [y.numel, 0.0 if y.elem == "f32" else 0, 0],
               lambda: grid(y.numel))


def build_et_vk_sdpa(b: NodeBuilder, op) -> None:
    args = op.args
    q, k, v = (b.tensor(a) for a in args[:3])
    require_f32(b, q, k, v)
    mask = b.tensor(args[3]) if len(args) > 4 and b.is_tensor(args[3]) else None
    scale = b.scalar(args[4]) if len(args) > 5 else None
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise DelegateInvalidCompatibility(f"{op.name}: q, k and v must be [..., S, D] of one rank")
    y = b.out(args[-1], lambda: (*q.shape[:-1], v.shape[-1]))

    def layout():
        *lead, s, d = q.shape
        *klead, length, kd = k.shape
        hq, hk = math.prod(lead), math.prod(klead)
        if kd != d or tuple(v.shape[:-1]) != tuple(k.shape[:-1]) or v.shape[-1] != d:
            raise InvalidArgument(f"{op.name}: q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}")
        ms = (0, 0, 0)
        if mask is not None:
            if tuple(mask.shape[-2:]) != (s, length) or math.prod(mask.shape[:-2]) not in (1, hq):
                raise InvalidArgument(f"{op.name}: mask {list(mask.shape)} for scores [{hq}, {s}, {length}]")
            ms = (0 if math.prod(mask.shape[:-2]) == 1 else s * length, length, 1)
        qs, ks = (0, s * d, d), (0, length * d, d)
        return 1, s, hq, _heads(hq, hk, op.name), length, d, qs, ks, ks, qs, ms

    qd, kd = b.graph.tensor(args[0]).dims, b.graph.tensor(args[1]).dims
    _attend(b, q, k, v, y, layout, scale=scale, mask=mask, rows_bound=math.prod(qd[:-1]), ctx_bound=kd[-2])


def build_select_as_symint(b: NodeBuilder, op) -> None:
    args = op.args
    rank = b.rank(args[0])
    dim, index = norm_dim(b.scalar(args[1]), rank), int(b.scalar(args[2]))
    host = b.host_value(args[0])

    def value():
        x = host()
        if x is None:
            return 0  # before the first call: every call recomputes it from the caller's tensor
        if not -x.shape[dim] <= index < x.shape[dim]:
            raise InvalidArgument(f"{op.name}: index {index} is out of range for size {x.shape[dim]}")
        return int(x.select(dim, index).reshape(-1)[0])

    b.sym_out(args[-1], value)


OPS = {
    "sdpa_with_kv_cache.default": build_sdpa_with_kv_cache,
    "llama.sdpa_with_kv_cache.default": build_sdpa_with_kv_cache,
    "update_cache.default": build_update_cache,
    "llama.update_cache.default": build_update_cache,
    "et_vk.sdpa.default": build_et_vk_sdpa,
    "et_vk.select_as_symint.default": build_select_as_symint,
}
