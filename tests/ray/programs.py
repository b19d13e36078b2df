"""The programs the Ray tests run: a classifier with a static batch of 4, an MLP whose batch is dynamic up to 8."""

from __future__ import annotations

import torch

from tests.support.exporting import ExportSpec, export_program

STATIC_BATCH = 4
DYNAMIC_BOUND = 8


class SmallCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 16)
        self.b = torch.nn.Linear(16, 3)

    def forward(self, x, y):
        h = torch.relu(self.a(x))
        return self.b(h) * y, h.sum(dim=-1)


def small_cnn() -> torch.nn.Module:
    """The eager classifier (``compare_with="tests.ray.programs:small_cnn"``), seeded: the same in every process."""
    torch.manual_seed(0)
    return SmallCnn()


def mlp() -> torch.nn.Module:
    torch.manual_seed(1)
    return Mlp()


def static_classifier():
    return export_program("ray-cnn-static", lambda: ExportSpec(small_cnn(), (torch.randn(STATIC_BATCH, 3, 8, 8),)))


def dynamic_mlp():
    batch = torch.export.Dim("batch", min=1, max=DYNAMIC_BOUND)
    return export_program("ray-mlp-dynamic", lambda: ExportSpec(
        mlp(), (torch.randn(2, 6), torch.randn(2, 3)), dynamic_shapes=({0: batch}, {0: batch})))
