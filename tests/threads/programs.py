"""Small MLPs the threading tests share: float, int8 lowered to XNNPACK, and with a dynamic batch."""

from __future__ import annotations

import torch
from torch.export import Dim

from tests.backends.xnnpack.programs import export_quantized, quantized_inputs
from tests.support.exporting import Exported, ExportSpec, export_program


class MLP(torch.nn.Module):
    def __init__(self, width: int = 20, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(width, hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden)
        self.fc3 = torch.nn.Linear(hidden, 10)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = h + torch.tanh(self.fc2(h))
        return self.fc3(h)


def float_mlp() -> Exported:
    def make() -> ExportSpec:
        torch.manual_seed(0)
        return ExportSpec(MLP(), (torch.randn(4, 20),))

    return export_program("threads-mlp", make)


def dynamic_mlp() -> Exported:
    def make() -> ExportSpec:
        torch.manual_seed(0)
        return ExportSpec(MLP(), (torch.randn(4, 20),), dynamic_shapes=({0: Dim("batch", min=1, max=16)},))

    return export_program("threads-mlp-dynamic", make)


def int8_mlp() -> Exported:
    return export_quantized("mlp", "per-channel")


def float_inputs(seed: int) -> list:
    return [torch.randn(4, 20, generator=torch.Generator().manual_seed(seed))]


def dynamic_inputs(seed: int) -> list:
    # Batch sizes vary from call to call, so threads resize the same planned tensors differently.
    return [torch.randn(1 + seed % 16, 20, generator=torch.Generator().manual_seed(seed))]


def int8_inputs(seed: int) -> list:
    return list(quantized_inputs("mlp", seed))


# name -> (export, inputs for a seed)
PROGRAMS = {"float": (float_mlp, float_inputs), "int8-xnnpack": (int8_mlp, int8_inputs),
            "dynamic-batch": (dynamic_mlp, dynamic_inputs)}
