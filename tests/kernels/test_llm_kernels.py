"""llama:: (and preprocess::tile_crop) kernels against ExecuTorch's own, called eagerly.

The oracle is ExecuTorch's custom-ops AOT library, whose torch operators run
the same C++ kernels as its runtime; test_llm_programs.py runs programs
calling them on both runtimes. Reduced-precision attention is compared as
tests/kernels/llm.py says.
"""

from __future__ import annotations

import math

import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 - llama:: ops, eager and in the runtime
import pytest
import torch
from executorch.extension.llm.custom_ops import op_tile_crop_aot  # noqa: F401 - preprocess::tile_crop

from pterun.errors import InvalidArgument
from pterun.kernels.llm.attention import custom_quantized_sdpa, custom_sdpa, sdpa_with_kv_cache
from pterun.kernels.llm.cache import update_cache, update_cache_with_indices
from pterun.kernels.llm.copies import fallback, tile_crop
from pterun.kernels.llm.delta_rule import gated_delta_rule
from pterun.kernels.llm.hadamard import fast_hadamard_transform
from tests.kernels.llm import assert_close_to_scale, per_token_int8, random
from tests.support.compare import assert_matches

ll = torch.ops.llama


# -- eager oracle ------------------------------------------------------------------

_SDPA_CASES = [
    # batch, q_len, heads, kv_heads, head_dim, cache_len, start_pos
    (1, 1, 4, 4, 8, 16, 5),
    (2, 3, 4, 2, 16, 20, 0),
    (1, 7, 2, 1, 4, 600, 590),  # keys span two 512-key blocks
    (1, 1, 2, 2, 8, 1100, 1050),  # three blocks
    (1, 40, 2, 2, 8, 700, 0),  # two query tiles
    (1, 33, 2, 2, 8, 40, 0),  # a last query tile of one row
]


@pytest.mark.parametrize("case", _SDPA_CASES)
@pytest.mark.parametrize("is_causal", [True, False])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_custom_sdpa_matches_executorch(case, is_causal, scale):
    batch, q_len, heads, kv_heads, head_dim, cache_len, start_pos = case
    q = random((batch, q_len, heads, head_dim), 1)
    k = random((batch, cache_len, kv_heads, head_dim), 2)
    v = random((batch, cache_len, kv_heads, head_dim), 3)
    expected = ll.custom_sdpa(q, k, v, start_pos, None, 0.0, is_causal, scale)
    actual = torch.empty(0)
    custom_sdpa(q, k, v, start_pos, None, 0.0, is_causal, scale, actual)
    assert_matches(actual, expected)


def _native_takes(q, k, v, start_pos, mask, is_causal, scale, seq_dim_2=False) -> bool:
    from pterun.kernels.llm import attention

    axis = 2 if seq_dim_2 else 1
    keys = v.shape[axis] if mask is not None else start_pos + q.shape[1]
    out = torch.empty(q.shape)
    return attention._native_into(q, k, v, start_pos, mask, is_causal, scale, out, keys, seq_dim_2)


@pytest.mark.parametrize("case", _SDPA_CASES)
@pytest.mark.parametrize("is_causal", [True, False])
def test_float32_attention_runs_executorchs_loop_natively(case, is_causal):
    """In float32 on the CPU the native kernel runs ExecuTorch's loop with its BLAS calls (pterun/native/sdpa.c):
    ExecuTorch's bits wherever they do not hang on its heap's alignment (up to about a hundred keys; prefill
    blocks and the later key blocks included), and within a few units in the last place beyond."""
    from pterun import native

    assert native.kernels is not None, "premise: the native kernels are built (the README's install builds them)"
    assert native.kernels.sdpa_blas(), "premise: the products run in PyTorch's sgemm_, as ExecuTorch's do"
    batch, q_len, heads, kv_heads, head_dim, cache_len, start_pos = case
    q = random((batch, q_len, heads, head_dim), 61)
    k = random((batch, cache_len, kv_heads, head_dim), 62)
    v = random((batch, cache_len, kv_heads, head_dim), 63)
    assert _native_takes(q, k, v, start_pos, None, is_causal, None), "premise: the native kernel takes the call"
    expected = ll.custom_sdpa(q, k, v, start_pos, None, 0.0, is_causal, None)
    actual = torch.empty(0)
    custom_sdpa(q, k, v, start_pos, None, 0.0, is_causal, None, actual)
    if start_pos + q_len <= 100:
        assert torch.equal(actual, expected), f"{(actual != expected).sum()} of {actual.numel()} differ"
    else:
        assert_matches(actual, expected)


