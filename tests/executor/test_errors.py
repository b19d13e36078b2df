"""Every bad input gets a typed error with ExecuTorch's code and a message naming the culprit,
and the object that raised it still works afterwards."""

from __future__ import annotations

import io

import pytest
import torch

import pterun
from pterun.errors import ErrorCode, InvalidArgument, InvalidState, NotSupported, PteError
from tests.executor import programs


def _load(exported):
    return pterun.Runtime.get().load_program(exported.pte)


def _works(method, *inputs):
    outputs = method.execute(list(inputs))
    assert outputs, "the method must still run after the failure"
    return outputs


def assert_error(info, cls, code, *fragments):
    error = info.value
    assert isinstance(error, cls) and isinstance(error, PteError) and isinstance(error, RuntimeError)
    assert error.code == code
    text = str(error)
    assert f"0x{int(code):02x}" in text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"


def test_unknown_method_is_invalid_argument_naming_it():
    program = _load(programs.add_mul())
    with pytest.raises(InvalidArgument) as info:
        program.load_method("backward")
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "'backward'", "'forward'")
    with pytest.raises(InvalidArgument):
        program.metadata("backward")
    _works(program.load_method("forward"), torch.ones(2, 3), torch.ones(2, 3))


def test_wrong_dtype_names_input_and_both_dtypes():
    method = _load(programs.add_mul()).load_method("forward")
    with pytest.raises(InvalidArgument) as info:
        method.execute([torch.ones(2, 3, dtype=torch.int64), torch.ones(2, 3)])
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "input 0", "Float", "torch.int64")
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    assert torch.equal(_works(method, x, y)[0], x + y)


def test_wrong_static_shape_is_not_supported():
    method = _load(programs.add_mul()).load_method("forward")
    with pytest.raises(NotSupported) as info:
        method.execute([torch.ones(3, 3), torch.ones(2, 3)])
    assert_error(info, NotSupported, ErrorCode.NotSupported, "input 0", "[2, 3]", "[3, 3]")
    with pytest.raises(NotSupported) as info:
        method.execute([torch.ones(2, 3), torch.ones(6)])
    assert_error(info, NotSupported, ErrorCode.NotSupported, "input 1", "2 dimensions")
    _works(method, torch.ones(2, 3), torch.ones(2, 3))


def test_dynamic_shape_over_its_bound_is_not_supported():
    exported = programs.dynamic_add_mul()
    plan = pterun.format.ProgramFile(exported.pte).plan("forward")
    assert plan.values[plan.inputs[0]].dynamism == pterun.format.Dynamism.DYNAMIC_BOUND
    method = _load(exported).load_method("forward")
    with pytest.raises(NotSupported) as info:
        method.execute([torch.ones(5, 3), torch.ones(5, 3)])
    assert_error(info, NotSupported, ErrorCode.NotSupported, "input 0", "[5, 3]", "upper bound [4, 3]")
    x = torch.randn(3, 3)
    added, multiplied = _works(method, x, x)
    assert torch.equal(added, x + x) and torch.equal(multiplied, x * x)


def test_wrong_input_count_and_type():
    method = _load(programs.add_mul()).load_method("forward")
    with pytest.raises(InvalidArgument) as info:
        method.execute([torch.ones(2, 3)])
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "takes 2 inputs, got 1")
    with pytest.raises(InvalidArgument) as info:
        method.execute([torch.ones(2, 3), [1, 2]])
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "input 1", "expected a Tensor, got list")
    _works(method, torch.ones(2, 3), torch.ones(2, 3))


def test_input_on_another_device_is_refused_naming_both_devices():
    method = _load(programs.add_mul()).load_method("forward")
    with pytest.raises(InvalidArgument) as info:
        method.execute([torch.ones(2, 3, device="meta"), torch.ones(2, 3)])
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "input 0", "cpu", "meta")
    _works(method, torch.ones(2, 3), torch.ones(2, 3))


def test_scalar_input_must_equal_the_exported_value():
    exported = programs.scaled()
    method = _load(exported).load_method("forward")
    assert method.metadata.input_tag(1) == "Int"
    with pytest.raises(InvalidArgument) as info:
        method.execute([torch.ones(3, 2), 6])
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "input 1", "5", "6")
    with pytest.raises(InvalidArgument):
        method.execute([torch.ones(3, 2), 5.0])
    out, size = _works(method, torch.ones(3, 2), 5)
    assert torch.equal(out, torch.full((3, 2), 5.0)) and size == 6


def test_run_before_inputs_and_outputs_before_run():
    method = _load(programs.add_mul()).load_method("forward")
    with pytest.raises(InvalidState) as info:
        method.get_outputs()
    assert_error(info, InvalidState, ErrorCode.InvalidState, "has not been executed")
    with pytest.raises(InvalidArgument) as info:
        method.run()
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "input 0 has not been set")
    _works(method, torch.ones(2, 3), torch.ones(2, 3))


def test_kernel_failure_names_the_instruction_and_operator():
    method = _load(programs.embed()).load_method("forward")
    with pytest.raises(InvalidArgument) as info:
        method.execute([torch.tensor([[1, 2, 99]])])
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "instruction", "aten::embedding.out")
    tokens = torch.tensor([[1, 2, 3]])
    assert _works(method, tokens)[0].shape == (1, 3, 4)


def test_a_file_opened_in_text_mode_is_invalid_argument_naming_it(tmp_path):
    exported = programs.add_mul()
    with open(exported.pte) as text, pytest.raises(InvalidArgument) as info:
        pterun.Runtime.get().load_program(text)
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, str(exported.pte), "binary mode ('rb')")
    with pytest.raises(InvalidArgument) as info:
        pterun.Runtime.get().load_program(io.StringIO("ET12"))
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "text mode", "binary mode")
    with open(exported.pte, "rb") as binary:
        program = pterun.Runtime.get().load_program(binary)
    _works(program.load_method("forward"), torch.ones(2, 3), torch.ones(2, 3))
