"""llama::custom_sdpa, sdpa_with_kv_cache, custom_quantized_sdpa: attention over a KV cache.

In float32 on the CPU, attention runs ExecuTorch's own loop in native code (pterun/native/sdpa.c, where the
extension is built): its products through the BLAS routine ExecuTorch calls (PyTorch's ``sgemm_``), its softmax
step for step, so its bits. ExecuTorch's last bits beyond about a hundred keys also depend on where its heap puts
its scratch buffer (sdpa.c says how); measured over decode steps of 768 outputs, pterun's agree with ExecuTorch's
in every output up to a hundred keys and in most beyond (tests/kernels/test_llm_kernels.py).

Elsewhere (half and bfloat16, int8 queries, a position kept in a tensor, GPUs, or without the extension) the
loop is repeated in torch operations: key blocks of 512, an online softmax in float32, and for half/bfloat16
inputs the unnormalized probabilities rounded to the input type before they multiply the values. What remains
different there is float32 summation order inside the matmuls, which can tip a reduced-precision probability
to its neighbouring value now and then, and leaves float32 outputs a few units in the last place apart.
"""

from __future__ import annotations

import math

import torch

from pterun import native
from pterun.errors import InvalidArgument
from pterun.kernels.llm.cache import check_cache_shapes, write_span
from pterun.kernels.python_kernels import F32, KernelTable, f32, resize

KERNELS = KernelTable()

_KV_BLOCK = 512
_ATTENTION_TYPES = (torch.float32, torch.float16, torch.bfloat16)


def _matmul(a: torch.Tensor, b: torch.Tensor, exact: bool) -> torch.Tensor:
    # Half results hinge on float32 scores rounding as ExecuTorch's half matmul rounds them; exact
    # products summed in double land closer to its summation order than a float32 matmul does.
    if exact:
        return (a.double() @ b.double()).to(F32)
    return a @ b


def _query_block(q_len: int) -> int:
    # ExecuTorch picks its query tile by sequence length.
    return 32 if q_len < 192 else 64 if q_len < 768 else 256


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos: int | torch.Tensor, attn_mask,
               is_causal: bool, scale, num_keys: int, value_dtype: torch.dtype) -> torch.Tensor:
    """Flash attention over float32 q [B, H, S, D] and k, v [B, Hkv, N, D]; float32 [B, H, S, D] out.

    ``value_dtype`` is the activation type: for half and bfloat16 the probabilities are rounded to it
    before they weight the values, as ExecuTorch's reduced-precision matmul consumes them, except
    that for bfloat16 a query tile of a single row keeps them in float32 (ExecuTorch's matrix-vector
    path for that case reads the float probabilities).

    ``start_pos`` is an int, or a 0-d tensor on the device (``num_keys`` is then the whole cache): keys past
    the last query's position are hidden by the mask instead of left out, which adds only exact zeros.
    """
    heads, q_len, head_dim = q.shape[1:]
    kv_heads = k.shape[1]
    if kv_heads > heads or heads % kv_heads:
        raise InvalidArgument(f"attention: {heads} query heads cannot share {kv_heads} key/value heads")
    reps = heads // kv_heads
    if reps > 1:  # the keys attended to only: a decode step reads a few of the cache's positions
        k = k[:, :, :num_keys].repeat_interleave(reps, dim=1)
        v = v[:, :, :num_keys].repeat_interleave(reps, dim=1)
    softmax_scale = f32(scale if scale is not None else 1.0 / math.sqrt(head_dim))
    keep_last_row = value_dtype == torch.bfloat16 and q_len % _query_block(q_len) == 1

    steps = _one_block if num_keys <= _KV_BLOCK else _blocks
    return steps(q, k, v, start_pos, attn_mask, is_causal, softmax_scale, num_keys, value_dtype, keep_last_row)


