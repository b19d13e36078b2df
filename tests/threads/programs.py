"""Small MLPs the threading tests share: float, int8 lowered to XNNPACK, and with a dynamic batch."""

from __future__ import annotations

import torch
from torch.export import Dim

from tests.backends.xnnpack.programs import export_quantized, quantized_inputs
from tests.support.exporting import Exported, ExportSpec, export_program
from tests.support.models.small import ResidualMLP


def _mlp() -> ResidualMLP:
    torch.manual_seed(0)
    return ResidualMLP(20, 64, 10, act=torch.tanh)


def float_mlp() -> Exported:
    return export_program("threads-mlp", lambda: ExportSpec(_mlp(), (torch.randn(4, 20),)))


def dynamic_mlp() -> Exported:
    def make() -> ExportSpec:
        return ExportSpec(_mlp(), (torch.randn(4, 20),), dynamic_shapes=({0: Dim("batch", min=1, max=16)},))

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
