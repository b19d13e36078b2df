"""A layer's attention over a KV cache as ExecuTorch's Llama export writes it, as one call
(executor/load/fuse/cached_attention.py finds its steps).

The steps: the value rows viewed and written into their cache (``llama::update_cache``), the queries and the keys
viewed as pairs and rotated (``pterun::rotary``), the rotated keys viewed and written into theirs, the rotated
queries viewed and attended over both caches (``llama::custom_sdpa``). ``CachedAttention`` runs the same kernels
in the same order on the same bytes, so its results are the steps' bit for bit whatever the memory plan shares
between them (the rotated queries are written over the queries, the attention's result over the rotated keys).
In float32 on the CPU, where pterun's native kernels are built, that is one native call
(``native/cached_attention.c``) on arguments prepared for the tensors and view sizes of the call before; a decode
step passes the same ones every time, so a call checks them and passes three positions. Elsewhere, and where a
position does not fit the caches (the native call then writes nothing), the steps' own kernels one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pterun import native
from pterun.errors import PteError
from pterun.kernels.fused import NativeCall, RotaryInto, apart, rotary_arguments
from pterun.kernels.llm.attention import check_attention, custom_sdpa, native_arguments
from pterun.kernels.llm.cache import check_cache_shapes, update_cache
from pterun.kernels.python_kernels import F32


@dataclass(frozen=True)
class _Prepared:
    """What the native call was prepared for, and the call (None: the steps take these tensors)."""

    tensors: tuple  # values, queries, keys, key cache, value cache, rotated queries and keys, out: the same objects
    sizes: tuple  # the five view sizes, as lists
    shapes: tuple  # of values, queries, keys, the caches, rotated queries and keys, out
    tables: tuple  # cos and sin: data pointer, shape, strides, dtype
    options: tuple  # whether a mask is passed, is_causal, scale
    call: object | None


class CachedAttention(NativeCall):
    replayed = (7, 8, 9)  # v_pos, k_pos, start_pos: cached_attention_run's per call

    def __init__(self) -> None:
        self._q_rotary, self._k_rotary = RotaryInto(), RotaryInto()
        self._prepared: _Prepared | None = None

    def __call__(self, values, queries, keys, cos, sin, key_cache, value_cache, v_pos, k_pos, start_pos, v_sizes,
                 q_sizes, k_sizes, q_view_sizes, k_view_sizes, attn_mask, dropout_p, is_causal, scale, *, v_out,
                 k_out, q_rot, k_rot, out):
        self._ran_natively = False
        kernels = native.kernels
        if kernels is not None:
            p = self._prepared
            if (p is None or (attn_mask is None, is_causal, scale) != p.options
                    or not _same(p, values, queries, keys, cos, sin, key_cache, value_cache, q_rot, k_rot, out, v_sizes,
                                 q_sizes, k_sizes, q_view_sizes, k_view_sizes)):
                p = self._prepared = _prepare(values, queries, keys, cos, sin, key_cache, value_cache, v_sizes,
                                              q_sizes, k_sizes, q_view_sizes, k_view_sizes, attn_mask, is_causal,
                                              scale, q_rot, k_rot, out)
            if p.call is not None and kernels.cached_attention_run(p.call, v_pos, k_pos, start_pos,
                                                                   torch.get_num_threads()):
                self._ran_natively = True
                return out
        update_cache(values.view(v_sizes), value_cache, v_pos, v_out)
        self._q_rotary(queries.view(q_sizes), cos, sin, out=q_rot)
        self._k_rotary(keys.view(k_sizes), cos, sin, out=k_rot)
        update_cache(k_rot.view(k_view_sizes), key_cache, k_pos, k_out)
        return custom_sdpa(q_rot.view(q_view_sizes), key_cache, value_cache, start_pos, attn_mask, dropout_p,
                           is_causal, scale, out)


def _same(p: _Prepared, values, queries, keys, cos, sin, key_cache, value_cache, q_rot, k_rot, out, *sizes) -> bool:
    """Whether a call passes what ``p`` was prepared for: the same tensors at the same shapes (planned tensors keep
    their bytes; contiguous ones are laid out by their shape), tables at the same bytes and strides, the same view
    sizes."""
    t = p.tensors
    return (values is t[0] and queries is t[1] and keys is t[2] and key_cache is t[3] and value_cache is t[4]
            and q_rot is t[5] and k_rot is t[6] and out is t[7] and sizes == p.sizes
            and (values.shape, queries.shape, keys.shape, key_cache.shape, value_cache.shape, q_rot.shape, k_rot.shape,
                 out.shape) == p.shapes
            and values.is_contiguous() and queries.is_contiguous() and keys.is_contiguous()
            and key_cache.is_contiguous() and value_cache.is_contiguous() and q_rot.is_contiguous()
            and k_rot.is_contiguous() and out.is_contiguous()
            and (cos.data_ptr(), cos.shape, cos.stride(), cos.dtype, sin.data_ptr(), sin.shape, sin.stride(),
                 sin.dtype) == p.tables)


def _prepare(values, queries, keys, cos, sin, key_cache, value_cache, v_sizes, q_sizes, k_sizes, q_view_sizes,
             k_view_sizes, attn_mask, is_causal, scale, q_rot, k_rot, out) -> _Prepared:
    sizes = tuple(list(s) for s in (v_sizes, q_sizes, k_sizes, q_view_sizes, k_view_sizes))
    tensors = (values, queries, keys, key_cache, value_cache, q_rot, k_rot, out)
    call = None
    if all(t.is_contiguous() for t in (values, queries, keys)):
        try:
            call = _native_call(values, queries, keys, cos, sin, key_cache, value_cache, sizes, attn_mask, is_causal,
                                scale, q_rot, k_rot, out)
        except (PteError, RuntimeError):  # the steps say what is wrong, one by one
            call = None
    shapes = (values.shape, queries.shape, keys.shape, key_cache.shape, value_cache.shape, q_rot.shape, k_rot.shape,
              out.shape)
    tables = (cos.data_ptr(), cos.shape, cos.stride(), cos.dtype, sin.data_ptr(), sin.shape, sin.stride(), sin.dtype)
    return _Prepared(tensors, sizes, shapes, tables, (attn_mask is None, is_causal, scale), call)


def _native_call(values, queries, keys, cos, sin, key_cache, value_cache, sizes, attn_mask, is_causal, scale, q_rot,
                 k_rot, out) -> object | None:
    """The native call for these tensors, or None where the steps' own native paths would not all take them. Out
    tensors are sized as the steps size them."""
    if attn_mask is not None or not all(t.dtype is F32 and t.is_cpu for t in (key_cache, value_cache, cos, sin)):
        return None
    v_sizes, q_sizes, k_sizes, q_view_sizes, k_view_sizes = sizes
    v, q, k = values.view(v_sizes), queries.view(q_sizes), keys.view(k_sizes)
    if q_rot.shape != q.shape:
        q_rot.resize_(q.shape)
    if k_rot.shape != k.shape:
        k_rot.resize_(k.shape)
    q_view, k_view = q_rot.view(q_view_sizes), k_rot.view(k_view_sizes)
    v_write = _cache_write(v, value_cache)
    k_write = _cache_write(k_view, key_cache)
    q_rotary, k_rotary = rotary_arguments(q, cos, sin, q_rot), rotary_arguments(k, cos, sin, k_rot)
    if v_write is None or k_write is None or q_rotary is None or k_rotary is None:
        return None
    check_attention(q_view, key_cache, value_cache, None, is_causal, "custom_sdpa")
    if q_view.dtype is not F32:
        return None
    if out.shape != q_view.shape:
        out.resize_(q_view.shape)
    cache_len = min(key_cache.shape[1], value_cache.shape[1])
    attention = native_arguments(q_view, key_cache, value_cache, 0, None, is_causal, scale, out, cache_len, False)
    if attention is None:
        return None
    return native.kernels.cached_attention_make(  # type: ignore[union-attr]
        *v_write, *k_write, *q_rotary, *k_rotary, *attention[:-1], cache_len, attention[-1])


def _cache_write(value: torch.Tensor, cache: torch.Tensor) -> tuple | None:
    """update_cache's copy as the native call's arguments (src, cache, batch, seq, row, src_stride, cache_stride,
    cache_len), or None: float32 rows contiguous in both, bytes apart."""
    check_cache_shapes(value, cache, "update_cache")
    if not (value.dtype is F32 and cache.dtype is F32 and value.is_contiguous() and cache.is_contiguous()
            and apart(value, cache)):
        return None
    batch, seq, heads, head_dim = value.shape
    row = heads * head_dim
    return (value.data_ptr(), cache.data_ptr(), batch, seq, row, seq * row, cache.shape[1] * row, cache.shape[1])
