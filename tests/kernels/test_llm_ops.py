"""llama::* (and preprocess::tile_crop) kernels against ExecuTorch's own.

The eager oracle is ExecuTorch's custom-ops AOT library, whose torch
operators run the same C++ kernels as its runtime; programs exported with each
operator then run on both runtimes, called several times where they keep a KV
cache, and compared call by call.

Attention in half and bfloat16 rounds float32 probabilities to the activation
type; ExecuTorch's float32 scores come from its own matmul's summation order,
so a probability can round the other way and move an output by a unit of the
largest output's last place. Those comparisons use a bound scaled by the
output's magnitude rather than by each element's.
"""

from __future__ import annotations

import math

import pytest
import torch

import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 - llama:: ops, eager and in the runtime
import executorch.kernels.quantized  # noqa: F401 - quantized_decomposed:: out variants
import pterun
from executorch.extension.llm.custom_ops import op_tile_crop_aot  # noqa: F401 - preprocess::tile_crop
from pterun.errors import InvalidArgument, InvalidProgram
from pterun.format import ProgramFile
from pterun.kernels import default_registry, llm
from pterun.kernels.llm.attention import custom_quantized_sdpa, custom_sdpa, sdpa_with_kv_cache
from pterun.kernels.llm.cache import update_cache, update_cache_with_indices
from pterun.kernels.llm.copies import fallback, tile_crop
from pterun.kernels.llm.delta_rule import gated_delta_rule
from pterun.kernels.llm.hadamard import fast_hadamard_transform
from tests.support.compare import assert_matches
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import reference_module, run_reference

ll = torch.ops.llama
qd = torch.ops.quantized_decomposed