def test_float32_decode_steps_are_executorchs_bits_up_to_a_hundred_keys():
    """A decoder's steps (one query, 12 heads sharing 4 key heads) at every cache length up to 100: ExecuTorch's
    bits in every output, which the PyTorch operations' loop gave in about a third of them."""
    q, k, v = random((1, 1, 12, 64), 64), random((1, 128, 4, 64), 65), random((1, 128, 4, 64), 66)
    assert _native_takes(q, k, v, 99, None, True, None), "premise: the native kernel takes the call"
    differ = []
    for start_pos in range(100):
        expected = ll.custom_sdpa(q, k, v, start_pos, None, 0.0, True, None)
        actual = torch.empty(0)
        custom_sdpa(q, k, v, start_pos, None, 0.0, True, None, actual)
        if not torch.equal(actual, expected):
            differ.append(start_pos)
    assert not differ, f"steps at positions {differ} differ"


def test_native_attention_takes_masks_layouts_and_odd_scores_as_executorch_does():
    """A float mask, the [batch, heads, sequence, head_dim] layout of custom_quantized_sdpa's float form, strided
    queries, and scores of NaN, infinities and rows that attend to nothing: ExecuTorch's outputs (its NaNs in the
    same places)."""
    from pterun.kernels.llm.attention import custom_quantized_sdpa

    q, k, v = random((1, 5, 4, 16), 70), random((1, 40, 2, 16), 71), random((1, 40, 2, 16), 72)
    mask = random((5, 40), 73)
    mask[:, -3:] = -math.inf
    mask[2, :] = -math.inf  # a row that sees nothing: NaN, as ExecuTorch's
    assert _native_takes(q, k, v, 0, mask, False, 0.3), "premise: the native kernel takes a mask"
    expected = ll.custom_sdpa(q, k, v, 0, mask, 0.0, False, 0.3)
    actual = torch.empty(0)
    custom_sdpa(q, k, v, 0, mask, 0.0, False, 0.3, actual)
    assert expected.isnan().any() and torch.equal(actual.nan_to_num(7.0), expected.nan_to_num(7.0))

    qt, kt, vt = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
    assert _native_takes(qt, kt, vt, 3, None, True, None, seq_dim_2=True), "premise: the native kernel takes it"
    expected = ll.custom_quantized_sdpa(qt, kt, vt, 3, None, 0.0, True, None, None, None, None, None, None, None,
                                        True)
    actual = torch.empty(0)
    custom_quantized_sdpa(qt, kt, vt, 3, None, 0.0, True, None, None, None, None, None, None, None, True, actual)
    assert torch.equal(actual, expected)

    wide = random((1, 5, 4, 32), 74)[..., ::2]  # rows of a head strided: taken by the loop in torch operations
    assert not _native_takes(wide, k, v, 2, None, True, None)
    expected = ll.custom_sdpa(wide.contiguous(), k, v, 2, None, 0.0, True, None)
    actual = torch.empty(0)
    custom_sdpa(wide, k, v, 2, None, 0.0, True, None, actual)
    assert_matches(actual, expected)

    odd = q.clone()
    odd[0, 0, 0, 0], odd[0, 1, 1, :] = math.nan, math.inf
    for is_causal in (True, False):
        expected = ll.custom_sdpa(odd, k, v, 4, None, 0.0, is_causal, None)
        actual = torch.empty(0)
        custom_sdpa(odd, k, v, 4, None, 0.0, is_causal, None, actual)
        assert expected.isnan().any() and torch.equal(actual.nan_to_num(7.0), expected.nan_to_num(7.0))


@pytest.mark.parametrize("case", _SDPA_CASES)
def test_the_loop_in_torch_operations_matches_executorch(case):
    """The path without the native kernels (and for every type and device): ExecuTorch's values, its bits but
    for the products' summation order."""
    from pterun.kernels.llm import attention

    batch, q_len, heads, kv_heads, head_dim, cache_len, start_pos = case
    q = random((batch, q_len, heads, head_dim), 81)
    k = random((batch, cache_len, kv_heads, head_dim), 82)
    v = random((batch, cache_len, kv_heads, head_dim), 83)
    for is_causal in (True, False):
        expected = ll.custom_sdpa(q, k, v, start_pos, None, 0.0, is_causal, None)
        actual = attention._torch_into(q, k, v, start_pos, None, is_causal, None, torch.empty(q.shape),
                                       start_pos + q_len, False)
        assert_matches(actual, expected)


