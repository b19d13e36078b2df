"""A planned CPU input is copied into its memory on each call (executor/call/binders.py): byte for byte where it is
a plain contiguous tensor of the shape the memory has (the usual call, a few hundred nanoseconds), through torch's
``copy_`` otherwise, after the checks in full where anything about it is new. Either way the method reads the
caller's values."""

from __future__ import annotations

import torch

import pterun
from pterun import native
from tests.executor.programs import dynamic_add_mul, embed


def _cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(6, 3, generator=g)
    y = torch.randn(2, 3, generator=g)
    return [
        ("contiguous", torch.randn(2, 3, generator=g), y),
        ("transposed", torch.randn(3, 2, generator=g).t(), y),
        ("broadcast view", torch.randn(1, 3, generator=g).expand(2, 3), y),
        ("offset into a larger tensor", wide[3:5], y),
        ("more rows", torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)),
        ("one row", torch.randn(1, 3, generator=g), torch.randn(1, 3, generator=g)),
        ("requiring grad", torch.randn(2, 3, generator=g, requires_grad=True), y),
        ("a parameter", torch.nn.Parameter(torch.randn(2, 3, generator=g)), y),
        ("contiguous again", torch.randn(2, 3, generator=g), y),
    ]


def test_inputs_of_every_layout_and_size_reach_the_method():
    assert native.kernels is not None, "premise: the byte copy is built (CI builds it)"
    method = pterun.Runtime.get().load_program(dynamic_add_mul().pte).load_method("forward")
    memory = method.value(method.plan.inputs[0])
    assert isinstance(memory, torch.Tensor), "premise: the input is planned, copied into its memory"
    for what, x, y in _cases():
        total, product = method.execute([x, y])
        with torch.no_grad():
            assert torch.equal(total, x + y) and torch.equal(product, x * y), what
            assert torch.equal(memory, x), f"{what}: the method's memory holds the caller's values"
        assert not total.requires_grad, what


def test_integer_inputs_are_copied_as_they_are():
    method = pterun.Runtime.get().load_program(embed().pte).load_method("forward")
    table = method.value(method.plan.inputs[0])
    cases = (torch.tensor([[1, 2, 3]]), torch.tensor([[7, 0, 5], [1, 1, 1]])[:1], torch.tensor([[4], [2], [6]]).t())
    for tokens in cases:
        (looked_up,) = method.execute([tokens])
        assert torch.equal(table, tokens), tokens
        assert looked_up.shape == (1, 3, 4)
