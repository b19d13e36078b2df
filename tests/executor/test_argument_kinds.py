"""A call passes values of the kinds its kernel takes, or the method is refused at load.

A corrupted value index can hand a kernel a list where it reads a tensor; the
kernel then failed with whatever Python raised (an AttributeError, reported
as Internal). Kernels state the kinds they take, from their schemas.
"""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.errors import InvalidProgram
from tests.format import build

X = build.Tensor(memory=(1, 0))
OUT = build.Tensor(memory=(1, 8))


def _refused(values, instructions, operators, **plan) -> str:
    kwargs = {"inputs": [0], "outputs": [len(values) - 1], "buffer_sizes": [0, 16], **plan}
    data = build.program([build.Plan(values=values, instructions=instructions, operators=operators, **kwargs)])
    program = pterun.Runtime.get().load_program(data)
    with pytest.raises(InvalidProgram) as info:
        program.load_method("forward")
    assert info.value.code == 0x23
    # The runtime still runs a valid program.
    ok = build.program([build.Plan(values=[X, ("int", 1), OUT], inputs=[0], outputs=[2], buffer_sizes=[0, 16],
                                   instructions=[("kernel", 0, [0, 0, 1, 2, 2])], operators=[("aten::add", "out")])])
    (out,) = pterun.Runtime.get().load_program(ok).load_method("forward").execute([torch.ones(2)])
    assert torch.equal(out, torch.full((2,), 2.0))
    return str(info.value)


def test_a_list_where_a_kernel_reads_a_tensor():
    message = _refused([X, ("int_list", [2]), ("int", 1), OUT], [("kernel", 0, [0, 1, 2, 3, 3])],
                       [("aten::add", "out")])
    assert "instruction 0 (aten::add.out) argument 1 is value 1, of kind int_list; it takes tensor" in message


def test_a_tensor_where_a_kernel_reads_an_int():
    message = _refused([X, OUT], [("kernel", 0, [0, 0, 0, 1, 1])], [("aten::add", "out")])
    assert "argument 2 is value 0, of kind tensor; it takes bool or double or int" in message


def test_an_optional_tensor_may_be_null_and_a_tensor_may_not():
    message = _refused([X, ("null",), ("int", 1), OUT], [("kernel", 0, [0, 1, 2, 3, 3])], [("aten::add", "out")])
    assert "argument 1 is value 1, of kind null; it takes tensor" in message


def test_a_python_kernel_checks_its_schema_too():
    """quantized_decomposed::dequantize_per_tensor.out with an int list as its scale."""
    q = build.Tensor(scalar_type=1, sizes=(2,), memory=(1, 0))
    message = _refused(
        [q, ("int_list", [2]), ("int", 0), ("int", -128), ("int", 127), ("int", 1), ("null",), OUT],
        [("kernel", 0, [0, 1, 2, 3, 4, 5, 6, 7, 7])], [("quantized_decomposed::dequantize_per_tensor", "out")],
    )
    assert "argument 1 is value 1, of kind int_list; it takes double or int" in message


def test_a_result_of_another_kind():
    """sym_size returns an int; the call assigns it to a tensor."""
    message = _refused([X, ("int", 0), OUT], [("kernel", 0, [0, 1, 2])], [("aten::sym_size", "int")])
    assert "instruction 0 (aten::sym_size.int) assigns its result to value 2, of kind tensor; its result is int" \
        in message


def test_a_move_between_kinds():
    message = _refused([X, ("int", 2), ("int_list", [1]), OUT], [("move", 2, 3)], [])
    assert "instruction 0 (MoveCall) moves value 2, of kind int_list, into value 3, of kind tensor" in message


def test_a_jump_on_a_list():
    message = _refused([X, ("int", 2), ("int_list", [1]), OUT], [("jump", 2, 1)], [])
    assert "instruction 0 (JumpFalseCall) tests value 2, of kind int_list" in message
