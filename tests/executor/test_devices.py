"""Device memory on a machine without a GPU: allocators, device-planned arenas, device-tagged outputs.

ExecuTorch's test partitioner (DeviceAwarePartitioner) delegates `add` to its demo backend with a
`target_device` of cuda:0, so ExecuTorch's device passes plan arenas and tag tensors for CUDA. A
fake CUDA allocator, which hands out host memory and records every request, stands in for the GPU:
what is tested is who gets asked for memory, when, and what happens when it says no.
"""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.backends import demo
from pterun.core.device import DeviceType
from pterun.errors import ErrorCode, InvalidArgument, MemoryAllocationFailed, NotFound
from pterun.executor import Registries
from pterun.kernels import default_registry
from pterun.memory import Allocator, AllocatorAlreadyRegistered, AllocatorRegistry
from pterun.memory.cpu import CpuAllocator
from tests.support.exporting import ExportSpec, export_program


class FakeCuda(Allocator):
    """Host memory presented as CUDA memory; fails the requests listed in ``fail``."""

    device_type = DeviceType.CUDA

    def __init__(self, fail=()):
        self.calls = []
        self.fail = set(fail)

    def _allocate(self, nbytes, index, alignment):
        self.calls.append((nbytes, index))
        if len(self.calls) in self.fail:
            raise RuntimeError("out of fake device memory")
        return torch.zeros(nbytes, dtype=torch.uint8)


def runtime_with(cuda: Allocator | None = None) -> pterun.Runtime:
    allocators = AllocatorRegistry()
    allocators.register(CpuAllocator())
    if cuda is not None:
        allocators.register(cuda)
    runtime = pterun.Runtime(Registries(default_registry(), pterun.backends.BackendRegistry(), allocators))
    demo.register(runtime.backend_registry)
    return runtime


class TwoMethods(torch.nn.Module):
    def forward(self, x, y):
        return x - y

    def forward2(self, x, y):
        return (x + y) * 2


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class AddTwice(torch.nn.Module):
    """Two delegated adds whose results are method outputs."""

    def forward(self, x, y):
        return x + y, (x * 3) + y


def _one_delegate_per_add():
    """DeviceAwarePartitioner's delegation, with every add in a delegate of its own.

    The demo backend's blob does not say how several operators connect, so each delegate
    holds one.
    """
    from executorch.exir.backend.compile_spec_schema import CompileSpec
    from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
    from executorch.exir.backend.test.backend_with_compiler_demo import BackendWithCompilerDemo  # noqa: F401
    from executorch.exir.dialects._ops import ops as exir_ops

    class PerAdd(Partitioner):
        def __init__(self):
            super().__init__()
            self.delegation = DelegationSpec(
                demo.NAME, [CompileSpec("max_value", bytes([4])), CompileSpec("target_device", b"cuda:0")]
            )

        def partition(self, exported_program):
            tags = {}
            adds = [n for n in exported_program.graph_module.graph.nodes
                    if n.op == "call_function" and n.target == exir_ops.edge.aten.add.Tensor]
            for i, node in enumerate(adds):
                node.meta["delegation_tag"] = tag = f"add{i}"
                tags[tag] = self.delegation
            return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)

    return [PerAdd()]


def _partitioner():
    from executorch.exir.backend.test.device_util import DeviceAwarePartitioner

    return [DeviceAwarePartitioner("cuda:0")]


def device_planned():
    """forward runs on the host; forward2's add is delegated with its arena planned on cuda:0."""

    def spec():
        from executorch.exir.backend.test.device_util import DeviceAwarePartitioner

        module = TwoMethods()
        inputs = (torch.randn(2, 2), torch.randn(2, 2))

        class Method(torch.nn.Module):
            def __init__(self, fn):
                super().__init__()
                self.fn = fn

            def forward(self, x, y):
                return self.fn(x, y)

        return ExportSpec(
            {"forward": Method(module.forward), "forward2": Method(module.forward2)},
            {"forward": inputs, "forward2": inputs},
            lower=lambda: {"forward": [], "forward2": [DeviceAwarePartitioner("cuda:0")]},
            config={"enable_non_cpu_memory_planning": True},
        )

    return export_program("devices-planned", spec)


