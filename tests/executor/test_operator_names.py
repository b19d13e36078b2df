"""Operator names from a file are looked up in torch's operator registry, never as Python attributes.

``torch.ops.aten.add`` is a Python object: walking a program's operator name
down it with ``getattr`` reaches whatever attribute the name spells
(``aten::add.__class__``, ``aten::add._op``). Names are resolved against the
registry's schemas instead, so a name that is no operator is
``OperatorMissing``, like any other operator pterun has no kernel for.
"""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.errors import OperatorMissing
from pterun.kernels import Functional
from pterun.kernels.aten import functional_of, overload_of, overloads_of, view_of
from tests.format import build

# (operator name, overload) as a program writes them; each spells a Python attribute of torch.ops.
ATTRIBUTE_NAMES = [
    ("aten::__class__", "mro"), ("aten::add", "__class__"), ("aten::add", "_op"), ("aten::add", "overloads"),
    ("aten::add", "__dict__"), ("aten::add", "_schema"), ("aten::add", "op"), ("aten::__getattr__", ""),
    ("aten::__dict__", "out"), ("aten::__init___copy", "out"), ("aten::add", "__init__"), ("aten::name", ""),
]


def _program(op: str, overload: str) -> bytes:
    plan = build.Plan(
        values=[build.Tensor(memory=(1, 0)), ("int", 1), build.Tensor(memory=(1, 8))], inputs=[0], outputs=[2],
        instructions=[("kernel", 0, [0, 0, 1, 2, 2])], operators=[(op, overload)], buffer_sizes=[0, 16],
    )
    return build.program([plan])


@pytest.mark.parametrize("op, overload", ATTRIBUTE_NAMES)
def test_a_name_that_spells_an_attribute_is_a_missing_operator(op, overload):
    program = pterun.Runtime.get().load_program(_program(op, overload))
    with pytest.raises(OperatorMissing) as info:
        program.load_method("forward")
    full = f"{op}.{overload}" if overload else op
    assert info.value.code == 0x14 and f"operator {full}" in str(info.value)
    # The runtime that refused it runs a real operator.
    (out,) = pterun.Runtime.get().load_program(_program("aten::add", "out")).load_method("forward").execute(
        [torch.ones(2)])
    assert torch.equal(out, torch.full((2,), 2.0))


@pytest.mark.parametrize("op, overload", ATTRIBUTE_NAMES)
def test_resolvers_return_none_for_attribute_names(op, overload):
    full = f"{op}.{overload}" if overload else op
    assert overload_of(full) is None
    assert view_of(full) is None
    assert functional_of(full) is None


def test_real_names_resolve():
    """Premise: the resolvers find real operators, dunder-named ones included."""
    assert overload_of("aten::add.out") is torch.ops.aten.add.out
    assert overload_of("aten::__and__.Tensor") is torch.ops.aten.__and__.Tensor
    assert overload_of("aten::add") is torch.ops.aten.add.default
    assert view_of("aten::permute_copy.out") is torch.ops.aten.permute.default
    assert functional_of("aten::add.out") == Functional(torch.ops.aten.add.Tensor, outputs=(3,))
    assert torch.ops.aten.add.out in overloads_of("aten::add")
    assert overloads_of("aten::add.__class__") == []