def _blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos: int | torch.Tensor, attn_mask,
            is_causal: bool, softmax_scale: float, num_keys: int, value_dtype: torch.dtype,
            keep_last_row: bool) -> torch.Tensor:
    """ExecuTorch's loop over key blocks of 512, an online softmax carried from one to the next."""
    batch, heads, q_len = q.shape[:3]
    reduced = value_dtype in (torch.float16, torch.bfloat16)
    exact = value_dtype == torch.float16
    run_max = torch.full((batch, heads, q_len), -math.inf, dtype=F32, device=q.device)
    run_sum = torch.zeros_like(run_max)
    dst = torch.zeros((batch, heads, q_len, v.shape[-1]), dtype=F32, device=q.device)
    positions = torch.arange(q_len, device=q.device).unsqueeze(1) + start_pos
    # Without a causal mask, a position in a tensor still bounds the keys every query attends to.
    bounded = isinstance(start_pos, torch.Tensor) and not is_causal and attn_mask is None
    visible = positions if is_causal else positions[-1:] if bounded else None
    for n0 in range(0, num_keys, _KV_BLOCK):
        n1 = min(n0 + _KV_BLOCK, num_keys)
        qk = _matmul(q, k[:, :, n0:n1].transpose(-1, -2), exact)
        if visible is not None:
            keys = torch.arange(n0, n1, device=q.device).unsqueeze(0)
            qk = qk.masked_fill(keys > visible, -math.inf)
        if attn_mask is not None:
            qk = qk * softmax_scale + attn_mask[:, n0:n1]
        else:
            qk = qk * softmax_scale
        new_max = torch.maximum(run_max, qk.amax(-1))
        dead = new_max == -math.inf  # nothing attended yet: the block contributes zeros
        p = torch.exp(qk - new_max.unsqueeze(-1)).masked_fill_(dead.unsqueeze(-1), 0.0)
        correction = torch.exp(run_max - new_max)
        run_sum = torch.where(dead, run_sum, p.sum(-1) + correction * run_sum)
        if n0 > 0:
            dst = torch.where(dead.unsqueeze(-1), dst, dst * correction.unsqueeze(-1))
        run_max = torch.where(dead, run_max, new_max)
        if reduced:
            rounded = p.to(value_dtype).to(F32)
            if keep_last_row:
                rounded[..., -1, :] = p[..., -1, :]
            p = rounded
        dst = dst + _matmul(p, v[:, :, n0:n1], exact)
    return dst * (1.0 / run_sum).unsqueeze(-1)


def _one_block(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos: int | torch.Tensor, attn_mask,
               is_causal: bool, softmax_scale: float, num_keys: int, value_dtype: torch.dtype,
               keep_last_row: bool) -> torch.Tensor:
    """``_blocks`` where every key falls in its first block (every decode step of a cache of up to 512
    positions), in a third of its torch calls and with its results: from a running maximum of -inf and
    sums of zero the loop's first step leaves the block's own maximum, sums and products (adding 0
    changes no value but -0.0, which compares equal)."""
    reduced = value_dtype in (torch.float16, torch.bfloat16)
    exact = value_dtype == torch.float16
    qk = _matmul(q, k[:, :, :num_keys].transpose(-1, -2), exact)
    q_len = q.shape[2]
    # A decode step's one query at start_pos sees every key up to it: a causal mask hides nothing.
    hides_nothing = isinstance(start_pos, int) and q_len == 1 and num_keys <= start_pos + 1
    if is_causal and not hides_nothing:
        positions = torch.arange(q_len, device=q.device).unsqueeze(1) + start_pos
        qk.masked_fill_(torch.arange(num_keys, device=q.device).unsqueeze(0) > positions, -math.inf)
    elif not is_causal and attn_mask is None and isinstance(start_pos, torch.Tensor):
        # Without a causal mask, a position in a tensor still bounds the keys every query attends to.
        last = start_pos + (q_len - 1)
        qk.masked_fill_(torch.arange(num_keys, device=q.device) > last, -math.inf)
    if attn_mask is not None:
        qk = qk * softmax_scale + attn_mask[:, :num_keys]
    else:
        qk.mul_(softmax_scale)
    top = qk.amax(-1, keepdim=True)
    dead = top == -math.inf  # nothing attended: the row's weights are zeros
    p = qk.sub_(top).exp_().masked_fill_(dead, 0.0)
    total = p.sum(-1, keepdim=True)
    if reduced:
        rounded = p.to(value_dtype).to(F32)
        if keep_last_row:
            rounded[..., -1, :] = p[..., -1, :]
        p = rounded
    return _matmul(p, v[:, :, :num_keys], exact).mul_(total.reciprocal_())