def device_outputs(skip_h2d: bool = False, shape=(2, 3)):
    """Delegated adds whose outputs stay on the device, unplanned (the program the seed describes)."""

    def spec():
        from executorch.exir.passes import MemoryPlanningPass
        from executorch.exir.passes.propagate_device_config import PropagateDeviceConfig

        # skip_h2d needs every input to feed the delegate alone.
        module = Add() if skip_h2d else AddTwice()
        return ExportSpec(
            module,
            (torch.randn(*shape), torch.randn(*shape)),
            lower=_one_delegate_per_add,
            config={
                "enable_non_cpu_memory_planning": True,
                "propagate_device_config": PropagateDeviceConfig(
                    skip_h2d_for_method_inputs=skip_h2d, skip_d2h_for_method_outputs=True
                ),
                "memory_planning_pass": MemoryPlanningPass(alloc_graph_input=not skip_h2d, alloc_graph_output=False),
            },
        )

    key = f"devices-outputs3-{'h2d' if skip_h2d else 'copy'}-{'x'.join(map(str, shape))}"
    return export_program(key, spec)


def _plan(exported, method="forward"):
    return pterun.format.ProgramFile(exported.pte).plan(method)


# -- the registry --------------------------------------------------------------------------------


def test_second_allocator_for_a_device_type_is_refused_not_fatal():
    registry = AllocatorRegistry()
    registry.register(CpuAllocator())
    with pytest.raises(AllocatorAlreadyRegistered) as info:
        registry.register(CpuAllocator())
    assert info.value.code == ErrorCode.RegistrationAlreadyRegistered
    assert "CPU" in str(info.value)
    assert registry.allocate(8, pterun.core.device.CPU).nbytes == 8


def test_builtin_cuda_allocator_is_registered_lazily_and_cannot_be_doubled():
    allocators = pterun.runtime.default_allocators()
    assert DeviceType.CUDA in allocators.device_types
    with pytest.raises(AllocatorAlreadyRegistered):
        allocators.register(FakeCuda())


def test_device_with_no_allocator_is_not_found_naming_it():
    registry = AllocatorRegistry()
    registry.register(CpuAllocator())
    with pytest.raises(NotFound) as info:
        registry.get(DeviceType.CUDA)
    assert info.value.code == ErrorCode.NotFound and "CUDA" in str(info.value)


def test_third_party_allocator_serves_its_device_type():
    fake = FakeCuda()
    registry = AllocatorRegistry()
    registry.register(fake)
    buffer = registry.allocate(100, pterun.core.device.Device(DeviceType.CUDA, 0))
    assert fake.calls == [(100, 0)] and buffer.nbytes == 100 and str(buffer.device) == "cuda:0"
    buffer.copy_from_host(b"\x01\x02\x03")
    assert buffer.copy_to_host(0, 3) == b"\x01\x02\x03"


def test_importing_pterun_does_not_touch_the_gpu():
    import subprocess
    import sys

    code = "import torch, pterun; pterun.Runtime.get(); print(torch.cuda.is_initialized())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# -- device-planned arenas -------------------------------------------------------------------------


def test_premise_forward2_has_an_arena_tagged_cuda_and_forward_has_none():
    exported = device_planned()
    assert 1 in {device for device, _ in _plan(exported, "forward2").buffer_devices.values()}
    assert not _plan(exported, "forward").buffer_devices


def test_device_planned_arena_comes_from_the_device_allocator():
    exported = device_planned()
    fake = FakeCuda()
    program = runtime_with(fake).load_program(exported.pte)
    plan = _plan(exported, "forward2")
    cuda_sizes = sorted(plan.buffer_sizes[i] for i, (dev, _) in plan.buffer_devices.items() if dev == 1)
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    (out,) = program.load_method("forward2").execute([x, y])
    torch.testing.assert_close(out, (x + y) * 2)
    assert sorted(n for n, _ in fake.calls) == cuda_sizes and all(i == 0 for _, i in fake.calls)


def test_failed_device_arena_fails_only_that_method():
    exported = device_planned()
    program = runtime_with(None).load_program(exported.pte)
    host = program.load_method("forward")
    with pytest.raises(NotFound) as info:
        program.load_method("forward2")
    assert "CUDA" in str(info.value) and "planned buffer" in str(info.value)
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    assert torch.equal(host.execute([x, y])[0], x - y)

    failing = runtime_with(FakeCuda(fail={1})).load_program(exported.pte)
    with pytest.raises(MemoryAllocationFailed) as info:
        failing.load_method("forward2")
    assert info.value.code == ErrorCode.MemoryAllocationFailed and "cuda:0" in str(info.value)
    assert torch.equal(failing.load_method("forward").execute([x, y])[0], x - y)
    # The allocator recovered: the same program loads the method now.
    torch.testing.assert_close(failing.load_method("forward2").execute([x, y])[0], (x + y) * 2)