def _assert_close_to_scale(actual: torch.Tensor, expected: torch.Tensor, units: float = 2.0) -> None:
    """Within ``units`` last-place units of the largest expected magnitude (for reduced precision)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    eps = torch.finfo(expected.dtype).eps
    scale = max(1.0, expected.abs().max().item())
    diff = (actual.double() - expected.double()).abs().max().item()
    assert diff <= units * eps * scale, f"max abs diff {diff:.3g} > {units} * {eps:.3g} * {scale:.3g}"


def _random(shape, seed, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


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
    q = _random((batch, q_len, heads, head_dim), 1)
    k = _random((batch, cache_len, kv_heads, head_dim), 2)
    v = _random((batch, cache_len, kv_heads, head_dim), 3)
    expected = ll.custom_sdpa(q, k, v, start_pos, None, 0.0, is_causal, scale)
    actual = torch.empty(0)
    custom_sdpa(q, k, v, start_pos, None, 0.0, is_causal, scale, actual)
    assert_matches(actual, expected)


@pytest.mark.parametrize("case", _SDPA_CASES[:3] + _SDPA_CASES[5:])
def test_custom_sdpa_with_mask_matches_executorch(case):
    batch, q_len, heads, kv_heads, head_dim, cache_len, start_pos = case
    q = _random((batch, q_len, heads, head_dim), 4)
    k = _random((batch, cache_len, kv_heads, head_dim), 5)
    v = _random((batch, cache_len, kv_heads, head_dim), 6)
    mask = _random((q_len, cache_len), 7)
    mask[:, -3:] = -math.inf
    expected = ll.custom_sdpa(q, k, v, start_pos, mask, 0.0, False, None)
    actual = torch.empty(0)
    custom_sdpa(q, k, v, start_pos, mask, 0.0, False, None, actual)
    assert_matches(actual, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", _SDPA_CASES)
def test_custom_sdpa_reduced_precision_matches_executorch(dtype, case):
    batch, q_len, heads, kv_heads, head_dim, cache_len, start_pos = case
    q = _random((batch, q_len, heads, head_dim), 8, dtype)
    k = _random((batch, cache_len, kv_heads, head_dim), 9, dtype)
    v = _random((batch, cache_len, kv_heads, head_dim), 10, dtype)
    for is_causal in (True, False):
        expected = ll.custom_sdpa(q, k, v, start_pos, None, 0.0, is_causal, None)
        actual = torch.empty(0, dtype=dtype)
        custom_sdpa(q, k, v, start_pos, None, 0.0, is_causal, None, actual)
        _assert_close_to_scale(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_with_kv_cache_matches_executorch(dtype):
    batch, q_len, heads, kv_heads, head_dim, cache_len = 1, 3, 4, 2, 8, 24
    key_cache, value_cache = _random((batch, cache_len, kv_heads, head_dim), 11, dtype), \
        _random((batch, cache_len, kv_heads, head_dim), 12, dtype)
    ours_k, ours_v = key_cache.clone(), value_cache.clone()
    for step, start_pos in enumerate((0, 3, 6, 20)):
        q = _random((batch, q_len, heads, head_dim), 20 + step, dtype)
        k = _random((batch, q_len, kv_heads, head_dim), 30 + step, dtype)
        v = _random((batch, q_len, kv_heads, head_dim), 40 + step, dtype)
        expected = ll.sdpa_with_kv_cache(
            q, k, v, key_cache, value_cache, start_pos, q_len, None, 0.0, True, None
        )
        actual = torch.empty(0, dtype=dtype)
        sdpa_with_kv_cache(q, k, v, ours_k, ours_v, start_pos, q_len, None, 0.0, True, None, actual)
        assert torch.equal(ours_k, key_cache) and torch.equal(ours_v, value_cache)
        if dtype == torch.float32:
            assert_matches(actual, expected)
        else:
            _assert_close_to_scale(actual, expected)


def test_update_cache_matches_executorch():
    cache = _random((2, 10, 3, 4), 13)
    ours = cache.clone()
    placeholder = torch.empty(1)
    for start_pos, length in ((0, 4), (4, 1), (9, 1), (5, 5)):
        value = _random((2, length, 3, 4), 14 + start_pos)
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
        update_cache(_random((2, 2, 3, 4), 15), ours, 9, placeholder)


def test_update_cache_with_indices_matches_executorch():
    cache = _random((2, 12, 3, 4), 16)
    ours = cache.clone()
    placeholder = torch.empty(1)
    g = torch.Generator().manual_seed(17)
    for trial in range(4):
        value = _random((2, 5, 3, 4), 18 + trial)
        indices = torch.randint(0, 12, (2, 5), generator=g)
        if trial == 3:
            indices[0] = torch.tensor([1, 7, 1, 7, 1])  # repeated positions: the last write wins
        ll.update_cache_with_indices(value, cache, 0, indices)
        update_cache_with_indices(value, ours, 0, indices, placeholder)
        assert torch.equal(ours, cache), f"trial {trial}"
    with pytest.raises(InvalidArgument):
        update_cache_with_indices(value, ours, 0, torch.full((2, 5), 12), placeholder)


def _per_token_int8(x: torch.Tensor):
    scale, zero_point = qd.choose_qparams_per_token_asymmetric.default(x, torch.int8)
    q = qd.quantize_per_token(x, scale, zero_point, -128, 127, torch.int8)
    return q, zero_point.to(torch.int8), scale.to(torch.float32)


@pytest.mark.parametrize("case", [(1, 1, 4, 4, 8, 16, 5), (1, 6, 4, 2, 16, 20, 0), (2, 3, 2, 2, 8, 40, 10)])
@pytest.mark.parametrize("is_causal", [True, False])
def test_custom_quantized_sdpa_matches_executorch(case, is_causal):
    batch, q_len, heads, kv_heads, head_dim, cache_len, start_pos = case
    q, qz, qs = _per_token_int8(_random((batch, q_len, heads, head_dim), 21))
    k, kz, ks = _per_token_int8(_random((batch, cache_len, kv_heads, head_dim), 22))
    v, vz, vs = _per_token_int8(_random((batch, cache_len, kv_heads, head_dim), 23))
    params = (qz, qs, kz, ks, vz, vs)
    expected = ll.custom_quantized_sdpa(q, k, v, start_pos, None, 0.0, is_causal, None, *params, False)
    actual = torch.empty(0)
    custom_quantized_sdpa(q, k, v, start_pos, None, 0.0, is_causal, None, *params, False, actual)
    assert_matches(actual, expected)


def test_custom_quantized_sdpa_with_sequence_at_dim_2_matches_executorch():
    q, qz, qs = _per_token_int8(_random((1, 4, 3, 8), 24))  # [B, H, S, D]
    k, kz, ks = _per_token_int8(_random((1, 4, 12, 8), 25))
    v, vz, vs = _per_token_int8(_random((1, 4, 12, 8), 26))
    expected = ll.custom_quantized_sdpa(q, k, v, 2, None, 0.0, True, None, qz, qs, kz, ks, vz, vs, True)
    actual = torch.empty(0)
    custom_quantized_sdpa(q, k, v, 2, None, 0.0, True, None, qz, qs, kz, ks, vz, vs, True, actual)
    assert_matches(actual, expected)
    # A float query takes the float path, which counts its tokens along dim 1 even in this layout.
    qf, kf, vf = _random((1, 4, 3, 8), 27), _random((1, 4, 12, 8), 28), _random((1, 4, 12, 8), 29)
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
    q = _random((batch, heads, steps, k_dim), 27)
    k = _random((batch, kv_heads, steps, k_dim), 28) * 0.3
    v = _random((batch, kv_heads, steps, v_dim), 29)
    g = torch.Generator().manual_seed(30)
    decay_shape = (batch, kv_heads, steps) if scalar else (batch, kv_heads, steps, k_dim)
    decay = torch.rand(decay_shape, generator=g) * 0.5 + 0.5
    beta = torch.rand(batch, kv_heads, steps, generator=g)
    state = _random((batch, kv_heads, k_dim, v_dim), 31)
    expected_out, expected_state = ll.gated_delta_rule(q, k, v, decay, beta, state)
    out, final_state = torch.empty(0), torch.empty(0)
    gated_delta_rule(q, k, v, decay, beta, state, out, final_state)
    assert_matches([out, final_state], [expected_out, expected_state])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("size", [1, 2, 8, 64, 1024, 28, 56, 28 * 8, 28 * 64])
def test_fast_hadamard_transform_matches_executorch(dtype, size):
    x = (_random((5, size), 32) * 3).to(dtype)
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
    x = _random((3, 5), 33)
    out = torch.empty(0)
    fallback(x, out)
    assert torch.equal(out, x)


def test_registry_binds_every_operator_by_arity():
    registry = default_registry()
    for _, text in llm.KERNELS:
        schema = torch._C.parse_schema(text)
        nargs = len(schema.arguments)
        factory = registry.lookup(f"{schema.name}.{schema.overload_name}")
        assert factory(nargs + 1).positional == tuple(range(nargs))
        with pytest.raises(InvalidProgram):
            factory(nargs + 2)


# -- programs on ExecuTorch's runtime ------------------------------------------------


def _exported(key: str, build, ops: set[str]):
    exported = export_program(key, build)
    names = {f"{op}.{overload}" for op, overload in ProgramFile(exported.pte).plan("forward").operators}
    missing = ops - names
    assert not missing, f"{key}: the program lacks {sorted(missing)}; it has {sorted(names)}"
    return exported


def _stateful_pair(exported):
    ours = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    theirs = reference_module(exported.pte)
    return ours, theirs


def _call_both(ours, theirs, inputs, compare=assert_matches):
    actual = ours.execute([x.clone() for x in inputs])
    expected = list(theirs.run_method("forward", [x.clone() for x in inputs]))
    compare(actual, expected)


_MAX_SEQ = 32
_HEADS, _KV_HEADS, _HEAD_DIM = 4, 2, 8


class _CachedAttention(torch.nn.Module):
    """ExecuTorch's custom KV cache and SDPA, as its Llama export arranges them."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        shape = (1, _MAX_SEQ, _KV_HEADS, _HEAD_DIM)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype))

    def forward(self, q, k, v, input_pos):
        start_pos = input_pos[0].item()
        torch.ops.llama.update_cache(k, self.k_cache, start_pos)
        torch.ops.llama.update_cache(v, self.v_cache, start_pos)
        return torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, start_pos, None, 0.0, True)


