"""LLM custom operators (``llama::*``, ``preprocess::tile_crop``), in plain torch.

ExecuTorch's LLM export replaces attention and the KV cache with these
operators. Their layouts and conventions are ExecuTorch's, not ATen's:

* attention tensors are ``[batch, seq, heads, head_dim]`` (sequence before
  heads), and a cache is ``[batch, max_seq, heads, head_dim]``;
* ``start_pos`` is the position of the query's first token: the query attends
  to the first ``start_pos + seq_len`` cache entries, causally when asked,
  and an explicit mask (2-d, float, ``[seq_len, max_seq]``) replaces both;
* grouped-query attention maps query head ``h`` to key/value head
  ``h // (heads / kv_heads)``.

Attention follows ExecuTorch's flash-attention loop: key blocks of 512, an
online softmax in float32, and for half/bfloat16 inputs the unnormalized
probabilities rounded to the input type before they multiply the values. What
remains different is float32 summation order inside the matmuls, which can
tip a reduced-precision probability to its neighbouring value now and then.

Cache updates write the cache in place; their ``out`` is a placeholder the
program never reads, left untouched as ExecuTorch leaves it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from pterun.errors import InvalidArgument
from pterun.kernels.registry import KernelRegistry
from pterun.kernels.schema import python_kernel

_F32 = torch.float32
_KV_BLOCK = 512
_ATTENTION_TYPES = (torch.float32, torch.float16, torch.bfloat16)


def _f32(value: float) -> float:
    return torch.tensor(value, dtype=_F32).item()


def _resize(out: torch.Tensor, shape) -> None:
    shape = tuple(shape)
    if tuple(out.shape) != shape:
        out.resize_(shape)


# -- cache updates -------------------------------------------------------------


def _check_cache_shapes(value: torch.Tensor, cache: torch.Tensor, what: str) -> None:
    if value.dim() != 4 or cache.dim() != 4:
        raise InvalidArgument(f"{what}: value and cache must be 4-d")
    if value.shape[0] != cache.shape[0] or value.shape[2:] != cache.shape[2:]:
        raise InvalidArgument(
            f"{what}: value {tuple(value.shape)} does not fit cache {tuple(cache.shape)} "
            "(batch, heads and head_dim must match)"
        )
    if value.element_size() != cache.element_size():
        raise InvalidArgument(f"{what}: value is {value.dtype} but cache is {cache.dtype}")


def _write_span(value: torch.Tensor, cache: torch.Tensor, start_pos: int, what: str) -> None:
    seq_len = value.shape[1]
    if not 0 <= start_pos < cache.shape[1] or start_pos + seq_len > cache.shape[1]:
        raise InvalidArgument(
            f"{what}: positions [{start_pos}, {start_pos + seq_len}) do not fit a cache of {cache.shape[1]}"
        )
    # ExecuTorch copies raw bytes, so a value of another type of the same width lands bit for bit.
    source = value if value.dtype == cache.dtype else value.view(cache.dtype)
    cache[:, start_pos:start_pos + seq_len].copy_(source)


def update_cache(value, cache, start_pos, out):
    what = "update_cache"
    _check_cache_shapes(value, cache, what)
    _write_span(value, cache, start_pos, what)
    return out


def update_cache_with_indices(value, cache, start_pos, indices, out):
    what = "update_cache_with_indices"
    _check_cache_shapes(value, cache, what)
    if indices.dim() != 2 or tuple(indices.shape) != tuple(value.shape[:2]):
        raise InvalidArgument(f"{what}: indices must be [batch, seq_len] = {tuple(value.shape[:2])}")
    if indices.dtype != torch.int64:
        raise InvalidArgument(f"{what}: indices must be int64, not {indices.dtype}")
    if indices.numel() == 0:
        return out
    lo, hi = int(indices.min()), int(indices.max())
    if lo < 0 or hi >= cache.shape[1]:
        raise InvalidArgument(f"{what}: index {lo if lo < 0 else hi} is outside a cache of {cache.shape[1]}")
    source = value if value.dtype == cache.dtype else value.view(cache.dtype)
    batch = indices.shape[0]
    rows = torch.arange(batch, device=indices.device).unsqueeze(1).expand_as(indices)
    unique = all(indices[b].unique().numel() == indices.shape[1] for b in range(batch))
    if unique:
        cache[rows, indices] = source
    else:
        # Tokens are written in order, so a repeated position keeps the last one.
        for b in range(batch):
            for s, pos in enumerate(indices[b].tolist()):
                cache[b, pos].copy_(source[b, s])
    return out


# -- attention -----------------------------------------------------------------


def _matmul(a: torch.Tensor, b: torch.Tensor, exact: bool) -> torch.Tensor:
    # Half results hinge on float32 scores rounding as ExecuTorch's half matmul rounds them; exact
    # products summed in double land closer to its summation order than a float32 matmul does.
    if exact:
        return (a.double() @ b.double()).to(_F32)
    return a @ b


def _query_block(q_len: int) -> int:
    # ExecuTorch picks its query tile by sequence length.
    return 32 if q_len < 192 else 64 if q_len < 768 else 256


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos: int, attn_mask, is_causal: bool,
               scale, num_keys: int, value_dtype: torch.dtype) -> torch.Tensor:
    """Flash attention over float32 q [B, H, S, D] and k, v [B, Hkv, N, D]; float32 [B, H, S, D] out.

    ``value_dtype`` is the activation type: for half and bfloat16 the probabilities are rounded to it
    before they weight the values, as ExecuTorch's reduced-precision matmul consumes them, except
    that for bfloat16 a query tile of a single row keeps them in float32 (ExecuTorch's matrix-vector
    path for that case reads the float probabilities).
    """
    batch, heads, q_len, head_dim = q.shape
    kv_heads = k.shape[1]
    if kv_heads > heads or heads % kv_heads:
        raise InvalidArgument(f"attention: {heads} query heads cannot share {kv_heads} key/value heads")
    reps = heads // kv_heads
    if reps > 1:
        k = k.repeat_interleave(reps, dim=1)
        v = v.repeat_interleave(reps, dim=1)
    softmax_scale = _f32(scale if scale is not None else 1.0 / math.sqrt(head_dim))
    reduced = value_dtype in (torch.float16, torch.bfloat16)
    exact = value_dtype == torch.float16
    keep_last_row = value_dtype == torch.bfloat16 and q_len % _query_block(q_len) == 1

    run_max = torch.full((batch, heads, q_len), -math.inf, dtype=_F32, device=q.device)
    run_sum = torch.zeros_like(run_max)
    dst = torch.zeros((batch, heads, q_len, v.shape[-1]), dtype=_F32, device=q.device)
    positions = torch.arange(q_len, device=q.device).unsqueeze(1) + start_pos
    for n0 in range(0, num_keys, _KV_BLOCK):
        n1 = min(n0 + _KV_BLOCK, num_keys)
        qk = _matmul(q, k[:, :, n0:n1].transpose(-1, -2), exact)
        if is_causal:
            keys = torch.arange(n0, n1, device=q.device).unsqueeze(0)
            qk = qk.masked_fill(keys > positions, -math.inf)
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
            rounded = p.to(value_dtype).to(_F32)
            if keep_last_row:
                rounded[..., -1, :] = p[..., -1, :]
            p = rounded
        dst = dst + _matmul(p, v[:, :, n0:n1], exact)
    return dst * (1.0 / run_sum).unsqueeze(-1)


def _check_attention(q, k, v, attn_mask, is_causal, what):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise InvalidArgument(f"{what}: query, key and value must be 4-d")
    if q.shape[3] != v.shape[3] or k.shape[3] != v.shape[3]:
        raise InvalidArgument(f"{what}: query, key and value must have one head size")
    if attn_mask is not None:
        if is_causal:
            raise InvalidArgument(f"{what}: attn_mask and is_causal cannot both be set")
        if attn_mask.dim() != 2 or attn_mask.dtype != _F32:
            raise InvalidArgument(f"{what}: attn_mask must be a 2-d float tensor")


def _sdpa_into(q, k, v, start_pos, attn_mask, is_causal, scale, out, what, seq_dim_2=False,
               dequantized=None) -> torch.Tensor:
    """custom_sdpa: q [B, S, H, D], k/v caches [B, N, Hkv, D] (or [B, H, S, D] layouts when seq_dim_2)."""
    _check_attention(q, k, v, attn_mask, is_causal, what)
    seq_axis = 2 if seq_dim_2 else 1
    q_len = q.shape[seq_axis]
    kv_len = v.shape[seq_axis]
    # ExecuTorch counts the query's tokens along dim 1 unless the query is int8.
    counted = q_len if dequantized is not None else q.shape[1]
    num_keys = kv_len if attn_mask is not None else start_pos + counted
    if num_keys > kv_len:
        raise InvalidArgument(f"{what}: start_pos {start_pos} + {counted} tokens exceeds the {kv_len} cached")
    if attn_mask is not None and tuple(attn_mask.shape) != (q_len, kv_len):
        raise InvalidArgument(f"{what}: attn_mask is {tuple(attn_mask.shape)}, expected {(q_len, kv_len)}")
    _resize(out, q.shape)
    if dequantized is not None:
        qf, kf, vf = dequantized
    else:
        qf, kf, vf = q.to(_F32), k.to(_F32), v.to(_F32)
    if not seq_dim_2:
        qf, kf, vf = qf.transpose(1, 2), kf.transpose(1, 2), vf.transpose(1, 2)
    result = _attention(qf, kf, vf, start_pos, attn_mask, is_causal, scale, num_keys,
                        q.dtype if dequantized is None else _F32)
    if not seq_dim_2:
        result = result.transpose(1, 2)
    out.copy_(result)
    return out


def custom_sdpa(query, key, value, start_pos, attn_mask, dropout_p, is_causal, scale, out):
    what = "custom_sdpa"
    if query.dtype not in _ATTENTION_TYPES or key.dtype != query.dtype or value.dtype != query.dtype:
        raise InvalidArgument(f"{what}: query, key and value must share a float, half or bfloat16 type")
    return _sdpa_into(query, key, value, start_pos, attn_mask, is_causal, scale, out, what)


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
    _check_cache_shapes(key, key_cache, what)
    _check_cache_shapes(value, value_cache, what)
    _write_span(key, key_cache, start_pos, what)
    _write_span(value, value_cache, start_pos, what)
    return custom_sdpa(query, key_cache, value_cache, start_pos, attn_mask, dropout_p, is_causal, scale, out)


def _dequantize_rows(t: torch.Tensor, zero_points: torch.Tensor, scales: torch.Tensor, what: str):
    if t.dtype != torch.int8 or zero_points.dtype != torch.int8 or scales.dtype != _F32:
        raise InvalidArgument(f"{what}: tensors must be int8 with int8 zero points and float scales")
    if zero_points.dim() != t.dim() or scales.dim() != t.dim() or \
            zero_points.shape[:-1] != t.shape[:-1] or scales.shape[:-1] != t.shape[:-1]:
        raise InvalidArgument(f"{what}: quantization parameters must match the tensor but in the last dim")
    return (t.to(torch.int32) - zero_points[..., :1].to(torch.int32)).to(_F32) * scales[..., :1]


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


# -- gated delta rule ----------------------------------------------------------


def gated_delta_rule(query, key, value, decay, beta, initial_state, out, final_state_out):
    """Gated delta-rule linear attention, token by token.

    Per key/value head, with state S [K, V]: S' = diag(decay) S; delta = beta (v - S'^T k);
    S = S' + k delta^T; each query head of the group reads o = S^T q.
    """
    what = "gated_delta_rule"
    tensors = (query, key, value, decay, beta, initial_state)
    if any(t.dim() != 4 for t in (query, key, value, initial_state)) or decay.dim() not in (3, 4) \
            or beta.dim() != 3:
        raise InvalidArgument(f"{what}: expected 4-d query/key/value/state, 3-d beta and 3-d or 4-d decay")
    if any(t.dtype != _F32 for t in tensors) or out.dtype != _F32 or final_state_out.dtype != _F32:
        raise InvalidArgument(f"{what}: all tensors must be float32")
    batch, heads, steps, k_dim = query.shape
    kv_heads, v_dim = key.shape[1], value.shape[3]
    if key.shape[0] != batch or key.shape[2:] != (steps, k_dim) or value.shape[:3] != key.shape[:3] \
            or beta.shape != key.shape[:3] or decay.shape[:3] != key.shape[:3] \
            or (decay.dim() == 4 and decay.shape[3] != k_dim) \
            or initial_state.shape != (batch, kv_heads, k_dim, v_dim) or kv_heads == 0 or heads % kv_heads:
        raise InvalidArgument(f"{what}: inconsistent shapes")
    if initial_state.numel() and final_state_out.numel() and \
            initial_state.untyped_storage().data_ptr() == final_state_out.untyped_storage().data_ptr():
        begin_a, begin_b = initial_state.data_ptr(), final_state_out.data_ptr()
        if begin_a < begin_b + final_state_out.nbytes and begin_b < begin_a + initial_state.nbytes:
            raise InvalidArgument(f"{what}: final_state_out must not alias initial_state")
    _resize(out, (batch, heads, steps, v_dim))
    _resize(final_state_out, initial_state.shape)
    reps = heads // kv_heads
    state = initial_state.clone()
    outputs = []
    for t in range(steps):
        d = decay[:, :, t].unsqueeze(-1) if decay.dim() == 4 else decay[:, :, t, None, None]
        k_t = key[:, :, t]
        decayed = state * d
        predicted = torch.einsum("bhk,bhkv->bhv", k_t, decayed)
        delta = (value[:, :, t] - predicted) * beta[:, :, t, None]
        state = decayed + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        q_t = query[:, :, t].reshape(batch, kv_heads, reps, k_dim)
        outputs.append(torch.einsum("bhrk,bhkv->bhrv", q_t, state).reshape(batch, heads, v_dim))
    if steps:
        out.copy_(torch.stack(outputs, dim=2))
    final_state_out.copy_(state)
    return out, final_state_out


# -- small operators -----------------------------------------------------------


def fallback(input, output):
    if input.dtype != output.dtype:
        raise InvalidArgument(f"fallback: input is {input.dtype} but output is {output.dtype}")
    _resize(output, input.shape)
    output.copy_(input)
    return output


# The 28 x 28 Hadamard matrix (Williamson construction, N. J. A. Sloane's library) that
# ExecuTorch applies for sizes of 28 * 2^k, one row of signs per output.
_HADAMARD_28 = (
    "+------++----++-+--+-+--++--", "-+-----+++-----+-+--+-+--++-", "--+-----+++---+-+-+----+--++",
    "---+-----+++---+-+-+-+--+--+", "----+-----+++---+-+-+++--+--", "-----+-----++++--+-+--++--+-",
    "------++----++-+--+-+--++--+", "--++++-+-------++--+++-+--+-", "---++++-+-----+-++--+-+-+--+",
    "+---+++--+----++-++--+-+-+--", "++---++---+----++-++--+-+-+-", "+++---+----+----++-++--+-+-+",
    "++++--------+-+--++-++--+-+-", "-++++--------+++--++--+--+-+", "-+-++-++--++--+--------++++-",
    "+-+-++--+--++--+--------++++", "-+-+-++--+--++--+----+---+++", "+-+-+-++--+--+---+---++---++",
    "++-+-+-++--+------+--+++---+", "-++-+-+-++--+------+-++++---", "+-++-+---++--+------+-++++--",
    "-++--++-+-++-+++----++------", "+-++--++-+-++-+++-----+-----", "++-++---+-+-++-+++-----+----",
    "-++-++-+-+-+-+--+++-----+---", "--++-++++-+-+----+++-----+--", "+--++-+-++-+-+----+++-----+-",
    "++--++-+-++-+-+----++------+",
)


def _walsh_hadamard(x: torch.Tensor, log2_n: int) -> torch.Tensor:
    """Normalized Walsh-Hadamard transform of the last dimension (2^log2_n), in x's own type."""
    if log2_n == 0:
        return x
    n = 1 << log2_n
    lead = x.shape[:-1]
    step = 1
    while step < n:
        pairs = x.reshape(*lead, n // (2 * step), 2, step)
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        x = torch.stack((a + b, a - b), dim=-2).reshape(*lead, n)
        step *= 2
    # 1 / 2^(k/2), formed in the tensor's type: a power of two, times sqrt(2) for odd k.
    root = torch.tensor(float(1 << (log2_n // 2)), dtype=x.dtype)
    if log2_n % 2:
        root = root * torch.tensor(math.sqrt(2.0), dtype=x.dtype)
    inv = torch.tensor(1.0, dtype=x.dtype) / root
    return x * inv.to(x.device)


def fast_hadamard_transform(mat, out):
    what = "fast_hadamard_transform"
    _resize(out, mat.shape)
    if mat.dtype != out.dtype:
        raise InvalidArgument(f"{what}: mat is {mat.dtype} but out is {out.dtype}")
    if mat.dim() == 0 or mat.numel() == 0:
        return out
    if mat.dtype not in (torch.float32, torch.float64, torch.float16):
        raise InvalidArgument(f"{what}: unsupported dtype {mat.dtype}")
    size = mat.shape[-1]
    by_28 = size % 28 == 0
    power = size // 28 if by_28 else size
    if power & (power - 1):
        raise InvalidArgument(f"{what}: the last dimension ({size}) must be a power of 2 or 28 times one")
    log2_n = power.bit_length() - 1
    if not by_28:
        out.copy_(_walsh_hadamard(mat, log2_n))
        return out
    blocks = _walsh_hadamard(mat.reshape(*mat.shape[:-1], 28, power), log2_n)
    # Then a 28-point Hadamard across the blocks, summed left to right as ExecuTorch's generated code does.
    # A half row that opens with +x[0] promotes to float and rounds once at the end; one that opens
    # with -x[0] stays in half and rounds after every term.
    rows = []
    for signs in _HADAMARD_28:
        wide = mat.dtype == torch.float16 and signs[0] == "+"
        terms = blocks.to(_F32) if wide else blocks
        acc = terms[..., 0, :] if signs[0] == "+" else -terms[..., 0, :]
        for j in range(1, 28):
            acc = acc + terms[..., j, :] if signs[j] == "+" else acc - terms[..., j, :]
        rows.append(acc.to(mat.dtype))
    out.copy_(torch.stack(rows, dim=-2).reshape(mat.shape))
    return out


def tile_crop(input, tile_size, out):
    """[C, H, W] -> [tiles, C, tile, tile], tiles in row-major order over the image."""
    what = "tile_crop"
    if input.dtype != out.dtype or input.dim() != 3 or tile_size <= 0:
        raise InvalidArgument(f"{what}: expected a 3-d input, an out of its dtype and a positive tile size")
    channels, height, width = input.shape
    if height % tile_size or width % tile_size:
        raise InvalidArgument(f"{what}: {height}x{width} is not a multiple of the tile size {tile_size}")
    rows, cols = height // tile_size, width // tile_size
    _resize(out, (rows * cols, channels, tile_size, tile_size))
    tiles = input.reshape(channels, rows, tile_size, cols, tile_size).permute(1, 3, 0, 2, 4)
    out.copy_(tiles.reshape(rows * cols, channels, tile_size, tile_size))
    return out


# -- registration --------------------------------------------------------------


# Each kernel with the schema ExecuTorch registers for it: its arguments in order (the kernel takes them
# positionally) and which it writes (caches in place, outs).
_KERNELS: list[tuple[Callable, str]] = [
    (sdpa_with_kv_cache, (
        "llama::sdpa_with_kv_cache.out(Tensor query, Tensor key, Tensor value, Tensor(a!) key_cache, "
        "Tensor(b!) value_cache, SymInt start_pos, SymInt seq_len, Tensor? attn_mask=None, "
        "float drpout_p=0., bool is_causal=False, float? scale=None, *, Tensor(c!) out) -> Tensor(c!)")),
    (custom_sdpa, (
        "llama::custom_sdpa.out(Tensor query, Tensor key, Tensor value, SymInt start_pos, "
        "Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None, *, "
        "Tensor(a!) out) -> Tensor(a!)")),
    (custom_quantized_sdpa, (
        "llama::custom_quantized_sdpa.out(Tensor query, Tensor key, Tensor value, SymInt start_pos, "
        "Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None, "
        "Tensor? q_zero_points=None, Tensor? q_scales=None, Tensor? k_zero_points=None, Tensor? k_scales=None, "
        "Tensor? v_zero_points=None, Tensor? v_scales=None, bool is_seq_at_dim_2=False, *, "
        "Tensor(a!) out) -> Tensor(a!)")),
    # The schema says out is written too; the kernel leaves that placeholder as it is.
    (update_cache, (
        "llama::update_cache.out(Tensor value, Tensor(a!) cache, SymInt start_pos, *, "
        "Tensor(b!) out) -> Tensor(b!)")),
    (update_cache_with_indices, (
        "llama::update_cache_with_indices.out(Tensor value, Tensor(a!) cache, SymInt start_pos, "
        "Tensor indices, *, Tensor(b!) out) -> Tensor(b!)")),
    (gated_delta_rule, (
        "llama::gated_delta_rule.out(Tensor query, Tensor key, Tensor value, Tensor decay, Tensor beta, "
        "Tensor initial_state, *, Tensor(a!) out, Tensor(b!) final_state_out) -> (Tensor(a!), Tensor(b!))")),
    (gated_delta_rule, (
        "llama::channelwise_gated_delta_rule.out(Tensor query, Tensor key, Tensor value, Tensor decay, "
        "Tensor beta, Tensor initial_state, *, Tensor(a!) out, Tensor(b!) final_state_out) "
        "-> (Tensor(a!), Tensor(b!))")),
    (fast_hadamard_transform, "llama::fast_hadamard_transform.out(Tensor mat, *, Tensor(a!) out) -> Tensor(a!)"),
    (fallback, "llama::fallback.out(Tensor input, *, Tensor(a!) output) -> Tensor(a!)"),
    (tile_crop, "preprocess::tile_crop.out(Tensor input, int tile_size, *, Tensor(a!) out) -> Tensor(a!)"),
]


def register(registry: KernelRegistry) -> None:
    for fn, schema in _KERNELS:
        registry.register(*python_kernel(fn, schema))
