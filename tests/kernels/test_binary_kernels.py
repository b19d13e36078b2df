"""Small float32 add, sub, mul, div and relu on the CPU as one native call each (kernels/binary.py), a run of them
replayed as one: ExecuTorch's portable kernels' bits, and PyTorch's call wherever the native one does not apply."""

from __future__ import annotations

import math

import pytest
import torch

import pterun
from pterun import native
from pterun.kernels.binary import LARGEST, NAMES, BinaryInto, ReluInto, factory
from pterun.native import geometry
from tests.support.compare import same_bits
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import assert_executorch_bits

pytestmark = pytest.mark.skipif(native.kernels is None, reason="needs pterun's native kernels (CI builds them)")


class Arithmetic(torch.nn.Module):
    """Every operator the kernels take: broadcasts of either side, scalars, a division, a ReLU, a chain of them."""

    def forward(self, x, y, z):
        a = (x * 2.0 + y) * z - 1.0
        b = torch.relu(a) / (z * z + 0.5)
        return b - y * 0.25, x + z.view(-1, 1)


def _inputs(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 9, generator=g)
    x[0, :5] = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 1e-40])
    return [x, torch.randn(9, generator=g), torch.randn(6, 1, generator=g)]



def test_a_portable_chain_replays_with_executorchs_bits():
    exported = export_program("kernels-binary-arithmetic-v1", lambda: ExportSpec(Arithmetic(), tuple(_inputs(0))))
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    kernels = [s.binding.fn for s in method.steps if s is not None and isinstance(getattr(s, "binding", None) and
                                                                               s.binding.fn, BinaryInto)]
    assert len(kernels) >= 8, "premise: the arithmetic runs in the native kernels"
    assert_executorch_bits(method, exported.pte, _inputs, range(5), kernels)
    assert sum(method.replays.values()) >= 3, method.replays


def _kernel(name: str, count: int) -> BinaryInto:
    return factory(name)(count).fn


@pytest.mark.parametrize("name", [n for n in NAMES if n != "aten::relu.out"])
def test_each_operator_is_pytorchs_to_the_bit(name):
    count = 5 if "add" in name or "sub" in name else 4
    kernel = _kernel(name, count)
    g = torch.Generator().manual_seed(1)
    scalar = "Scalar" in name
    for a_shape, b_shape in (((7, 5), (7, 5)), ((3, 1, 4), (5, 1)), ((), (2, 3)), ((4, 4), ())):
        if scalar and b_shape != ():
            continue
        a = torch.randn(a_shape, generator=g) * 3
        b = 0.3 if scalar else torch.randn(b_shape, generator=g) * 3
        shape = torch.broadcast_shapes(a.shape, torch.Size(b_shape))
        out = torch.empty(shape)
        op = getattr(torch, NAMES[name][0])
        kernel(a, b, out=out) if count == 4 else kernel(a, b, 1, out=out)
        assert kernel.ran_natively(), (name, a_shape, b_shape)
        assert same_bits(out, op(a, b)), (name, a_shape, b_shape)


def test_relu_keeps_what_pytorchs_keeps():
    kernel = _kernel("aten::relu.out", 3)
    assert isinstance(kernel, ReluInto)
    x = torch.tensor([-0.0, math.nan, -1.0, 2.0, 0.0, -math.inf, math.inf, 1e-40] * 3)
    out = torch.empty_like(x)
    kernel(x, out=out)
    assert kernel.ran_natively() and same_bits(out, torch.relu(x))


def test_what_the_native_call_does_not_take_is_pytorchs_call():
    add = _kernel("aten::add.out", 5)
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    cases = [
        ("an alpha", (x, y, 2.0), torch.empty(4, 6), torch.add(x, y, alpha=2.0)),
        ("integers", (x.to(torch.int32), y.to(torch.int32), 1), torch.empty(4, 6, dtype=torch.int32),
         torch.add(x.to(torch.int32), y.to(torch.int32))),
        ("a transposed operand", (x.t().contiguous().t(), y, 1), torch.empty(4, 6), x + y),
        ("more than the native call takes", (torch.ones(LARGEST + 1), torch.ones(LARGEST + 1), 1),
         torch.empty(LARGEST + 1), torch.full((LARGEST + 1,), 2.0)),
    ]
    for what, args, out, expected in cases:
        add(*args[:2], args[2], out=out)
        assert not add.ran_natively(), what
        assert torch.equal(out, expected), what
    # An out over part of an operand: PyTorch's call, which refuses it.
    buffer = torch.arange(12.0)
    with pytest.raises(RuntimeError, match="single memory location"):
        add(buffer[:8], torch.ones(8), 1, out=buffer[4:12])
    assert not add.ran_natively()
    # In place (out is the operand itself): native, each value read before it is written.
    z = torch.randn(4, 6)
    expected = z + y
    add(z, y, 1, out=z)
    assert add.ran_natively() and torch.equal(z, expected)
    assert geometry.BINARY_OPS["add"] == 0
