"""A residual add and the RMSNorm of its sum as one call (executor/load/fuse/add_rms_norm.py,
kernels.fused.AddRmsNormInto): the same bits as the two calls, natively and on PyTorch's path."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.kernels import fused as kernels

NAME = "pterun::add_rms_norm"


def _fused_kernels(method: pterun.Method) -> list[kernels.AddRmsNormInto]:
    return [s.binding.fn for s in method.steps if getattr(s, "name", None) == NAME]


def _calls() -> list[tuple[torch.Tensor, torch.Tensor]]:
    tokens = torch.tensor([[3, 17, 25, 9, 41, 7]])
    return [(tokens, torch.tensor([0]))] + [(tokens[:, i:i + 1] + 1, torch.tensor([6 + i])) for i in range(4)]


@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
def test_each_residual_add_before_a_norm_is_fused_bit_for_bit(native, monkeypatch):
    """ExecuTorch's 8da4w Llama: every residual add that a norm reads next (each layer's two, but the last layer's
    second, which the output's selection reads) is fused with it, and the method computes the unfused one's bits,
    on a prompt and on decode steps."""
    from tests.support.llm_programs import llama_args, llama_program

    program = llama_program("xnnpack-8da4w")
    fused = pterun.Runtime.get().load_program(program.pte).load_method("forward")
    plain = pterun.Runtime.get().load_program(program.pte, fuse=False).load_method("forward")
    found = _fused_kernels(fused)
    assert len(found) == 2 * llama_args()["n_layers"] - 1, "the premise: the chains found"
    assert "pterun::add_rms_norm (aten::add.out, pterun::rms_norm)" in fused.source
    if not native:  # no native RMSNorm order matched PyTorch's: torch.add and RmsNormInto's torch steps
        monkeypatch.setattr(kernels, "_rms_norm_lanes", lambda: 0)
    for call in _calls():
        assert torch.equal(fused.execute(list(call))[0], plain.execute(list(call))[0])
    assert all((k._native is not None) == native for k in found), "the premise: the way it ran"


def test_the_sum_and_the_norm_are_the_two_calls_bits_where_the_plan_shares_bytes():
    """The native call against torch.add and RmsNormInto, for outs over an operand's bytes (the exporter's plan
    gives the norm the bytes of the block's result it has just added) and for the sum over an operand, over
    shapes that change from call to call."""
    if kernels.native.kernels is None or not kernels._rms_norm_lanes():
        pytest.skip("the native RMSNorm does not run here")
    torch.manual_seed(0)
    n = 96
    for rows in (1, 3, 1, 5):
        arena = torch.randn(4 * rows * n)
        a, b = arena[:rows * n].view(1, rows, n), arena[rows * n:2 * rows * n].view(1, rows, n)
        weight = torch.randn(n)
        for total, out in ((arena[2 * rows * n:3 * rows * n], arena[rows * n:2 * rows * n]),  # out over b
                           (arena[:rows * n], arena[3 * rows * n:])):  # the sum over a
            expected_total = torch.add(a, b)
            expected = kernels.RmsNormInto()(expected_total, weight, 1e-5, out=torch.empty(0))
            kernel = kernels.AddRmsNormInto()
            kernel(a.clone(), b.clone(), weight, 1e-5, total=torch.empty(0), out=torch.empty(0))  # another call first
            saved = arena.clone()
            got = kernel(a, b, weight, 1e-5, total=total, out=out)
            assert kernel._native is not None, "the premise: the native call"
            assert torch.equal(total.view(1, rows, n), expected_total) and torch.equal(got.view(1, rows, n), expected)
            arena.copy_(saved)