def _attention_inputs(q_len: int, start_pos: int, seed: int, dtype=torch.float32):
    return (
        _random((1, q_len, _HEADS, _HEAD_DIM), seed, dtype),
        _random((1, q_len, _KV_HEADS, _HEAD_DIM), seed + 1, dtype),
        _random((1, q_len, _KV_HEADS, _HEAD_DIM), seed + 2, dtype),
        torch.tensor([start_pos]),
    )


def _seq_dynamic():
    seq = torch.export.Dim("seq", min=1, max=_MAX_SEQ - 1)
    return ({1: seq}, {1: seq}, {1: seq}, None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cached_attention_program_matches_executorch_call_by_call(dtype):
    name = str(dtype).split(".")[-1]
    exported = _exported(
        f"llm-cached-attention-{name}-v1",
        lambda: ExportSpec(_CachedAttention(dtype), _attention_inputs(4, 0, 0, dtype),
                           dynamic_shapes=_seq_dynamic()),
        {"llama::update_cache.out", "llama::custom_sdpa.out"},
    )
    ours, theirs = _stateful_pair(exported)

    def compare(actual, expected):
        if dtype == torch.float32:
            assert_matches(actual, expected)
            return
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _assert_close_to_scale(a, e)

    position = 0
    for step, q_len in enumerate((5, 1, 1, 3, 1)):  # a prefill, then decoding
        _call_both(ours, theirs, _attention_inputs(q_len, position, 100 + 10 * step, dtype), compare)
        position += q_len


class _FusedCacheAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        shape = (1, _MAX_SEQ, _KV_HEADS, _HEAD_DIM)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(self, q, k, v, input_pos):
        start_pos = input_pos[0].item()
        torch._check_is_size(start_pos)
        torch._check(start_pos < _MAX_SEQ)
        return torch.ops.llama.sdpa_with_kv_cache(
            q, k, v, self.k_cache, self.v_cache, start_pos, q.size(1), None, 0.0, True
        ) * 1.0


def test_sdpa_with_kv_cache_program_matches_executorch_call_by_call():
    exported = _exported(
        "llm-sdpa-with-kv-cache-v1",
        lambda: ExportSpec(_FusedCacheAttention(), _attention_inputs(4, 0, 0), dynamic_shapes=_seq_dynamic()),
        {"llama::sdpa_with_kv_cache.out"},
    )
    ours, theirs = _stateful_pair(exported)
    position = 0
    for step, q_len in enumerate((4, 1, 1, 2)):
        _call_both(ours, theirs, _attention_inputs(q_len, position, 200 + 10 * step))
        position += q_len


class _IndexedCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, _MAX_SEQ, _KV_HEADS, _HEAD_DIM))

    def forward(self, value, indices):
        torch.ops.llama.update_cache_with_indices(value, self.cache, 0, indices)
        return self.cache * 1.0


