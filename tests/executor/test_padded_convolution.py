"""A zero pad, the same on both sides, and the convolution it feeds, as one convolution with more padding
(executor/load/fuse/padded_convolution.py): ExecuTorch's outputs, and the pads that must stay as they are.

The fold runs on CUDA only (on the CPU oneDNN's padded convolutions were slower); these tests give a load on the
CPU the patterns a CUDA load gets, so that the pass's choices and results are checked where ExecuTorch runs
(tests/gpu/test_conv_kernels.py checks a CUDA load of MobileNetV2 folds its pads)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pterun
from pterun.core.device import DeviceType
from pterun.executor.load import fuse, passes
from tests.support.differential import check, load
from tests.support.exporting import ExportSpec, export_program

NAME = "pterun::padded_convolution"
PAD = "aten::constant_pad_nd.out"


class Pads(torch.nn.Module):
    """Every kind of pad before a convolution: the ones that fold first, then the ones that must not."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)  # and a pad of 1: padding 2
        self.b = torch.nn.Conv2d(8, 8, 3, groups=8, bias=False)  # depthwise
        self.b2 = torch.nn.Conv2d(8, 8, 1)  # a pad of nothing
        self.c = torch.nn.Conv2d(8, 8, (3, 5))  # a pad of the last dimension alone
        self.d = torch.nn.Conv2d(8, 8, 3, stride=2)  # "same" for a stride: one more row and column at the end
        self.e = torch.nn.Conv2d(8, 8, 3)  # a pad of ones
        self.f = torch.nn.Conv2d(8, 4, 1)  # the padded activation read twice
        self.g = torch.nn.ConvTranspose2d(4, 4, 3, padding=1)
        self.h = torch.nn.Conv1d(4, 4, 3)

    def forward(self, x):
        x = self.a(F.pad(x, [1, 1, 1, 1]))
        x = self.b(F.pad(x, [1, 1, 1, 1]))
        x = self.b2(F.pad(x, [0, 0, 0, 0]))
        x = self.c(F.pad(x, [2, 2]))
        x = self.d(F.pad(x, [0, 1, 0, 1]))
        x = self.e(F.pad(x, [1, 1, 1, 1], value=1.0))
        padded = F.pad(x, [1, 1, 1, 1])
        y = self.f(padded) + padded.mean()
        y = self.g(F.pad(y, [1, 1, 1, 1]))
        z = self.h(F.pad(y.flatten(2), [1, 1]))
        return y, z


def _pads():
    return export_program("padded-convolution", lambda: ExportSpec(Pads(), (torch.randn(2, 3, 20, 24),)))


@pytest.fixture
def cuda_patterns(monkeypatch):
    monkeypatch.setattr(passes, "patterns", lambda kernels, device_type: fuse.patterns(kernels, DeviceType.CUDA))


def test_a_cpu_load_keeps_its_pads():
    exported = _pads()
    steps = load(exported).load_method("forward").steps
    assert [s.name for s in steps if s is not None and getattr(s, "name", None) == PAD] == [PAD] * 9
    assert NAME not in _fused(load(exported).load_method("forward"))


def _fused(method) -> list[str]:
    return [s.name for s in method.steps if s is not None and getattr(s, "replaces", ())]


def test_symmetric_zero_pads_fold_into_their_convolutions_and_executorch_agrees(cuda_patterns):
    exported = _pads()
    plain = pterun.Runtime.get().load_program(exported.pte, fuse=False).load_method("forward")
    pads = [s.name for s in plain.steps if s is not None and getattr(s, "name", None) == PAD]
    assert len(pads) == 9, "the premise: every pad is a step of its own"
    program = load(exported)
    method = program.load_method("forward")
    # a, b, b2, c and the 1-D convolution fold; d (one side only), e (ones), f (read twice), g (transposed) do not.
    assert _fused(method).count(NAME) == 5
    assert [s.name for s in method.steps if s is not None and getattr(s, "name", None) == PAD] == [PAD] * 4
    x = torch.randn(2, 3, 20, 24)
    outputs = check(exported, (x,), program=program)
    for got, unfused in zip(outputs, plain.execute([x])):
        assert torch.equal(got, unfused)


@pytest.mark.parametrize("shape", [(1, 3, 17, 9), (3, 3, 8, 8)])
def test_a_folded_convolution_takes_other_batches_and_sizes_of_a_dynamic_input(shape, cuda_patterns):
    from torch.export import Dim

    batch, height = Dim("batch", min=1, max=4), Dim("height", min=4, max=32)
    exported = export_program("padded-convolution-dynamic", lambda: ExportSpec(
        torch.nn.Sequential(torch.nn.ZeroPad2d(2), torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU()),
        (torch.randn(2, 3, 12, 9),), dynamic_shapes=({0: batch, 2: height},)))
    program = load(exported)
    assert _fused(program.load_method("forward")) == [NAME]
    check(exported, (torch.randn(*shape),), program=program)