def check_attention(q, k, v, attn_mask, is_causal, what):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise InvalidArgument(f"{what}: query, key and value must be 4-d")
    if q.shape[3] != v.shape[3] or k.shape[3] != v.shape[3]:
        raise InvalidArgument(f"{what}: query, key and value must have one head size")
    # ExecuTorch reads the caches by the query's batch and the value cache's length without checking either.
    if k.shape != v.shape or k.shape[0] < q.shape[0]:
        raise InvalidArgument(f"{what}: key {list(k.shape)} and value {list(v.shape)} caches must have one shape "
                              f"and the query's batch of {q.shape[0]}")
    if attn_mask is not None:
        if is_causal:
            raise InvalidArgument(f"{what}: attn_mask and is_causal cannot both be set")
        if attn_mask.dim() != 2 or attn_mask.dtype != F32:
            raise InvalidArgument(f"{what}: attn_mask must be a 2-d float tensor")


_INT = 2**31  # BLAS takes sizes and strides as 32-bit ints
OPERATORS = ("llama::custom_sdpa", "llama::sdpa_with_kv_cache", "llama::custom_quantized_sdpa")


def route() -> str:
    """How float32 attention over a KV cache runs on the CPU in this process, in a sentence."""
    if native.kernels is None:
        return f"ExecuTorch's loop in PyTorch operations ({native.missing})"
    products = ("PyTorch's sgemm_, as ExecuTorch's" if native.kernels.sdpa_blas()
                else "loops of its own (PyTorch's library has no sgemm_)")
    return f"ExecuTorch's loop in pterun's native code, its products in {products}"


def _native_into(q, k, v, start_pos, attn_mask, is_causal, scale, out, num_keys: int, seq_dim_2: bool) -> bool:
    """ExecuTorch's float32 loop in native code (pterun/native/sdpa.c), into ``out`` (resized to q's shape); False
    where it does not take the call (``native_arguments``). Called on every decode step: plain comparisons only."""
    arguments = native_arguments(q, k, v, start_pos, attn_mask, is_causal, scale, out, num_keys, seq_dim_2)
    if arguments is None:
        return False
    native.kernels.sdpa(*arguments, torch.get_num_threads())  # type: ignore[union-attr]
    return True


def native_arguments(q, k, v, start_pos, attn_mask, is_causal, scale, out, num_keys: int,
                     seq_dim_2: bool) -> tuple | None:
    """The native loop's arguments but its threads, or None where it does not take the call: the extension is not
    built, a type other than float32, a device other than the CPU, a position in a tensor, a head's row of values
    not contiguous, sizes past BLAS's ints. The C side trusts what it is given, so every size it reads by is
    checked here against the tensors."""
    kernels = native.kernels
    if kernels is None or type(start_pos) is not int or not 0 < num_keys < _INT:
        return None
    if not (q.dtype is F32 and k.dtype is F32 and v.dtype is F32 and out.dtype is F32
            and q.is_cpu and k.is_cpu and v.is_cpu and out.is_cpu):
        return None
    qs, ks, vs, os = q.stride(), k.stride(), v.stride(), out.stride()
    if qs[3] != 1 or ks[3] != 1 or vs[3] != 1 or os[3] != 1 or max(qs + ks + vs + os) >= _INT:
        return None
    mask, mask_stride = 0, 0
    if attn_mask is not None:
        if attn_mask.dtype is not F32 or not attn_mask.is_cpu or attn_mask.stride(1) != 1:
            return None
        mask, mask_stride = attn_mask.data_ptr(), attn_mask.stride(0)
    batch, first, second, head_dim = q.shape
    k_batch, k_first, k_second, _ = k.shape
    v_batch, v_first, v_second, _ = v.shape
    if seq_dim_2:  # [batch, heads, sequence, head_dim]
        heads, q_len, kv_heads, k_len, v_heads, v_len = first, second, k_first, k_second, v_first, v_second
        qs, ks, vs, os = qs[:3], ks[:3], vs[:3], os[:3]
    else:  # [batch, sequence, heads, head_dim]
        q_len, heads, k_len, kv_heads, v_len, v_heads = first, second, k_first, k_second, v_first, v_second
        qs, ks, vs, os = (qs[0], qs[2], qs[1]), (ks[0], ks[2], ks[1]), (vs[0], vs[2], vs[1]), (os[0], os[2], os[1])
    if (kv_heads == 0 or heads % kv_heads or v_heads != kv_heads or k_batch < batch or v_batch < batch
            or k_len < num_keys or v_len < num_keys or q_len >= _INT):
        return None
    return (q.data_ptr(), k.data_ptr(), v.data_ptr(), mask, out.data_ptr(), batch, heads, kv_heads, q_len, num_keys,
            head_dim, *qs, *ks, *vs, *os, mask_stride, start_pos, int(is_causal),
            scale if scale is not None else 1.0 / math.sqrt(head_dim))


