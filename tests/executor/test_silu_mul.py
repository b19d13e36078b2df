"""A SwiGLU's SiLU-product between delegated products as one call (executor/load/fuse/silu_mul.py,
kernels.fused.SiluMulInto): the three steps' torch calls, their bits."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.kernels import fused as kernels


@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
def test_each_layers_silu_product_is_one_call_bit_for_bit(native, monkeypatch):
    """ExecuTorch's 8da4w Llama: each layer's sigmoid and two products, between the XNNPACK delegates, are one call
    computing the unfused method's bits on a prompt and on decode steps, natively and in torch's three calls."""
    from tests.support.llm_programs import llama_args, llama_program

    program = llama_program("xnnpack-8da4w")
    fused = pterun.Runtime.get().load_program(program.pte).load_method("forward")
    plain = pterun.Runtime.get().load_program(program.pte, fuse=False).load_method("forward")
    names = [s.name for s in fused.steps if getattr(s, "replaces", ())]
    assert names.count("pterun::silu_mul") == llama_args()["n_layers"], "the premise: the chains found"
    assert "pterun::silu_mul (aten::sigmoid.out, aten::mul.out x2)" in fused.source
    if native:
        assert kernels._sigmoid_lanes(), "the premise: the native sigmoid is PyTorch's here"
    else:
        monkeypatch.setattr(kernels, "_sigmoid_lanes", lambda: 0)
    tokens = torch.tensor([[3, 17, 25, 9, 41, 7]])
    for call in [(tokens, torch.tensor([0]))] + [(tokens[:, i:i + 1] + 1, torch.tensor([6 + i])) for i in range(4)]:
        assert torch.equal(fused.execute(list(call))[0], plain.execute(list(call))[0])
    found = [s.binding.fn for s in fused.steps if getattr(s, "name", None) == "pterun::silu_mul"]
    assert all((k._native is not None) == native for k in found), "the premise: the way it ran"


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


def test_the_native_sigmoid_is_pytorchs_over_every_range():
    """The native steps against PyTorch's over values of every magnitude (exp's edges at -104 and 100, its overflow
    and underflow, the split between PyTorch's vector and scalar paths at each length), bit for bit but for the sign
    of a NaN; an out over bytes a later step reads is left to torch's calls."""
    lanes = kernels._sigmoid_lanes()
    if not lanes:
        pytest.skip("the native SiLU-product does not run here")
    generator = torch.Generator().manual_seed(1)
    bits = torch.randint(-2**31, 2**31 - 1, (1 << 20,), dtype=torch.int32, generator=generator)
    gate = torch.cat([bits.view(torch.float32), torch.linspace(-120, 120, 100_003)])
    up = torch.randn(gate.numel(), generator=generator)
    for n in (gate.numel(), 2 * lanes * 64 + 7, 2 * lanes - 1):
        g, u = gate[:n].clone(), up[:n].clone()
        sig, prod, out = torch.empty(n), torch.empty(n), torch.empty(n)
        kernel = kernels.SiluMulInto()
        kernel(g, u, sig=sig, prod=prod, out=out)
        assert kernel._native is not None, "the premise: the native call"
        expected = torch.sigmoid(g)
        assert kernels._same_bits(sig, expected) and kernels._same_bits(out, torch.mul(torch.mul(g, expected), u))
    g, u = gate[:64].clone(), up[:64].clone()
    kernel = kernels.SiluMulInto()
    expected = torch.mul(torch.mul(g, torch.sigmoid(g)), u)
    assert torch.equal(kernel(g, u, sig=u, prod=torch.empty(64), out=torch.empty(64)), torch.mul(torch.mul(
        g, torch.sigmoid(g)), torch.sigmoid(g))), "the steps: the sigmoid written over up, which the last step reads"
    assert kernel._native is None and not torch.equal(expected, torch.mul(torch.mul(g, torch.sigmoid(g)),
                                                                         torch.sigmoid(g)))


def test_the_probe_finds_where_pytorch_leaves_sleefs_exp_for_libms():
    """PyTorch's sigmoid takes SLEEF's exp over whole pairs of vectors and libm's past them; on values the two round
    apart, at a length where whole pairs of 8 and of 16 end apart, only the width the probe found gives its bits."""
    lanes = kernels._sigmoid_lanes()
    if not lanes:
        pytest.skip("the native SiLU-product does not run here")
    kernel = kernels.native.kernels

    def sigmoid(g: torch.Tensor, width: int) -> torch.Tensor:
        n = g.numel()
        sig, prod, out, up = torch.empty(n), torch.empty(n), torch.empty(n), torch.ones(n)
        kernel.silu_mul(g.data_ptr(), up.data_ptr(), sig.data_ptr(), prod.data_ptr(), out.data_ptr(), n, width)
        return sig

    g = torch.randn(1 << 16, generator=torch.Generator().manual_seed(2)) * 20
    rounded_apart = g[sigmoid(g, 16).view(torch.int32) != sigmoid(g, 0).view(torch.int32)][:61].clone()
    assert rounded_apart.numel() == 61, "the premise: values the two exps round apart"
    for width in (16, 8):
        assert torch.equal(sigmoid(rounded_apart, width), torch.sigmoid(rounded_apart)) == (width == lanes)
