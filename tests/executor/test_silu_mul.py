"""A SwiGLU's SiLU-product between delegated products as one call (executor/load/fuse/silu_mul.py,
kernels.fused.SiluMulInto): the three steps' torch calls, their bits."""

from __future__ import annotations

import torch

import pterun
from pterun.kernels import fused as kernels


def test_each_layers_silu_product_is_one_call_bit_for_bit():
    """ExecuTorch's 8da4w Llama: each layer's sigmoid and two products, between the XNNPACK delegates, are one call
    computing the unfused method's bits on a prompt and on decode steps."""
    from tests.support.llm_programs import llama_args, llama_program

    program = llama_program("xnnpack-8da4w")
    fused = pterun.Runtime.get().load_program(program.pte).load_method("forward")
    plain = pterun.Runtime.get().load_program(program.pte, fuse=False).load_method("forward")
    names = [s.name for s in fused.steps if getattr(s, "replaces", ())]
    assert names.count("pterun::silu_mul") == llama_args()["n_layers"], "the premise: the chains found"
    assert "pterun::silu_mul (aten::sigmoid.out, aten::mul.out x2)" in fused.source
    tokens = torch.tensor([[3, 17, 25, 9, 41, 7]])
    for call in [(tokens, torch.tensor([0]))] + [(tokens[:, i:i + 1] + 1, torch.tensor([6 + i])) for i in range(4)]:
        assert torch.equal(fused.execute(list(call))[0], plain.execute(list(call))[0])


def test_the_outs_are_the_steps_whether_the_shape_stays_or_changes():
    """Outs of the operands' shape are written as they are; a new shape (or an up that broadcasts) empties each out
    first and leaves it contiguous, as the executor leaves the steps' outs."""
    torch.manual_seed(0)
    kernel = kernels.SiluMulInto()
    sig, prod, out = torch.empty(0), torch.empty(0), torch.empty(0)
    for gate_shape, up_shape in (((1, 3, 40), (1, 3, 40)), ((1, 3, 40), (1, 3, 40)), ((1, 1, 40), (1, 1, 40)),
                                 ((1, 2, 40), (1, 1, 40))):
        gate, up = torch.randn(gate_shape) * 4, torch.randn(up_shape)
        expected = torch.mul(torch.mul(gate, torch.sigmoid(gate)), up)
        assert torch.equal(kernel(gate, up, sig=sig, prod=prod, out=out), expected)
        assert out.shape == expected.shape and out.is_contiguous() and torch.equal(sig, torch.sigmoid(gate))
