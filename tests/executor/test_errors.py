"""Every bad input gets a typed error with ExecuTorch's code and a message naming the culprit,
and the object that raised it still works afterwards."""

from __future__ import annotations

import io
import warnings

import pytest
import torch

import pterun
from pterun.errors import (
    ErrorCode,
    InvalidArgument,
    InvalidArgumentType,
    InvalidState,
    NotSupported,
    PteError,
)
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


# -- calls with the wrong kind of argument -------------------------------------------------------


def _not_a_list():
    """Things that are not a list of inputs, and how the error names them."""
    x = torch.ones(2, 3)
    return {
        "dict": ({"x": x}, "a dict"),
        "generator": ((v for v in [x]), "a generator"),
        "set": ({1}, "a set"),
        "None": (None, "None"),
        "str": ("xy", "a str"),
        "int": (3, "an int"),
    }


@pytest.mark.parametrize("kind", sorted(_not_a_list()))
def test_execute_and_set_inputs_refuse_what_is_not_a_list_of_inputs(kind):
    method = _load(programs.add_mul()).load_method("forward")
    value, named = _not_a_list()[kind]
    for call in (method.execute, method.set_inputs):
        with pytest.raises(InvalidArgumentType) as info:
            call(value)
        assert isinstance(info.value, TypeError)  # what ExecuTorch's bindings raise there
        assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "method 'forward'", "expected a list of inputs",
                     named)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    assert torch.equal(_works(method, x, y)[0], x + y)


def test_a_bare_tensor_is_the_only_input_of_execute_and_refused_by_set_inputs():
    method = _load(programs.embed()).load_method("forward")
    tokens = torch.tensor([[1, 2, 3]])
    # As ExecuTorch's Method.execute (its bindings' single-tensor call): one tensor is the one input.
    assert torch.equal(method.execute(tokens)[0], method.execute([tokens])[0])
    with pytest.raises(InvalidArgumentType) as info:
        method.set_inputs(tokens)
    assert isinstance(info.value, TypeError)
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "set_inputs", "a Tensor of shape [1, 3]",
                 "pass [tensor]")
    two = _load(programs.add_mul()).load_method("forward")
    with pytest.raises(InvalidArgument) as info:
        two.execute(torch.ones(2, 3))
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "takes 2 inputs, got 1")
    method.set_inputs([tokens])
    method.run()
    assert method.get_outputs()[0].shape == (1, 3, 4)


def test_meta_tensor_with_copy_inputs_is_invalid_argument_naming_the_input():
    method = _load(programs.add_mul()).load_method("forward")
    with pytest.raises(InvalidArgument) as info:
        method.execute([torch.ones(2, 3), torch.ones(2, 3, device="meta")], copy_inputs=True)
    assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "input 1", "meta")
    x = torch.randn(2, 3)
    assert torch.equal(method.execute([x, x], copy_inputs=True)[0], x + x)


def _not_dense():
    x = torch.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # prototype and beta layouts say so
        return {
            "sparse_coo": (x.to_sparse(), "sparse_coo"),
            "sparse_csr": (x.to_sparse_csr(), "sparse_csr"),
            "nested": (torch.nested.nested_tensor([x[0], x[1]]), "nested"),
            "jagged": (torch.nested.nested_tensor([x[:1], x], layout=torch.jagged), "jagged"),
            "quantized": (torch.quantize_per_tensor(x, 0.1, 0, torch.qint8), "qint8"),
        }


@pytest.mark.parametrize("kind", sorted(_not_dense()))
def test_tensors_that_are_not_dense_are_invalid_argument_naming_the_input(kind):
    method = _load(programs.add_mul()).load_method("forward")
    value, named = _not_dense()[kind]
    assert value.layout is not torch.strided or value.is_nested or value.is_quantized  # the premise
    for copy_inputs in (False, True):
        with pytest.raises(InvalidArgument) as info:
            method.execute([torch.ones(2, 3), value], copy_inputs=copy_inputs)
        assert_error(info, InvalidArgument, ErrorCode.InvalidArgument, "method 'forward' input 1", named)
    x = torch.randn(2, 3)
    assert torch.equal(_works(method, x, x)[0], x + x)


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
