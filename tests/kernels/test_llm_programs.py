"""llama:: (and preprocess::tile_crop) kernels in exported programs, on pterun and on ExecuTorch's runtime.

Programs that keep a KV cache are called several times (a prefill, then
decoding) and compared call by call. Reduced-precision attention is compared
as tests/kernels/llm.py says.
"""

from __future__ import annotations

import math

import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 - llama:: ops, eager and in the runtime
import pytest
import torch
from executorch.extension.llm.custom_ops import op_tile_crop_aot  # noqa: F401 - preprocess::tile_crop

import pterun
from tests.kernels.llm import assert_close_to_scale, per_token_int8, qd, random
from tests.support.compare import assert_matches
from tests.support.exporting import ExportSpec
from tests.support.oracle import reference_module, run_reference
from tests.support.premises import export_calling


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
        random((1, q_len, _HEADS, _HEAD_DIM), seed, dtype),
        random((1, q_len, _KV_HEADS, _HEAD_DIM), seed + 1, dtype),
        random((1, q_len, _KV_HEADS, _HEAD_DIM), seed + 2, dtype),
        torch.tensor([start_pos]),
    )


def _seq_dynamic():
    seq = torch.export.Dim("seq", min=1, max=_MAX_SEQ - 1)
    return ({1: seq}, {1: seq}, {1: seq}, None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cached_attention_program_matches_executorch_call_by_call(dtype):
    name = str(dtype).split(".")[-1]
    exported = export_calling(
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
            assert_close_to_scale(a, e)

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
    exported = export_calling(
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
    exported = export_calling(
        "llm-indexed-cache-v1",
        lambda: ExportSpec(_IndexedCache(),
                           (random((1, 3, _KV_HEADS, _HEAD_DIM), 0), torch.tensor([[0, 1, 2]])),
                           dynamic_shapes=({1: seq}, {1: seq})),
        {"llama::update_cache_with_indices.out"},
    )
    ours, theirs = _stateful_pair(exported)
    for step, positions in enumerate(([4, 9, 2], [30], [1, 2, 3, 4, 5], [9])):
        value = random((1, len(positions), _KV_HEADS, _HEAD_DIM), 300 + step)
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
        k, kz, ks = per_token_int8(random((1, _MAX_SEQ, _KV_HEADS, _HEAD_DIM), seed))
        v, vz, vs = per_token_int8(random((1, _MAX_SEQ, _KV_HEADS, _HEAD_DIM), seed + 1))
        q = random((1, q_len, _HEADS, _HEAD_DIM), seed + 2)
        return (q, k, v, kz, ks, vz, vs, torch.tensor([start_pos]))

    seq = torch.export.Dim("seq", min=1, max=_MAX_SEQ - 1)
    exported = export_calling(
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
        return (random((1, 4, steps, 8), seed), random((1, 2, steps, 8), seed + 1) * 0.3,
                random((1, 2, steps, 6), seed + 2), torch.rand(1, 2, steps, 8, generator=g) * 0.5 + 0.5,
                torch.rand(1, 2, steps, generator=g), random((1, 2, 8, 6), seed + 3))

    steps = torch.export.Dim("steps", min=1, max=96)
    exported = export_calling(
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
    exported = export_calling(
        "llm-small-ops-v2",
        lambda: ExportSpec(_SmallOps(), (random((3, 64), 0), random((3, 8, 8), 1))),
        {"llama::fast_hadamard_transform.out", "preprocess::tile_crop.out"},
    )
    for seed in (600, 610):
        inputs = (random((3, 64), seed), random((3, 8, 8), seed + 1))
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
        return (random((1, 4, _HEADS, _HEAD_DIM), seed), random((1, 12, _KV_HEADS, _HEAD_DIM), seed + 1),
                random((1, 12, _KV_HEADS, _HEAD_DIM), seed + 2), mask + random((4, 12), seed + 3))

    exported = export_calling(
        "llm-masked-sdpa-v1", lambda: ExportSpec(_MaskedAttention(), inputs(0)), {"llama::custom_sdpa.out"},
    )
    for seed in (700, 710):
        method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
        assert_matches(method.execute(list(inputs(seed))), run_reference(exported.pte, list(inputs(seed))))