def test_native_attention_refuses_what_it_cannot_read_safely():
    """The C side trusts its sizes: a key cache shorter than the keys attended, value heads other than the key
    heads, or a batch the caches lack never reach it (the loop in torch operations raises or computes)."""
    q, k, v = random((2, 1, 4, 8), 90), random((2, 16, 2, 8), 91), random((2, 16, 2, 8), 92)
    assert _native_takes(q, k, v, 10, None, True, None), "premise: the well-formed call is taken"
    assert not _native_takes(q, k[:, :8], v, 10, None, True, None)
    assert not _native_takes(q, k, v[:, :, :1], 10, None, True, None)
    assert not _native_takes(q, k[:1], v[:1], 10, None, True, None)
    assert not _native_takes(q.double(), k.double(), v.double(), 10, None, True, None)
    for bad_k, bad_v in ((k[:, :8], v), (k, v[:, :, :1]), (k[:1], v[:1])):
        with pytest.raises(InvalidArgument, match="caches must have one shape") as raised:
            custom_sdpa(q, bad_k, bad_v, 10, None, 0.0, True, None, torch.empty(0))
        assert raised.value.code == 0x12 and str(list(bad_k.shape)) in str(raised.value)
    out = torch.empty(0)
    custom_sdpa(q, k, v, 10, None, 0.0, True, None, out)  # and the kernel still works
    assert_matches(out, ll.custom_sdpa(q, k, v, 10, None, 0.0, True, None))


