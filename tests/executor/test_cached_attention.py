"""A layer's cache writes, rotary embeddings and attention as one call (executor/load/fuse/cached_attention.py,
kernels/llm/cached_attention.py): the same bits as the steps, natively and on PyTorch's path."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import pterun
from pterun import native
from pterun.errors import InvalidArgument
from pterun.kernels.fused import RotaryInto
from pterun.kernels.llm.attention import custom_sdpa
from pterun.kernels.llm.cache import update_cache
from pterun.kernels.llm.cached_attention import CachedAttention

NAME = "pterun::cached_attention"
_REPLACED = ("pterun::cached_attention (executorch_prim::et_view.default x5, llama::update_cache.out x2, "
             "pterun::rotary x2, llama::custom_sdpa.out)")


def _kernels(method: pterun.Method) -> list[CachedAttention]:
    return [s.binding.fn for s in method.steps if getattr(s, "name", None) == NAME]


def _calls() -> list[tuple[torch.Tensor, torch.Tensor]]:
    tokens = torch.tensor([[3, 17, 25, 9, 41, 7]])
    return [(tokens, torch.tensor([0]))] + [(tokens[:, i:i + 1] + 1, torch.tensor([6 + i])) for i in range(5)]


def _llama(variant: str):
    from tests.support.llm_programs import llama_args, llama_program

    program = llama_program(variant)
    fused = pterun.Runtime.get().load_program(program.pte).load_method("forward")
    plain = pterun.Runtime.get().load_program(program.pte, fuse=False).load_method("forward")
    return fused, plain, llama_args()["n_layers"]


@pytest.mark.parametrize("variant", ["xnnpack-8da4w"])
def test_each_layers_attention_over_its_cache_is_one_native_call_bit_for_bit(variant):
    """ExecuTorch's Llama with a dynamic length (export_llama): in each layer ten steps become one call, which takes
    the native path for a prompt and for each decode step after it, and computes the steps' bits (the unfused
    method's: every step as the file has it), the caches included."""
    fused, plain, layers = _llama(variant)
    kernels = _kernels(fused)
    # The premise: the chain of every layer, fused, named for the steps it replaced.
    assert len(kernels) == layers and _REPLACED in fused.source
    assert native.kernels is not None, "the premise: pterun's native kernels are built"
    for call in _calls():
        assert torch.equal(fused.execute(list(call))[0], plain.execute(list(call))[0])
        assert all(k._prepared is not None and k._prepared.call is not None for k in kernels), "the native path"
    # The caches hold the same values: one more step over them agrees too.
    call = (torch.tensor([[5]]), torch.tensor([11]))
    assert torch.equal(fused.execute(list(call))[0], plain.execute(list(call))[0])


def test_without_the_native_kernels_the_steps_run_one_by_one(monkeypatch):
    """PyTorch's path: the same kernels as the steps, called in turn, with the same results."""
    from pterun.kernels.llm import cached_attention

    fused, plain, _ = _llama("xnnpack-8da4w")
    monkeypatch.setattr(cached_attention, "native", SimpleNamespace(kernels=None))
    for call in _calls():
        assert torch.equal(fused.execute(list(call))[0], plain.execute(list(call))[0])
    assert all(k._prepared is None for k in _kernels(fused)), "the premise: no native call was prepared"


def test_a_call_past_the_cache_fails_as_the_steps_fail_and_the_method_goes_on():
    """A position past the cache fails as the unfused method fails (here where the rotary tables are sliced, before
    the fused call), and the method goes on from where it was."""
    fused, plain, _ = _llama("xnnpack-8da4w")
    for call in _calls()[:2]:
        fused.execute(list(call))
        plain.execute(list(call))
    errors = []
    for method in (fused, plain):
        with pytest.raises(pterun.PteError) as caught:
            method.execute([torch.tensor([[4]]), torch.tensor([10_000])])
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    call = (torch.tensor([[5]]), torch.tensor([7]))
    assert torch.equal(fused.execute(list(call))[0], plain.execute(list(call))[0])


def test_the_native_call_is_prepared_again_for_other_tensors():
    """A call with other sizes, other tables or other tensors than the call before prepares the native call for
    them, and each gives the steps' result."""
    torch.manual_seed(0)
    batch, cache_len, heads, kv_heads, dim = 1, 16, 4, 2, 8

    def run(seq, pos, tables_offset=0):
        values, queries, keys = (torch.randn(batch, seq, h * dim) for h in (kv_heads, heads, kv_heads))
        table = torch.randn(32, dim // 2)
        cos, sin = (table[tables_offset:tables_offset + seq].view(1, seq, 1, dim // 2) + d for d in (0, 1))
        caches = [torch.randn(batch, cache_len, kv_heads, dim) for _ in range(2)]
        outs = [torch.empty(0) for _ in range(3)]
        sizes = ([batch, seq, kv_heads, dim], [batch, seq, heads, dim // 2, 2], [batch, seq, kv_heads, dim // 2, 2],
                 [batch, seq, heads, dim], [batch, seq, kv_heads, dim])
        return (values, queries, keys, cos, sin, *caches, pos, pos, pos, *sizes, None, 0.0, True, None), outs

    def steps(args, v_out, k_out, q_rot, k_rot, out):
        values, queries, keys, cos, sin, key_cache, value_cache, v_pos, k_pos, start_pos, *sizes = args[:15]
        update_cache(values.view(sizes[0]), value_cache, v_pos, v_out)
        RotaryInto()(queries.view(sizes[1]), cos, sin, out=q_rot)
        RotaryInto()(keys.view(sizes[2]), cos, sin, out=k_rot)
        update_cache(k_rot.view(sizes[4]), key_cache, k_pos, k_out)
        return custom_sdpa(q_rot.view(sizes[3]), key_cache, value_cache, start_pos, *args[15:], out)

    kernel = CachedAttention()
    dummy = [torch.empty(1), torch.empty(1)]
    for seq, pos, offset in ((5, 0, 0), (1, 5, 5), (1, 6, 6), (3, 7, 2)):
        args, outs = run(seq, pos, offset)
        twin_args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        twin_outs = [torch.empty(0) for _ in range(3)]
        got = kernel(*args, v_out=dummy[0], k_out=dummy[1], q_rot=outs[0], k_rot=outs[1], out=outs[2])
        assert kernel._prepared is not None and kernel._prepared.call is not None, "the premise: the native call"
        expected = steps(twin_args, dummy[0], dummy[1], *twin_outs)
        assert torch.equal(got, expected)
        assert torch.equal(args[5], twin_args[5]) and torch.equal(args[6], twin_args[6]), "the caches"
        assert all(torch.equal(a, b) for a, b in zip(outs, twin_outs))
    args, outs = run(3, 14)
    before = [t.clone() for t in args[5:7]]
    with pytest.raises(InvalidArgument, match=r"update_cache: positions \[14, 17\) do not fit a cache of 16"):
        kernel(*args, v_out=dummy[0], k_out=dummy[1], q_rot=outs[0], k_rot=outs[1], out=outs[2])
    assert kernel._prepared is not None and kernel._prepared.call is not None, "the premise: the native call refused"
    assert all(torch.equal(a, b) for a, b in zip(before, args[5:7])), "the caches untouched"
