"""The operator table: how each fuzz operator runs (eagerly, exported, and on meta tensors for typing)
and how the generator proposes operands and attributes for it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


class Invalid(Exception):
    """A node not valid where it was put (the generator tries another; the shrinker drops the candidate)."""


@dataclass(frozen=True)
class Param:
    """A constant of one node: a weight (small values on a grid), a positive scale, or indices."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    init: str = "weight"  # weight | positive | index | permutation
    bound: int = 0  # index: values in [0, bound); permutation: the first shape[0] of a permutation of bound


@dataclass(frozen=True)
class OpDef:
    name: str
    run: Callable  # (ctx, *tensors, **attrs) -> tensor | tuple of tensors | None (in place)
    propose: Callable  # (gen) -> (arg names, attrs) | None
    params: Callable | None  # (arg types, attrs) -> {name: Param}
    kind: str  # "plain", "view" (outputs alias the first argument) or "inplace" (writes the first argument)
    weight: float
    broadcasts: bool  # a view whose elements share memory (expand): never written in place


OPS: dict[str, OpDef] = {}


def op(
    name: str,
    propose: Callable,
    *,
    params: Callable | None = None,
    kind: str = "plain",
    weight: float = 1.0,
    broadcasts: bool = False,
):
    def register(run: Callable) -> Callable:
        assert name not in OPS, name
        OPS[name] = OpDef(name, run, propose, params, kind, weight, broadcasts)
        return run

    return register


class Ctx:
    """What a node sees besides its arguments: the sizes of dynamic dims and its own constants."""

    def __init__(self, sizes: dict, params: dict[str, torch.Tensor]):
        self.sizes = sizes
        self.params = params

    def size(self, dim):
        return dim if isinstance(dim, int) else self.sizes[dim]

    def shape(self, dims) -> list:
        return [self.size(d) for d in dims]

    def param(self, name: str) -> torch.Tensor:
        return self.params[name]
