"""Tiny programs: a handful of small ops each, where per-call and per-op costs are all there is.

Each entry builds ``(module, inputs)``; ``export_tiny`` writes them with ExecuTorch (portable, no
delegate) to ``.cache/bench/tiny/<name>.pte`` once, next to ``<name>.inputs.pt``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

TINY: dict[str, Callable[[], tuple[torch.nn.Module, tuple]]] = {}


def entry(fn):
    TINY[fn.__name__] = fn
    return fn


class _Fn(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


@entry
def softmax():
    """Softmax over the last axis of a 16x64 tensor: one op."""
    return _Fn(lambda x: torch.softmax(x, -1)), (torch.randn(16, 64),)


@entry
def layer_norm():
    torch.manual_seed(0)
    return torch.nn.LayerNorm(64).eval(), (torch.randn(16, 64),)


@entry
def mlp_8x32():
    """A 2-layer MLP on a batch of 8 x 32 features."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32)).eval(), \
        (torch.randn(8, 32),)


@entry
def add_mul_chain():
    """Six elementwise ops on two 8x32 tensors."""
    return _Fn(lambda x, y: ((x * 2.0 + y) * y - 1.0).relu() * 0.5 + x), (torch.randn(8, 32), torch.randn(8, 32))


@entry
def small_conv():
    """A 3->8 channel 3x3 convolution and ReLU on a 16x16 image."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval(), \
        (torch.randn(1, 3, 16, 16),)


class _GeluResidual(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x)) + x


@entry
def gelu_residual():
    """Linear, GELU and a residual add on 4 x 64: a transformer block's small tail."""
    torch.manual_seed(0)
    return _GeluResidual().eval(), (torch.randn(4, 64),)


def export_tiny(directory: Path, names=None) -> dict[str, Path]:
    """Exports the set (the ones missing from ``directory``); returns name -> .pte path."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in names or TINY:
        pte = directory / f"{name}.pte"
        if not pte.exists():
            from executorch.exir import to_edge_transform_and_lower

            module, inputs = TINY[name]()
            with torch.no_grad():
                exported = torch.export.export(module, inputs)
            program = to_edge_transform_and_lower(exported).to_executorch()
            tmp = pte.with_suffix(".tmp")
            tmp.write_bytes(program.buffer)
            torch.save(list(inputs), directory / f"{name}.inputs.pt")
            tmp.replace(pte)
        paths[name] = pte
    return paths
