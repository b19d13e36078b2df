"""Run a program on pterun and on ExecuTorch's runtime with the same inputs, and compare.

Inputs are flattened the way ExecuTorch flattens a method's arguments (nested
tuples become consecutive inputs), so a model taking ``(x, (h, c))`` is called
with ``[x, h, c]`` on both runtimes.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from torch.utils._pytree import tree_leaves

import pterun
from tests.support.compare import FLOAT_RTOL, assert_matches
from tests.support.exporting import Exported, ExportSpec, export_program
from tests.support.models import build
from tests.support.oracle import run_reference

LOWERINGS = ("portable", "transform")
lowerings = pytest.mark.parametrize("lower", LOWERINGS)  # a test of each lowering


def seeded(seed: int, *shape: int) -> torch.Tensor:
    """A standard normal tensor drawn from a generator of its own, seeded with ``seed``."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def flat(inputs) -> list:
    return list(tree_leaves(inputs))


def load(exported: Exported) -> pterun.Program:
    return pterun.Runtime.get().load_program(exported.pte, data_path=list(exported.ptd) or None)


def export_model(name: str, lower, *, key: str | None = None, **spec) -> Exported:
    """Exports the model ``name`` of tests.support.models (once per run and lowering; ``lower`` as ExportSpec
    takes it, under ``key`` when it is no lowering's name)."""

    def make() -> ExportSpec:
        model = build(name)
        return ExportSpec(
            model.module, model.example_inputs, dynamic_shapes=model.dynamic_shapes, lower=lower, **spec
        )

    suffix = "".join(f"-{k}" for k in sorted(spec))
    return export_program(key or f"model-{name}-{lower}{suffix}", make)


def check(
    exported: Exported,
    inputs,
    *,
    method: str = "forward",
    program: pterun.Program | None = None,
    rtol: float = FLOAT_RTOL,
) -> list:
    """Runs ``method`` on both runtimes and asserts the outputs match; returns pterun's outputs."""
    program = program or load(exported)
    args = flat(inputs)
    actual = program.load_method(method).execute(args)
    expected = run_reference(exported.pte, args, method, exported.ptd)
    assert_matches(actual, expected, rtol=rtol, what=f"{exported.key}:{method}")
    assert_same_layouts(actual, expected, what=f"{exported.key}:{method}")
    return actual


def assert_same_layouts(actual: Sequence, expected: Sequence, *, what: str = "output") -> None:
    """Tensor outputs are laid out in memory as ExecuTorch lays them out (its dim order, e.g. channels-last).

    Strides of dimensions of size 1 say nothing about the layout and are left out.
    """
    for i, (a, e) in enumerate(zip(actual, expected)):
        if isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor) and e.numel() > 1:
            layout = [(d, s) for d, (s, n) in enumerate(zip(e.stride(), e.shape)) if n != 1]
            got = [(d, s) for d, (s, n) in enumerate(zip(a.stride(), a.shape)) if n != 1]
            assert got == layout, f"{what}[{i}]: strides {a.stride()}, ExecuTorch's {e.stride()}"


def check_model(name: str, lower: str, seeds: Sequence[int] = (0, 1), *, rtol: float = FLOAT_RTOL) -> None:
    """The model's program on several inputs, through one loaded method (so reuse across calls is covered)."""
    exported = export_model(name, lower)
    program = load(exported)
    model_inputs = _inputs_for(name)
    for seed in seeds:
        check(exported, model_inputs(seed), program=program, rtol=rtol)


_INPUTS: dict[str, object] = {}


def _inputs_for(name: str):
    # Building a model only for its input function is cheap next to exporting, and keeps the two in step.
    fn = _INPUTS.get(name)
    if fn is None:
        fn = _INPUTS[name] = build(name).make_inputs
    return fn
