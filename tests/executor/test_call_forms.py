"""ATen out-variants are called through torch's Python bindings only where the binding reaches exactly the
program's overload, and the results are the same bits as the overloads' own (executor/codegen/torch_functions.py)."""

from __future__ import annotations

import torch

import pterun
from pterun.core.device import DeviceType
from pterun.executor import Registries
from pterun.kernels import binary, default_registry
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import run_reference


class _Chain(torch.nn.Module):
    def forward(self, x, y):
        return torch.softmax((x * 2.0 + y).relu() - y, -1)


def _chain():
    return export_program("call-forms-chain", lambda: ExportSpec(_Chain(), (torch.randn(4, 8), torch.randn(4, 8))))


def _kernels(method) -> dict:
    """The callables the method's code calls, by the name the code uses."""
    code = method.code.__code__
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in method.code.__closure__)))
    return {name: fn for name, fn in cells.items() if callable(fn) and not isinstance(fn, torch.Tensor)}


def _aten_only() -> pterun.Runtime:
    """A runtime whose CPU arithmetic is ATen's kernels (not the native ones of kernels/binary.py, which take small
    float32 tensors where they are built): the calls these bindings stand for."""
    registry = default_registry()
    for name in binary.NAMES:
        if registry.holds(name, DeviceType.CPU):
            registry.unregister(name, DeviceType.CPU)
    base = pterun.Runtime.get().registries
    return pterun.Runtime(Registries(registry, base.backends, base.allocators))


def test_bindings_that_reach_the_programs_overload_are_used_and_change_no_bit():
    exported = _chain()
    fast = _aten_only().load_program(exported.pte).load_method("forward")
    kernels = _kernels(fast)
    assert kernels["mul_out"] is torch.mul and kernels["add_out"] is torch.add, kernels
    assert kernels["softmax_out"] is torch._softmax and kernels["sub_out"] is torch.sub
    # torch.relu takes no out=: that call keeps the overload's own entry point.
    assert kernels["relu_out"] is torch.ops.aten.relu.out._op
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        inputs = [torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)]
        (a,) = fast.execute(inputs)
        assert torch.equal(a, _Chain()(*inputs))  # eager PyTorch runs the same ATen kernels
        (reference,) = run_reference(exported.pte, inputs)  # ExecuTorch's runtime on the same file
        torch.testing.assert_close(a, reference, rtol=1e-6, atol=1e-7)
