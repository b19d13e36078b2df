"""Attention over a KV cache on the WebGPU backend, on graphs built in memory as the Vulkan partitioner
lays them out: llama's sdpa_with_kv_cache ([B, S, H, D], the caches graph inputs it updates and returns,
the start position a SymInt read from an input tensor by et_vk.select_as_symint) and et_vk.sdpa."""

from __future__ import annotations

import pytest
import torch

from pterun.errors import DelegateInvalidCompatibility, InvalidArgument
from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.crafted import DTYPES, Craft, run
from tests.support.compare import assert_matches

pytestmark = [needs_adapter]

HQ, HKV, D, CACHE = 6, 2, 8, 16


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _reference(q, k_cache, v_cache, start: int) -> torch.Tensor:
    """Causal attention of q [1, S, HQ, D] over the cache's first start + S positions (GQA: query head h
    reads key head h // (HQ / HKV))."""
    s = q.shape[1]
    keys = k_cache[0, : start + s].double().repeat_interleave(HQ // HKV, dim=1).transpose(0, 1)
    values = v_cache[0, : start + s].double().repeat_interleave(HQ // HKV, dim=1).transpose(0, 1)
    mask = torch.full((s, start + s), float("-inf"), dtype=torch.float64)
    for i in range(s):
        mask[i, : start + i + 1] = 0
    out = torch.nn.functional.scaled_dot_product_attention(q[0].double().transpose(0, 1), keys, values, mask)
    return out.transpose(0, 1).unsqueeze(0).float()


def _decoder(s: int) -> tuple:
    """sdpa_with_kv_cache of s new positions at a start position read from input 0 ([1] int64)."""
    c = Craft()
    pos = c.input((1,), DTYPES[torch.int64])
    q, k, v = c.input((1, s, HQ, D)), c.input((1, s, HKV, D)), c.input((1, s, HKV, D))
    kc, vc = c.input((1, CACHE, HKV, D)), c.input((1, CACHE, HKV, D))
    zero = c.scalar(0)
    start = c.op("et_vk.select_as_symint.default", pos, zero, zero, out="sym")
    y = c.op("sdpa_with_kv_cache.default", q, k, v, kc, vc, start, c.scalar(s), c.scalar(None), c.scalar(0.0),
             c.scalar(True), c.scalar(None), out=(1, s, HQ, D))
    c.output(y, kc, vc)
    return c, c.delegate()


def _step(delegate, start: int, s: int, caches, seed: int):
    q = torch.randn(1, s, HQ, D, generator=_gen(seed))
    k, v = (torch.randn(1, s, HKV, D, generator=_gen(seed + i)) for i in (1, 2))
    out, k_cache, v_cache = run(delegate, [torch.tensor([start]), q, k, v, *caches])
    return q, k, v, out, (k_cache, v_cache)


def test_sdpa_with_kv_cache_writes_the_cache_and_attends_causally():
    _, delegate = _decoder(3)
    caches = (torch.zeros(1, CACHE, HKV, D), torch.zeros(1, CACHE, HKV, D))
    expected = [c.clone() for c in caches]
    for step, start in enumerate((0, 3, 6)):  # one program, the start position changing each call
        q, k, v, out, caches = _step(delegate, start, 3, caches, 10 * step)
        expected[0][0, start : start + 3], expected[1][0, start : start + 3] = k[0], v[0]
        assert torch.equal(caches[0], expected[0]) and torch.equal(caches[1], expected[1])
        assert_matches(out, _reference(q, *expected, start), rtol=1e-5, what=f"step {step}")


def test_a_start_past_the_cache_is_refused_and_the_delegate_still_works():
    _, delegate = _decoder(3)
    caches = (torch.zeros(1, CACHE, HKV, D), torch.zeros(1, CACHE, HKV, D))
    with pytest.raises(InvalidArgument, match=r"positions \[14, 17\) are outside the cache of 16"):
        _step(delegate, 14, 3, caches, 0)
    q, k, v, out, caches = _step(delegate, 2, 3, caches, 1)
    assert_matches(out, _reference(q, *caches, 2), rtol=1e-5)


def test_select_as_symint_reads_only_graph_inputs():
    c = Craft()
    x = c.input((2,), DTYPES[torch.int64])
    doubled = c.op("aten.add.Tensor", x, x, c.scalar(1), out=(2,), dtype=DTYPES[torch.int64])
    zero = c.scalar(0)
    c.op("et_vk.select_as_symint.default", doubled, zero, zero, out="sym")
    c.output(doubled)
    with pytest.raises(DelegateInvalidCompatibility, match="reads the values of tensor .* only a graph input"):
        c.delegate()


@pytest.mark.parametrize("masked", [False, True])
def test_et_vk_sdpa_matches_pytorch(masked):
    q = torch.randn(1, 4, 5, 16, generator=_gen(1))
    k, v = torch.randn(1, 4, 9, 16, generator=_gen(2)), torch.randn(1, 4, 9, 16, generator=_gen(3))
    mask = torch.randn(1, 4, 5, 9, generator=_gen(4)).clamp(-1, 0) if masked else None
    c = Craft()
    qi, ki, vi = c.input(q.shape), c.input(k.shape), c.input(v.shape)
    y = c.op("et_vk.sdpa.default", qi, ki, vi, c.const(mask) if masked else c.scalar(None), c.scalar(None),
             out=tuple(q.shape))
    c.output(y)
    (got,) = run(c.delegate(), [q, k, v])
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                            None if mask is None else mask.double())
    assert_matches(got, want.float(), rtol=1e-5)


def test_update_cache_writes_at_the_start_position():
    c = Craft()
    value, cache = c.input((1, 2, HKV, D)), c.input((1, CACHE, HKV, D))
    placeholder = c.op("update_cache.default", value, cache, c.scalar(5), out=(1,))
    c.output(placeholder, cache)
    new = torch.randn(1, 2, HKV, D, generator=_gen(1))
    _, written = run(c.delegate(), [new, torch.zeros(1, CACHE, HKV, D)])
    expected = torch.zeros(1, CACHE, HKV, D)
    expected[0, 5:7] = new[0]
    assert torch.equal(written, expected)
