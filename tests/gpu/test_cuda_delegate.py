"""Programs exported through pterun's CudaPartitioner: the seed's device-resident outputs, both API paths."""

from __future__ import annotations

import gc

import pytest
import torch

import pterun
from pterun import pybindings
from pterun.errors import ErrorCode, InvalidArgument
from tests.gpu.conftest import FIXTURES, load_fixture, on
from tests.gpu.memory import CU_MEMORYTYPE_DEVICE, driver_memory_type
from tests.support.compare import assert_matches

pytestmark = pytest.mark.gpu
GPU_RTOL = 2e-4
RESIDENT = FIXTURES / "cuda" / "resident"
COPIES = FIXTURES / "cuda" / "copies"


def _fixture(directory):
    return load_fixture(directory if directory.exists() else None)


def _plan(pte):
    return pterun.format.ProgramFile(pte).plan("forward")


def test_premise_resident_outputs_are_unplanned_and_tagged_cuda():
    pte, *_ = _fixture(RESIDENT)
    plan = _plan(pte)
    assert [d.backend_id for d in plan.delegates] == ["PterunCudaBackend"]
    for index in plan.inputs + plan.outputs:
        value = plan.values[index]
        assert value.memory_id is None and value.device_type == 1, "unplanned and tagged CUDA"


def _assert_device_memory(outputs):
    for out in outputs:
        assert out.is_cuda
        # The assertion itself: the driver, not the tensor's label, says where the memory is.
        assert driver_memory_type(out.data_ptr()) == (0, CU_MEMORYTYPE_DEVICE)


def test_method_path_outputs_are_device_memory_and_correct():
    pte, ptd, calls, expected = _fixture(RESIDENT)
    method = pterun.Runtime.get().load_program(pte).load_method("forward")
    for call, reference in zip(calls, expected):
        outputs = method.execute(on("cuda", call), clone_outputs=False)
        _assert_device_memory(outputs)
        assert_matches(on("cpu", outputs), reference, rtol=GPU_RTOL)


def test_module_path_outputs_are_device_memory_and_correct():
    pte, ptd, calls, expected = _fixture(RESIDENT)
    module = pybindings._load_for_executorch(str(pte))
    for call, reference in zip(calls, expected):
        outputs = module.forward(on("cuda", call), clone_outputs=False)
        _assert_device_memory(outputs)
        assert_matches(on("cpu", outputs), reference, rtol=GPU_RTOL)
    program = pybindings._load_program(str(pte))
    method = program.load_method("forward")
    outputs = method.call(on("cuda", calls[0]), clone_outputs=False)
    _assert_device_memory(outputs)
    assert_matches(on("cpu", outputs), expected[0], rtol=GPU_RTOL)


def test_results_the_caller_holds_are_never_written_by_a_later_call():
    pte, ptd, calls, expected = _fixture(RESIDENT)
    method = pterun.Runtime.get().load_program(pte).load_method("forward")
    first = method.execute(on("cuda", calls[0]), clone_outputs=False)
    second = method.execute(on("cuda", calls[1]), clone_outputs=False)
    assert {o.data_ptr() for o in first}.isdisjoint(o.data_ptr() for o in second)
    assert_matches(on("cpu", first), expected[0], rtol=GPU_RTOL)
    assert_matches(on("cpu", second), expected[1], rtol=GPU_RTOL)


def test_host_input_to_a_device_input_is_refused_or_copied_on_request():
    pte, ptd, calls, expected = _fixture(RESIDENT)
    method = pterun.Runtime.get().load_program(pte).load_method("forward")
    with pytest.raises(InvalidArgument) as info:
        method.execute(calls[0])
    assert info.value.code == ErrorCode.InvalidArgument
    assert "input 0" in str(info.value) and "cuda:0" in str(info.value) and "cpu" in str(info.value)
    outputs = method.execute(calls[0], copy_inputs=True)
    assert_matches(on("cpu", outputs), expected[0], rtol=GPU_RTOL)


def test_a_cuda_tensor_over_host_memory_is_refused_at_binding():
    pte, ptd, calls, expected = _fixture(RESIDENT)
    method = pterun.Runtime.get().load_program(pte).load_method("forward")
    host = calls[0][0].clone().pin_memory()

    class Claim:
        """Describes pinned host memory as a CUDA array, as a careless wrapper might."""

        def __init__(self, tensor):
            self.tensor = tensor
            self.__cuda_array_interface__ = {
                "data": (tensor.data_ptr(), False), "shape": tuple(tensor.shape), "typestr": "<f4",
                "version": 3, "strides": None, "stream": None,
            }

    lying = torch.as_tensor(Claim(host), device="cuda")
    assert lying.is_cuda and driver_memory_type(lying.data_ptr()) != (0, CU_MEMORYTYPE_DEVICE)
    with pytest.raises(InvalidArgument) as info:
        method.execute([lying, calls[0][1].cuda()])
    assert info.value.code == ErrorCode.InvalidArgument
    assert "input 0" in str(info.value) and "host memory" in str(info.value)
    outputs = method.execute(on("cuda", calls[0]))
    assert_matches(on("cpu", outputs), expected[0], rtol=GPU_RTOL)


def test_device_planned_arena_is_device_memory_and_host_io_works():
    pte, ptd, calls, expected = _fixture(COPIES)
    plan = _plan(pte)
    tagged = [i for i, (device, _) in plan.buffer_devices.items() if device == 1]
    assert tagged, "premise: the plan tags an arena CUDA"
    program = pterun.Runtime.get().load_program(pte)
    # Earlier tests' CUDA tensors caught in reference cycles would otherwise be freed by a collection that
    # happens to run inside load_method, and the growth measured would fall short.
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    method = program.load_method("forward")
    assert torch.cuda.memory_allocated() - before >= sum(plan.buffer_sizes[i] for i in tagged)
    for call, reference in zip(calls, expected):
        outputs = method.execute(call)
        assert all(not o.is_cuda for o in outputs), "the program copies its results back to the host"
        assert_matches(outputs, reference, rtol=GPU_RTOL)