def test_update_cache_with_indices_program_matches_executorch_call_by_call():
    seq = torch.export.Dim("seq", min=1, max=_MAX_SEQ - 1)
    exported = _exported(
        "llm-indexed-cache-v1",
        lambda: ExportSpec(_IndexedCache(),
                           (_random((1, 3, _KV_HEADS, _HEAD_DIM), 0), torch.tensor([[0, 1, 2]])),
                           dynamic_shapes=({1: seq}, {1: seq})),
        {"llama::update_cache_with_indices.out"},
    )
    ours, theirs = _stateful_pair(exported)
    for step, positions in enumerate(([4, 9, 2], [30], [1, 2, 3, 4, 5], [9])):
        value = _random((1, len(positions), _KV_HEADS, _HEAD_DIM), 300 + step)
        _call_both(ours, theirs, (value, torch.tensor([positions])))


class _QuantizedAttention(torch.nn.Module):
    def forward(self, q, k, v, k_zero_points, k_scales, v_zero_points, v_scales, input_pos):
        start_pos = input_pos[0].item()
        torch._check_is_size(start_pos)
        torch._check(start_pos < k.size(1))
        scale, zero_point = qd.choose_qparams_per_token_asymmetric.default(q, torch.int8)
        q8 = qd.quantize_per_token(q, scale, zero_point, -128, 127, torch.int8)
        return torch.ops.llama.custom_quantized_sdpa(
            q8, k, v, start_pos, None, 0.0, True, None, zero_point.to(torch.int8), scale.to(torch.float32),
            k_zero_points, k_scales, v_zero_points, v_scales,
        )


