"""A softmax's hidden rows made zeros as one call where the softmax ran in a delegate
(executor/load/fuse/hidden_rows.py, kernels.fused.ZeroHiddenRows): the six steps' values, bit for bit."""

from __future__ import annotations

import math

import torch

import pterun
from pterun.kernels import fused as kernels


def _steps(scores: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """The exporter's six steps, as the method runs them unfused."""
    hidden = torch.logical_not(torch.any(torch.logical_not(torch.eq(scores, -math.inf)), -1, keepdim=True))
    return torch.where(hidden, torch.full_like(probs, 0), probs)


def test_each_layers_hidden_rows_are_one_call_bit_for_bit():
    """A transformers decoder quantized as optimum-executorch quantizes it: its softmax runs in an XNNPACK delegate,
    so attention's fusion leaves the six steps after it; each layer's are one call, with the unfused method's bits
    on a prompt and on decode steps."""
    from tests.support.llm_programs import transformers_program

    pte = transformers_program("qwen2-8da4w").pte
    fused = pterun.Runtime.get().load_program(pte).load_method("forward")
    plain = pterun.Runtime.get().load_program(pte, fuse=False).load_method("forward")
    names = [s.name for s in plain.steps if s is not None and hasattr(s, "name")]
    layers = names.count("aten::any.out")
    assert layers >= 2 and "aten::_softmax.out" not in names, "the premise: the chains, after a delegate's softmax"
    assert [s.name for s in fused.steps if getattr(s, "replaces", ())].count("pterun::zero_hidden_rows") == layers
    tokens = torch.tensor([[3, 17, 25, 9, 41, 7]])
    calls = [(tokens, torch.arange(6))] + [(tokens[:, i:i + 1] + 1, torch.tensor([6 + i])) for i in range(3)]
    for call in calls:
        assert torch.equal(fused.execute(list(call))[0], plain.execute(list(call))[0])


def test_rows_the_mask_hides_are_zeros_and_the_rest_kept_whatever_the_shape():
    """Rows of all -inf scores (and only those: one -inf short, a NaN) give zeros, others the probabilities as they
    are (NaN and -0.0 included); outs of another shape are emptied first and left contiguous."""
    kernel = kernels.ZeroHiddenRows(torch.zeros(()))
    hidden, rows, out = torch.empty(0, dtype=torch.bool), torch.empty(0, dtype=torch.bool), torch.empty(0)
    for shape in ((1, 2, 3, 5), (1, 2, 3, 5), (1, 2, 1, 5), (2, 1, 4, 6)):
        scores = torch.randn(shape)
        scores[..., 0, :] = -math.inf  # hidden
        scores[..., -1, 1:] = -math.inf  # one score short of hidden
        scores[0, 0, 1 % shape[2], 0] = math.nan
        probs = torch.randn(shape)
        probs[..., -1, 0] = -0.0
        probs[..., -1, -1] = math.nan
        got = kernel(scores, probs, hidden=hidden, rows=rows, out=out)
        expected = _steps(scores, probs)
        assert got is out and out.is_contiguous() and out.shape == expected.shape
        assert torch.equal(out.view(torch.int32), expected.view(torch.int32)), shape
        assert torch.equal(rows, torch.eq(scores, -math.inf).all(-1, keepdim=True))
    bf16 = torch.randn(1, 1, 2, 4).bfloat16()
    scores = torch.tensor([[[[-math.inf] * 4, [0.0] * 4]]])
    kernel = kernels.ZeroHiddenRows(torch.zeros((), dtype=torch.bfloat16))
    got = kernel(scores, bf16, hidden=torch.empty(0, dtype=torch.bool), rows=torch.empty(0, dtype=torch.bool),
                 out=torch.empty(0, dtype=torch.bfloat16))
    assert got.dtype == torch.bfloat16 and torch.equal(got, _steps(scores, bf16))