def _sdpa_into(q, k, v, start_pos, attn_mask, is_causal, scale, out, what, seq_dim_2=False,
               dequantized=None) -> torch.Tensor:
    """custom_sdpa: q [B, S, H, D], k/v caches [B, N, Hkv, D] (or [B, H, S, D] layouts when seq_dim_2)."""
    check_attention(q, k, v, attn_mask, is_causal, what)
    seq_axis = 2 if seq_dim_2 else 1
    q_len = q.shape[seq_axis]
    kv_len = v.shape[seq_axis]
    # ExecuTorch counts the query's tokens along dim 1 unless the query is int8.
    counted = q_len if dequantized is not None else q.shape[1]
    if isinstance(start_pos, torch.Tensor):
        # A position kept on the device (positions.py): attend over the whole cache, the mask hiding the rest.
        if start_pos.device.type == "cpu" and attn_mask is None and int(start_pos) + counted > kv_len:
            raise InvalidArgument(f"{what}: start_pos {int(start_pos)} + {counted} tokens exceeds the {kv_len} "
                                  f"cached")
        num_keys = kv_len
    else:
        num_keys = kv_len if attn_mask is not None else start_pos + counted
        if num_keys > kv_len:
            raise InvalidArgument(f"{what}: start_pos {start_pos} + {counted} tokens exceeds the {kv_len} cached")
    if attn_mask is not None and tuple(attn_mask.shape) != (q_len, kv_len):
        raise InvalidArgument(f"{what}: attn_mask is {tuple(attn_mask.shape)}, expected {(q_len, kv_len)}")
    resize(out, q.shape)
    if dequantized is None and _native_into(q, k, v, start_pos, attn_mask, is_causal, scale, out, num_keys,
                                            seq_dim_2):
        return out
    return _torch_into(q, k, v, start_pos, attn_mask, is_causal, scale, out, num_keys, seq_dim_2, dequantized)


def _torch_into(q, k, v, start_pos, attn_mask, is_causal, scale, out, num_keys: int, seq_dim_2: bool,
                dequantized=None) -> torch.Tensor:
    """The loop in torch operations, into ``out`` (of q's shape): every type and device."""
    if dequantized is not None:
        qf, kf, vf = dequantized
    else:
        qf, kf, vf = q.to(F32), k.to(F32), v.to(F32)
    if not seq_dim_2:
        qf, kf, vf = qf.transpose(1, 2), kf.transpose(1, 2), vf.transpose(1, 2)
    result = _attention(qf, kf, vf, start_pos, attn_mask, is_causal, scale, num_keys,
                        q.dtype if dequantized is None else F32)
    if not seq_dim_2:
        result = result.transpose(1, 2)
    out.copy_(result)
    return out


@KERNELS.kernel(
    "llama::custom_sdpa.out(Tensor query, Tensor key, Tensor value, SymInt start_pos, "
    "Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None, *, "
    "Tensor(a!) out) -> Tensor(a!)")
def custom_sdpa(query, key, value, start_pos, attn_mask, dropout_p, is_causal, scale, out):
    what = "custom_sdpa"
    if query.dtype not in _ATTENTION_TYPES or key.dtype != query.dtype or value.dtype != query.dtype:
        raise InvalidArgument(f"{what}: query, key and value must share a float, half or bfloat16 type")
    return _sdpa_into(query, key, value, start_pos, attn_mask, is_causal, scale, out, what)