def test_custom_quantized_sdpa_program_matches_executorch():
    def inputs(q_len, start_pos, seed):
        k, kz, ks = _per_token_int8(_random((1, _MAX_SEQ, _KV_HEADS, _HEAD_DIM), seed))
        v, vz, vs = _per_token_int8(_random((1, _MAX_SEQ, _KV_HEADS, _HEAD_DIM), seed + 1))
        q = _random((1, q_len, _HEADS, _HEAD_DIM), seed + 2)
        return (q, k, v, kz, ks, vz, vs, torch.tensor([start_pos]))

    seq = torch.export.Dim("seq", min=1, max=_MAX_SEQ - 1)
    exported = _exported(
        "llm-quantized-sdpa-v1",
        lambda: ExportSpec(_QuantizedAttention(), inputs(3, 0, 0),
                           dynamic_shapes=({1: seq}, None, None, None, None, None, None, None)),
        {"llama::custom_quantized_sdpa.out", "quantized_decomposed::quantize_per_token.out",
         "quantized_decomposed::choose_qparams_per_token_asymmetric.out"},
    )
    ours, theirs = _stateful_pair(exported)
    for step, (q_len, start_pos) in enumerate(((3, 0), (1, 3), (6, 10), (1, 30))):
        _call_both(ours, theirs, inputs(q_len, start_pos, 400 + 10 * step))


class _GatedDelta(torch.nn.Module):
    def forward(self, q, k, v, decay, beta, state):
        return torch.ops.llama.gated_delta_rule(q, k, v, decay, beta, state)


def test_gated_delta_rule_program_matches_executorch():
    def inputs(steps, seed):
        g = torch.Generator().manual_seed(seed)
        return (_random((1, 4, steps, 8), seed), _random((1, 2, steps, 8), seed + 1) * 0.3,
                _random((1, 2, steps, 6), seed + 2), torch.rand(1, 2, steps, 8, generator=g) * 0.5 + 0.5,
                torch.rand(1, 2, steps, generator=g), _random((1, 2, 8, 6), seed + 3))

    steps = torch.export.Dim("steps", min=1, max=96)
    exported = _exported(
        "llm-gated-delta-v1",
        lambda: ExportSpec(_GatedDelta(), inputs(5, 0),
                           dynamic_shapes=({2: steps}, {2: steps}, {2: steps}, {2: steps}, {2: steps}, None)),
        {"llama::gated_delta_rule.out"},
    )
    ours, theirs = _stateful_pair(exported)
    for step, length in enumerate((5, 1, 80)):
        _call_both(ours, theirs, inputs(length, 500 + 10 * step))


class _SmallOps(torch.nn.Module):
    def forward(self, x, image):
        return (torch.ops.llama.fast_hadamard_transform(x),
                torch.ops.llama.fast_hadamard_transform(x[:, :28] * 2.0),
                torch.ops.preprocess.tile_crop(image, 4))


def test_hadamard_and_tile_crop_program_matches_executorch():
    # tile_crop's output is planned for at most four tiles.
    exported = _exported(
        "llm-small-ops-v2",
        lambda: ExportSpec(_SmallOps(), (_random((3, 64), 0), _random((3, 8, 8), 1))),
        {"llama::fast_hadamard_transform.out", "preprocess::tile_crop.out"},
    )
    for seed in (600, 610):
        inputs = (_random((3, 64), seed), _random((3, 8, 8), seed + 1))
        method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
        assert_matches(method.execute(list(inputs)), run_reference(exported.pte, list(inputs)))


class _MaskedAttention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return (torch.ops.llama.custom_sdpa(q, k, v, 0, mask, 0.0, False),
                torch.ops.llama.custom_sdpa(q, k, v, 3, None, 0.0, False, 0.25))


def test_custom_sdpa_with_mask_and_scale_program_matches_executorch():
    def inputs(seed):
        mask = torch.zeros(4, 12)
        mask[:, 9:] = -math.inf
        mask[1, 2] = -math.inf
        return (_random((1, 4, _HEADS, _HEAD_DIM), seed), _random((1, 12, _KV_HEADS, _HEAD_DIM), seed + 1),
                _random((1, 12, _KV_HEADS, _HEAD_DIM), seed + 2), mask + _random((4, 12), seed + 3))

    exported = _exported(
        "llm-masked-sdpa-v1", lambda: ExportSpec(_MaskedAttention(), inputs(0)), {"llama::custom_sdpa.out"},
    )
    for seed in (700, 710):
        method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
        assert_matches(method.execute(list(inputs(seed))), run_reference(exported.pte, list(inputs(seed))))