@pytest.mark.parametrize("case", _SDPA_CASES[:3] + _SDPA_CASES[5:])
def test_custom_sdpa_with_mask_matches_executorch(case):
    batch, q_len, heads, kv_heads, head_dim, cache_len, start_pos = case
    q = random((batch, q_len, heads, head_dim), 4)
    k = random((batch, cache_len, kv_heads, head_dim), 5)
    v = random((batch, cache_len, kv_heads, head_dim), 6)
    mask = random((q_len, cache_len), 7)
    mask[:, -3:] = -math.inf
    expected = ll.custom_sdpa(q, k, v, start_pos, mask, 0.0, False, None)
    actual = torch.empty(0)
    custom_sdpa(q, k, v, start_pos, mask, 0.0, False, None, actual)
    assert_matches(actual, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", _SDPA_CASES)
def test_custom_sdpa_reduced_precision_matches_executorch(dtype, case):
    batch, q_len, heads, kv_heads, head_dim, cache_len, start_pos = case
    q = random((batch, q_len, heads, head_dim), 8, dtype)
    k = random((batch, cache_len, kv_heads, head_dim), 9, dtype)
    v = random((batch, cache_len, kv_heads, head_dim), 10, dtype)
    for is_causal in (True, False):
        expected = ll.custom_sdpa(q, k, v, start_pos, None, 0.0, is_causal, None)
        actual = torch.empty(0, dtype=dtype)
        custom_sdpa(q, k, v, start_pos, None, 0.0, is_causal, None, actual)
        assert_close_to_scale(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("q_len", [1, 5, 33])
@pytest.mark.parametrize("how", ["causal", "mask", "none", "position tensor"])
def test_attention_over_one_key_block_is_the_block_loops(dtype, q_len, how):
    """Keys that fit one block take a shorter path than ExecuTorch's loop over blocks: the same numbers,
    NaN, infinities and rows with nothing to attend included."""
    from pterun.kernels.llm import attention

    heads, head_dim, keys = 4, 16, 200
    q = random((1, heads, q_len, head_dim), 50).to(dtype).float()
    k, v = random((1, heads, keys, head_dim), 51).to(dtype).float(), random((1, heads, keys, head_dim), 52)
    q[0, 0, 0, 0], k[0, 1, 3, :] = math.inf, math.nan
    mask = None
    if how == "mask":
        mask = random((q_len, keys), 53)
        mask[-1, :] = -math.inf if q_len > 1 else 0.0  # a row that attends to nothing
    start = 150
    start_pos = torch.tensor(start) if how == "position tensor" else start
    num_keys = keys if how in ("mask", "position tensor") else start + q_len
    args = (q, k, v, start_pos, mask, how == "causal", attention.f32(0.25), num_keys, dtype,
            dtype == torch.bfloat16 and q_len % 32 == 1)
    assert num_keys <= attention._KV_BLOCK, "premise: one block"
    loop, short = attention._blocks(*args), attention._one_block(*args)
    assert loop.isnan().any() and (~loop.isnan()).any(), "premise: NaN rows and numbers both"
    assert torch.equal(short.nan_to_num(7.0), loop.nan_to_num(7.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_with_kv_cache_matches_executorch(dtype):
    batch, q_len, heads, kv_heads, head_dim, cache_len = 1, 3, 4, 2, 8, 24
    key_cache, value_cache = random((batch, cache_len, kv_heads, head_dim), 11, dtype), \
        random((batch, cache_len, kv_heads, head_dim), 12, dtype)
    ours_k, ours_v = key_cache.clone(), value_cache.clone()
    for step, start_pos in enumerate((0, 3, 6, 20)):
        q = random((batch, q_len, heads, head_dim), 20 + step, dtype)
        k = random((batch, q_len, kv_heads, head_dim), 30 + step, dtype)
        v = random((batch, q_len, kv_heads, head_dim), 40 + step, dtype)
        expected = ll.sdpa_with_kv_cache(
            q, k, v, key_cache, value_cache, start_pos, q_len, None, 0.0, True, None
        )
        actual = torch.empty(0, dtype=dtype)
        sdpa_with_kv_cache(q, k, v, ours_k, ours_v, start_pos, q_len, None, 0.0, True, None, actual)
        assert torch.equal(ours_k, key_cache) and torch.equal(ours_v, value_cache)
        if dtype == torch.float32:
            assert_matches(actual, expected)
        else:
            assert_close_to_scale(actual, expected)


def test_update_cache_matches_executorch():
    cache = random((2, 10, 3, 4), 13)
    ours = cache.clone()
    placeholder = torch.empty(1)
    for start_pos, length in ((0, 4), (4, 1), (9, 1), (5, 5)):
        value = random((2, length, 3, 4), 14 + start_pos)
        ll.update_cache(value, cache, start_pos)
        assert update_cache(value, ours, start_pos, placeholder) is placeholder
        assert torch.equal(ours, cache)
    int8_cache = torch.zeros(1, 6, 2, 4, dtype=torch.int8)
    ours8 = int8_cache.clone()
    value8 = torch.randint(-128, 128, (1, 2, 2, 4), dtype=torch.int8)
    ll.update_cache(value8, int8_cache, 3)
    update_cache(value8, ours8, 3, placeholder)
    assert torch.equal(ours8, int8_cache)
    with pytest.raises(InvalidArgument):
        update_cache(random((2, 2, 3, 4), 15), ours, 9, placeholder)


def test_update_cache_with_indices_matches_executorch():
    cache = random((2, 12, 3, 4), 16)
    ours = cache.clone()
    placeholder = torch.empty(1)
    g = torch.Generator().manual_seed(17)
    for trial in range(4):
        value = random((2, 5, 3, 4), 18 + trial)
        indices = torch.randint(0, 12, (2, 5), generator=g)
        if trial == 3:
            indices[0] = torch.tensor([1, 7, 1, 7, 1])  # repeated positions: the last write wins
        ll.update_cache_with_indices(value, cache, 0, indices)
        update_cache_with_indices(value, ours, 0, indices, placeholder)
        assert torch.equal(ours, cache), f"trial {trial}"
    with pytest.raises(InvalidArgument):
        update_cache_with_indices(value, ours, 0, torch.full((2, 5), 12), placeholder)


@pytest.mark.parametrize("case", [(1, 1, 4, 4, 8, 16, 5), (1, 6, 4, 2, 16, 20, 0), (2, 3, 2, 2, 8, 40, 10)])
@pytest.mark.parametrize("is_causal", [True, False])
def test_custom_quantized_sdpa_matches_executorch(case, is_causal):
    batch, q_len, heads, kv_heads, head_dim, cache_len, start_pos = case
    q, qz, qs = per_token_int8(random((batch, q_len, heads, head_dim), 21))
    k, kz, ks = per_token_int8(random((batch, cache_len, kv_heads, head_dim), 22))
    v, vz, vs = per_token_int8(random((batch, cache_len, kv_heads, head_dim), 23))
    params = (qz, qs, kz, ks, vz, vs)
    expected = ll.custom_quantized_sdpa(q, k, v, start_pos, None, 0.0, is_causal, None, *params, False)
    actual = torch.empty(0)
    custom_quantized_sdpa(q, k, v, start_pos, None, 0.0, is_causal, None, *params, False, actual)
    assert_matches(actual, expected)


def test_custom_quantized_sdpa_with_sequence_at_dim_2_matches_executorch():
    q, qz, qs = per_token_int8(random((1, 4, 3, 8), 24))  # [B, H, S, D]
    k, kz, ks = per_token_int8(random((1, 4, 12, 8), 25))
    v, vz, vs = per_token_int8(random((1, 4, 12, 8), 26))
    expected = ll.custom_quantized_sdpa(q, k, v, 2, None, 0.0, True, None, qz, qs, kz, ks, vz, vs, True)
    actual = torch.empty(0)
    custom_quantized_sdpa(q, k, v, 2, None, 0.0, True, None, qz, qs, kz, ks, vz, vs, True, actual)
    assert_matches(actual, expected)
    # A float query takes the float path, which counts its tokens along dim 1 even in this layout.
    qf, kf, vf = random((1, 4, 3, 8), 27), random((1, 4, 12, 8), 28), random((1, 4, 12, 8), 29)
    for is_causal in (True, False):
        expected = ll.custom_quantized_sdpa(qf, kf, vf, 2, None, 0.0, is_causal, None, None, None, None, None,
                                            None, None, True)
        actual = torch.empty(0)
        custom_quantized_sdpa(qf, kf, vf, 2, None, 0.0, is_causal, None, None, None, None, None, None, None,
                                True, actual)
        assert_matches(actual, expected)


@pytest.mark.parametrize("case", [
    # batch, heads, kv_heads, steps, key_dim, value_dim, scalar decay
    (1, 2, 2, 1, 4, 5, False),
    (2, 4, 2, 6, 8, 3, True),
    (1, 2, 1, 70, 4, 4, False),  # ExecuTorch's chunked prefill kernel
    (1, 1, 1, 130, 8, 8, True),
])
def test_gated_delta_rule_matches_executorch(case):
    batch, heads, kv_heads, steps, k_dim, v_dim, scalar = case
    q = random((batch, heads, steps, k_dim), 27)
    k = random((batch, kv_heads, steps, k_dim), 28) * 0.3
    v = random((batch, kv_heads, steps, v_dim), 29)
    g = torch.Generator().manual_seed(30)
    decay_shape = (batch, kv_heads, steps) if scalar else (batch, kv_heads, steps, k_dim)
    decay = torch.rand(decay_shape, generator=g) * 0.5 + 0.5
    beta = torch.rand(batch, kv_heads, steps, generator=g)
    state = random((batch, kv_heads, k_dim, v_dim), 31)
    expected_out, expected_state = ll.gated_delta_rule(q, k, v, decay, beta, state)
    out, final_state = torch.empty(0), torch.empty(0)
    gated_delta_rule(q, k, v, decay, beta, state, out, final_state)
    assert_matches([out, final_state], [expected_out, expected_state])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("size", [1, 2, 8, 64, 1024, 28, 56, 28 * 8, 28 * 64])
def test_fast_hadamard_transform_matches_executorch(dtype, size):
    x = (random((5, size), 32) * 3).to(dtype)
    expected = ll.fast_hadamard_transform(x)
    actual = torch.empty(0, dtype=dtype)
    fast_hadamard_transform(x, actual)
    if dtype == torch.float32:
        assert_matches(actual, expected)
    else:
        # Half follows ExecuTorch's rounding step by step; double is exact either way.
        assert torch.equal(actual, expected)


def test_fast_hadamard_transform_rejects_other_sizes():
    with pytest.raises(InvalidArgument):
        fast_hadamard_transform(torch.randn(3, 12), torch.empty(0))


def test_tile_crop_orders_tiles_row_major():
    x = torch.arange(3 * 4 * 6, dtype=torch.float32).reshape(3, 4, 6)
    out = torch.empty(0)
    tile_crop(x, 2, out)
    assert out.shape == (6, 3, 2, 2)
    for tile in range(6):
        row, col = divmod(tile, 3)
        assert torch.equal(out[tile], x[:, 2 * row:2 * row + 2, 2 * col:2 * col + 2])


def test_fallback_copies():
    x = random((3, 5), 33)
    out = torch.empty(0)
    fallback(x, out)
    assert torch.equal(out, x)
