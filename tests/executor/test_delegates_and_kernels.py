"""Delegates are found by the id the exporter wrote; operators by name. Missing ones fail the load,
naming what is missing, and leave the program usable."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.backends import BackendInterface
from pterun.errors import DelegateInvalidCompatibility, ErrorCode, NotFound, OperatorMissing
from pterun.kernels import KernelRegistry
from tests.executor import programs
from tests.support.exporting import ExportSpec, export_program

DEMO = "BackendWithCompilerDemo"


class AddThenMul(torch.nn.Module):
    def forward(self, x, y):
        return (x + y) * y


def delegated():
    """A program whose `add` runs in ExecuTorch's demo backend and whose `mul` is a plain kernel."""

    def partitioners():
        from executorch.exir.backend.test.op_partitioner_demo import AddMulPartitionerDemo

        return [AddMulPartitionerDemo()]

    return export_program(
        "delegate-demo-add",
        lambda: ExportSpec(AddThenMul(), (torch.randn(2, 2), torch.randn(2, 2)), lower=partitioners),
    )


class DemoAdd(BackendInterface):
    """Runs the demo backend's blobs that hold a single `add`."""

    def __init__(self, available=True):
        self.available = available
        self.inits = 0
        self.destroyed = 0

    def is_available(self):
        return self.available

    def init(self, context, processed, compile_specs):
        text = bytes(processed).decode()
        if "aten.add.Tensor" not in text:
            raise DelegateInvalidCompatibility(f"demo blob {text!r} holds no add")
        self.inits += 1
        return text

    def execute(self, handle, args):
        x, y, out = args
        torch.add(x, y, out=out)

    def destroy(self, handle):
        self.destroyed += 1


def fresh_runtime(backend=None):
    runtime = pterun.Runtime()
    if backend is not None:
        runtime.backend_registry.register(DEMO, backend)
    return runtime


def test_premise_the_program_calls_the_demo_backend():
    plan = pterun.format.ProgramFile(delegated().pte).plan("forward")
    assert [d.backend_id for d in plan.delegates] == [DEMO]


def test_unregistered_backend_is_not_found_naming_it():
    program = fresh_runtime().load_program(delegated().pte)
    with pytest.raises(NotFound) as info:
        program.load_method("forward")
    assert info.value.code == ErrorCode.NotFound
    assert DEMO in str(info.value) and "not registered" in str(info.value)


def test_unavailable_backend_is_not_found():
    program = fresh_runtime(DemoAdd(available=False)).load_program(delegated().pte)
    with pytest.raises(NotFound) as info:
        program.load_method("forward")
    assert DEMO in str(info.value) and "not available" in str(info.value)


def test_registered_backend_runs_and_matches():
    backend = DemoAdd()
    method = fresh_runtime(backend).load_program(delegated().pte).load_method("forward")
    assert backend.inits == 1
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    (out,) = method.execute([x, y])
    torch.testing.assert_close(out, (x + y) * y)


def test_backend_init_error_keeps_its_code_and_destroys_nothing_it_did_not_make():
    class Refusing(DemoAdd):
        def init(self, context, processed, compile_specs):
            raise DelegateInvalidCompatibility("this blob is not for me")

    backend = Refusing()
    program = fresh_runtime(backend).load_program(delegated().pte)
    with pytest.raises(DelegateInvalidCompatibility) as info:
        program.load_method("forward")
    assert info.value.code == ErrorCode.DelegateInvalidCompatibility
    assert backend.destroyed == 0


def test_duplicate_backend_name_is_refused():
    runtime = fresh_runtime(DemoAdd())
    with pytest.raises(pterun.errors.InvalidArgument):
        runtime.backend_registry.register(DEMO, DemoAdd())
    assert DEMO in runtime.backend_registry.registered_backend_names
    assert runtime.backend_registry.is_available(DEMO)
    assert not runtime.backend_registry.is_available("NoSuchBackend")


def test_missing_operator_fails_the_load_naming_every_one_and_the_program_still_works():
    exported = programs.add_mul()
    empty = pterun.Runtime()
    empty.registries.kernels = KernelRegistry()
    program = empty.load_program(exported.pte)
    with pytest.raises(OperatorMissing) as info:
        program.load_method("forward")
    assert info.value.code == ErrorCode.OperatorMissing
    assert "aten::add.out" in str(info.value) and "aten::mul.out" in str(info.value)
    # The same file on a runtime with kernels loads and runs.
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    x = torch.randn(2, 3)
    assert torch.equal(method.execute([x, x])[0], x + x)


def test_unknown_operator_suggests_close_names():
    registry = pterun.Runtime().registries.kernels
    with pytest.raises(OperatorMissing) as info:
        registry.lookup("aten::addd.out")
    assert "aten::addd.out" in str(info.value) and "aten::add.out" in str(info.value)
