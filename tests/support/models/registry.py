"""What a registered model is, how one is registered and built, and the inputs models draw."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

VOCAB = 128
# The encoders' common size: two layers of four heads, 64 wide, 128 in the feed-forward block.
ENCODER = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


@dataclass
class Model:
    module: torch.nn.Module
    make_inputs: Callable[[int], tuple]  # seed -> inputs; seed 0 is what the program is exported with
    dynamic_shapes: Any = None

    @property
    def example_inputs(self) -> tuple:
        return self.make_inputs(0)


MODELS: dict[str, Callable[[], Model]] = {}


def builder(name: str):
    def register(fn: Callable[[], Model]) -> Callable[[], Model]:
        MODELS[name] = fn
        return fn

    return register


def build(name: str) -> Model:
    torch.manual_seed(0)
    model = MODELS[name]()
    model.module.eval()
    return model


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + seed)


def randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed))


def tokens(seed: int, vocab: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=_gen(seed))


class Field(torch.nn.Module):
    """Calls a transformers model and returns the named fields of its output (exportable: tensors only)."""

    def __init__(self, model: torch.nn.Module, *names: str, **kwargs: Any) -> None:
        super().__init__()
        self.model = model
        self.names = names
        self.kwargs = kwargs

    def forward(self, *args):
        out = self.model(*args, **self.kwargs)
        values = tuple(getattr(out, n) for n in self.names)
        return values[0] if len(values) == 1 else values


def from_transformers(
    config: str, model: str, *fields: str, inputs: Callable[[int], tuple], call: dict | None = None,
    **settings,
) -> Model:
    """transformers' ``model`` class made from its ``config`` class with ``settings``; returns ``fields``."""
    import transformers

    module = getattr(transformers, model)(getattr(transformers, config)(**settings))
    return Model(Field(module, *fields, **(call or {})), inputs)
