"""Malformed programs refused above the format layer: failures once found, each in a crafted file."""

from __future__ import annotations

import pytest


def _load_method(data: bytes, data_path=None):
    import pterun

    program = pterun.Runtime.get().load_program(data, data_path=data_path)
    return program.load_method("forward")


def test_kernel_argument_of_wrong_kind_is_invalid_program():
    """aten::clone.out with memory_format = 7 (there are 4)."""
    from pterun.errors import InvalidProgram
    from tests.format import build

    plan = build.Plan(
        values=[build.Tensor(memory=(1, 0)), ("int", 7), build.Tensor(memory=(1, 8))], inputs=[0], outputs=[2],
        instructions=[("kernel", 0, [0, 1, 2, 2])], operators=[("aten::clone", "out")], buffer_sizes=[0, 16],
    )
    with pytest.raises(InvalidProgram):
        _load_method(build.program([plan]))


def test_constant_on_a_missing_device_is_a_pte_error():
    """A constant tagged cuda:0, on a machine without CUDA."""
    import torch

    from pterun.errors import PteError
    from tests.format import build

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    plan = build.add_constant(build.Tensor(data_buffer_idx=1, device=(1, 0)))
    with pytest.raises(PteError):
        _load_method(build.program([plan], constant_buffers=[b"", build.floats(1, 2)]))


def test_planned_external_data_too_short_is_invalid_external_data():
    """A planned tensor whose initial value is a 4-byte .ptd entry with no layout."""
    from pterun.errors import InvalidExternalData
    from tests.format import build

    plan = build.Plan(values=[build.Tensor(memory=(1, 0), fqn="w", external=True)], outputs=[0], buffer_sizes=[0, 8])
    with pytest.raises(InvalidExternalData):
        _load_method(build.program([plan]), data_path=build.data_file([("w", b"abcd", None)]))


def test_copy_of_a_constant_into_a_value_that_is_no_tensor_is_refused():
    """permute_copy.out of a constant whose out argument is a Null value: refused at load, not folded."""
    from pterun.errors import InvalidProgram
    from tests.format import build

    plan = build.Plan(
        values=[build.Tensor(sizes=(2, 2), data_buffer_idx=1), ("int", 1), ("int", 0), ("int_list", [1, 2]),
                ("null",)],
        instructions=[("kernel", 0, [0, 3, 4, 4])], operators=[("aten::permute_copy", "out")],
    )
    with pytest.raises(InvalidProgram) as info:
        _load_method(build.program([plan], constant_buffers=[b"", build.floats(1, 2, 3, 4)]))
    assert "argument 2 is value 4, of kind null; it takes tensor" in str(info.value)
