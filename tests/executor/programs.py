"""Small programs the executor tests share, exported once per run."""

from __future__ import annotations

import torch
from torch.export import Dim

from tests.support.exporting import ExportSpec, export_program


class AddMul(torch.nn.Module):
    def forward(self, x, y):
        return x + y, x * y


class Scaled(torch.nn.Module):
    """An int input baked into the program, and an output the method computes from a size."""

    def forward(self, x, k: int):
        return x * k, x.shape[0] * 2


class Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(8, 4)

    def forward(self, tokens):
        return self.table(tokens)


class Accumulate(torch.nn.Module):
    """State kept between calls (a mutable buffer) and an input of dynamic length."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        self.total.add_(x.sum(0))
        return self.total * 2 + x


def add_mul():
    return export_program("errors-add-mul", lambda: ExportSpec(AddMul(), (torch.randn(2, 3), torch.randn(2, 3))))


def dynamic_add_mul():
    batch = Dim("batch", min=1, max=4)
    return export_program(
        "errors-add-mul-dynamic",
        lambda: ExportSpec(
            AddMul(), (torch.randn(2, 3), torch.randn(2, 3)), dynamic_shapes=({0: batch}, {0: batch})
        ),
    )


def scaled():
    return export_program("errors-scaled", lambda: ExportSpec(Scaled(), (torch.randn(3, 2), 5)))


def embed():
    torch.manual_seed(0)
    return export_program("errors-embed", lambda: ExportSpec(Embed(), (torch.tensor([[1, 2, 3]]),)))


def dynamic_accumulate():
    rows = Dim("rows", min=1, max=8)
    return export_program(
        "executor-accumulate-dynamic",
        lambda: ExportSpec(Accumulate(), (torch.randn(2, 3),), dynamic_shapes=({0: rows},)),
    )