@KERNELS.kernel(
    "llama::sdpa_with_kv_cache.out(Tensor query, Tensor key, Tensor value, Tensor(a!) key_cache, "
    "Tensor(b!) value_cache, SymInt start_pos, SymInt seq_len, Tensor? attn_mask=None, "
    "float drpout_p=0., bool is_causal=False, float? scale=None, *, Tensor(c!) out) -> Tensor(c!)")
def sdpa_with_kv_cache(query, key, value, key_cache, value_cache, start_pos, seq_len, attn_mask, dropout_p,
                       is_causal, scale, out):
    what = "sdpa_with_kv_cache"
    if key_cache.dim() != 4 or value_cache.dim() != 4:
        raise InvalidArgument(f"{what}: caches must be 4-d")
    for cache in (key_cache, value_cache):
        if not start_pos < cache.shape[1] or start_pos + seq_len > cache.shape[1]:
            raise InvalidArgument(
                f"{what}: positions [{start_pos}, {start_pos + seq_len}) do not fit a cache of "
                f"{cache.shape[1]}"
            )
    if query.dim() != 4:
        raise InvalidArgument(f"{what}: query must be 4-d")
    check_cache_shapes(key, key_cache, what)
    check_cache_shapes(value, value_cache, what)
    write_span(key, key_cache, start_pos, what)
    write_span(value, value_cache, start_pos, what)
    return custom_sdpa(query, key_cache, value_cache, start_pos, attn_mask, dropout_p, is_causal, scale, out)


def _dequantize_rows(t: torch.Tensor, zero_points: torch.Tensor, scales: torch.Tensor, what: str):
    if t.dtype != torch.int8 or zero_points.dtype != torch.int8 or scales.dtype != F32:
        raise InvalidArgument(f"{what}: tensors must be int8 with int8 zero points and float scales")
    if zero_points.dim() != t.dim() or scales.dim() != t.dim() or \
            zero_points.shape[:-1] != t.shape[:-1] or scales.shape[:-1] != t.shape[:-1]:
        raise InvalidArgument(f"{what}: quantization parameters must match the tensor but in the last dim")
    return (t.to(torch.int32) - zero_points[..., :1].to(torch.int32)).to(F32) * scales[..., :1]


@KERNELS.kernel(
    "llama::custom_quantized_sdpa.out(Tensor query, Tensor key, Tensor value, SymInt start_pos, "
    "Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None, "
    "Tensor? q_zero_points=None, Tensor? q_scales=None, Tensor? k_zero_points=None, Tensor? k_scales=None, "
    "Tensor? v_zero_points=None, Tensor? v_scales=None, bool is_seq_at_dim_2=False, *, "
    "Tensor(a!) out) -> Tensor(a!)")
def custom_quantized_sdpa(query, key, value, start_pos, attn_mask, dropout_p, is_causal, scale, q_zero_points,
                          q_scales, k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2, out):
    what = "custom_quantized_sdpa"
    if query.dtype != torch.int8:
        if query.dtype not in _ATTENTION_TYPES or key.dtype != query.dtype or value.dtype != query.dtype:
            raise InvalidArgument(f"{what}: query, key and value must share one type")
        return _sdpa_into(query, key, value, start_pos, attn_mask, is_causal, scale, out, what,
                          seq_dim_2=bool(is_seq_at_dim_2))
    params = (q_zero_points, q_scales, k_zero_points, k_scales, v_zero_points, v_scales)
    if any(p is None for p in params):
        raise InvalidArgument(f"{what}: an int8 query needs zero points and scales for q, k and v")
    dequantized = (
        _dequantize_rows(query, q_zero_points, q_scales, f"{what} query"),
        _dequantize_rows(key, k_zero_points, k_scales, f"{what} key"),
        _dequantize_rows(value, v_zero_points, v_scales, f"{what} value"),
    )
    return _sdpa_into(query, key, value, start_pos, attn_mask, is_causal, scale, out, what,
                      seq_dim_2=bool(is_seq_at_dim_2), dequantized=dequantized)