# -- unplanned, device-tagged outputs ----------------------------------------------------------------


def test_premise_outputs_are_unplanned_and_tagged_cuda():
    plan = _plan(device_outputs())
    for index in plan.outputs:
        value = plan.values[index]
        assert value.memory_id is None and value.data_buffer_idx == 0 and value.device_type == 1


def test_unplanned_device_outputs_get_device_memory_from_its_allocator():
    exported = device_outputs()
    fake = FakeCuda()
    method = runtime_with(fake).load_program(exported.pte).load_method("forward")
    before = len(fake.calls)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    first, second = method.execute([x, y])
    torch.testing.assert_close(first, x + y)
    torch.testing.assert_close(second, x * 3 + y)
    assert fake.calls[before:] == [(24, 0), (24, 0)]
    method.execute([x, y])
    assert len(fake.calls) == before + 2, "buffers the caller never received are reused"


def test_output_allocation_is_all_or_nothing():
    exported = device_outputs()
    fake = FakeCuda()
    method = runtime_with(fake).load_program(exported.pte).load_method("forward")
    loaded = len(fake.calls)
    fake.fail = {loaded + 2}  # the second output's buffer
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    with pytest.raises(MemoryAllocationFailed) as info:
        method.execute([x, y])
    assert info.value.code == ErrorCode.MemoryAllocationFailed and "cuda:0" in str(info.value)
    failed = len(fake.calls)
    first, second = method.execute([x, y])
    assert len(fake.calls) == failed + 2, "a failed call must not keep the buffers it made"
    torch.testing.assert_close(first, x + y)
    torch.testing.assert_close(second, x * 3 + y)


def test_zero_byte_device_output_needs_no_allocation():
    exported = device_outputs(shape=(0, 3))
    plan = _plan(exported)
    assert all(plan.values[i].nbytes == 0 and plan.values[i].device_type == 1 for i in plan.outputs)
    fake = FakeCuda()
    method = runtime_with(fake).load_program(exported.pte).load_method("forward")
    before = len(fake.calls)
    first, second = method.execute([torch.randn(0, 3), torch.randn(0, 3)])
    assert first.shape == (0, 3) and second.shape == (0, 3)
    assert len(fake.calls) == before


def test_results_the_caller_holds_are_never_overwritten():
    exported = device_outputs()
    fake = FakeCuda()
    method = runtime_with(fake).load_program(exported.pte).load_method("forward")
    x1, y1 = torch.randn(2, 3), torch.randn(2, 3)
    x2, y2 = torch.randn(2, 3), torch.randn(2, 3)
    held = method.execute([x1, y1], clone_outputs=False)
    again = method.execute([x2, y2], clone_outputs=False)
    torch.testing.assert_close(held[0], x1 + y1)
    torch.testing.assert_close(again[0], x2 + y2)
    assert held[0].data_ptr() != again[0].data_ptr()


def test_caller_supplied_output_memory_is_written_in_place():
    exported = device_outputs()
    method = runtime_with(FakeCuda()).load_program(exported.pte).load_method("forward")
    mine = torch.empty(2, 3)
    method.set_output(0, mine)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    method.set_inputs([x, y])
    method.run()
    torch.testing.assert_close(mine, x + y)
    with pytest.raises(InvalidArgument):
        method.set_output(1, torch.empty(2, 3, dtype=torch.int64))


# -- inputs on the wrong device ------------------------------------------------------------------------


def test_input_on_the_wrong_device_is_refused_naming_input_and_devices():
    exported = device_outputs(skip_h2d=True)
    plan = _plan(exported)
    first = plan.values[plan.inputs[0]]
    assert first.memory_id is None and first.device_type == 1, "premise: an unplanned input tagged CUDA"
    method = runtime_with(FakeCuda()).load_program(exported.pte).load_method("forward")
    with pytest.raises(InvalidArgument) as info:
        method.execute([torch.randn(2, 3), torch.randn(2, 3)])
    text = str(info.value)
    assert info.value.code == ErrorCode.InvalidArgument
    assert "input 0" in text and "cuda:0" in text and "cpu" in text and "copy_inputs=True" in text
