"""Models for the WebGPU backend's differential tests, exported twice each.

Every model is exported once through ExecuTorch's ``WebGPUPartitioner`` (the
program pterun runs, with VulkanBackend delegates) and once without a
partitioner (the program ExecuTorch's CPU runtime runs as the reference: its
wheel has no Vulkan or WebGPU runtime to run the lowered one).
"""

from __future__ import annotations

import collections
from pathlib import Path

import torch

from pterun.backends.webgpu import WebGPUDelegate
from pterun.backends.webgpu.blob import split_blob
from pterun.backends.webgpu.graph import Graph, read_graph
from pterun.format import ProgramFile
from tests.support.exporting import Exported, ExportSpec, export_program
from tests.support.models import build
from tests.support.models.small import SwiGLUMLP

BACKEND = "VulkanBackend"
RTOL = 1e-4  # the WebGPU backend against the reference (ExecuTorch's CPU runtime or PyTorch)


def partitioners() -> list:
    from executorch.backends.webgpu.partitioner.partitioner import WebGPUPartitioner

    return [WebGPUPartitioner()]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(5000 + seed)


class ConvNet(torch.nn.Module):
    """Convolutions (plain, strided, depthwise, dilated; ReLU/ReLU6/hardtanh clamps), max and average
    pooling, a residual add, and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 12, 3, padding=1)
        self.dw = torch.nn.Conv2d(12, 12, 3, padding=2, dilation=2, groups=12)
        self.pw = torch.nn.Conv2d(12, 12, 1)
        self.down = torch.nn.Conv2d(12, 20, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(20 * 2 * 2, 10)

    def forward(self, x):
        y = torch.relu(self.stem(x))
        y = y + self.pw(torch.nn.functional.relu6(self.dw(y)))
        y = torch.nn.functional.max_pool2d(y, 2)
        y = torch.nn.functional.hardtanh(self.down(y), -1.0, 1.0)
        y = torch.nn.functional.avg_pool2d(y, 2, ceil_mode=True)
        return self.fc(y.flatten(1))


class DynamicBlock(torch.nn.Module):
    """Two inputs with independent dynamic lengths: a normed SwiGLU block over ``x`` [1, n, 32], gated by a
    softmax over ``m`` positions of ``y`` [m, 32] broadcast against it."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.RMSNorm(32, eps=1e-5)
        self.mlp = SwiGLUMLP(32, 72)
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x, y):
        h = x + self.mlp(self.norm(x))
        w = torch.softmax(self.proj(y), dim=0).sum(0, keepdim=True)  # [1, 32] whatever m is
        return h * w, torch.sigmoid(y) * y


def _conv_inputs(seed: int) -> tuple:
    return (torch.randn(1, 3, 13, 13, generator=_gen(seed)),)


def _mlp_inputs(seed: int) -> tuple:
    return (torch.randn(1, 7, 48, generator=_gen(seed)),)


DYNAMIC_N = (9, 3, 16, 1, 12)
DYNAMIC_M = (5, 5, 2, 8, 1)


def dynamic_inputs(seed: int, n: int | None = None, m: int | None = None) -> tuple:
    n = DYNAMIC_N[seed % len(DYNAMIC_N)] if n is None else n
    m = DYNAMIC_M[seed % len(DYNAMIC_M)] if m is None else m
    return torch.randn(1, n, 32, generator=_gen(seed)), torch.randn(m, 32, generator=_gen(100 + seed))


def _dynamic_shapes():
    from torch.export import Dim

    return ({1: Dim("n", min=1, max=16)}, {0: Dim("m", min=1, max=8)})


MODELS = {
    # name: (module factory, inputs(seed), dynamic shapes factory)
    "swiglu": (SwiGLUMLP, _mlp_inputs, None),
    "convnet": (ConvNet, _conv_inputs, None),
    "dynamic": (DynamicBlock, dynamic_inputs, _dynamic_shapes),
}


def model(name: str):
    """(module, inputs(seed), dynamic shapes) for a model here or in tests.support.models (the decoders)."""
    if name in MODELS:
        factory, inputs, dynamic = MODELS[name]
        torch.manual_seed(0)
        return factory().eval(), inputs, dynamic() if dynamic else None
    m = build(name)
    return m.module, m.make_inputs, m.dynamic_shapes


def export(name: str, lowered: bool) -> Exported:
    """The model ``name`` exported with the WebGPU partitioner (``lowered``) or without one."""

    def make() -> ExportSpec:
        module, inputs, dynamic = model(name)
        return ExportSpec(
            module, inputs(0), dynamic_shapes=dynamic, lower=partitioners if lowered else "portable"
        )

    return export_program(f"webgpu-{name}-{'vk' if lowered else 'cpu'}", make)


def graphs(pte: Path, method: str = "forward") -> list[Graph]:
    """The decoded graph of every VulkanBackend delegate of ``method``."""
    program = ProgramFile(pte)
    plan = program.plan(method)
    return [
        read_graph(split_blob(program.delegate_data(d.inline, d.index)))
        for d in plan.delegates
        if d.backend_id == BACKEND
    ]


def delegate_ops(pte: Path) -> collections.Counter:
    return collections.Counter(op.name for g in graphs(pte) for op in g.chain)


def delegates(method) -> list[WebGPUDelegate]:
    """The VulkanBackend delegates of a loaded method."""
    return [h for h in method.delegate_handles if isinstance(h, WebGPUDelegate)]
