"""Bundled programs (.bpte) made with ExecuTorch's devtools from programs exported once (tests/support/exporting).

Bundling itself is quick (no export): each .bpte is made from a cached .pte, its expected outputs from the
eager model. ``bundle`` takes the program's path, so ExecuTorch's checks of a bundle against its program
are skipped and a test can bundle what the exporter would refuse (a wrong expected output, an integer input
the program was not exported with).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from tests.support.exporting import Exported, ExportSpec, export_program

Case = tuple[Sequence, Sequence]  # inputs, expected outputs


def bundle(pte: Path, cases: dict[str, list[Case]], edit=None) -> bytes:
    """A .bpte of ``pte`` with ``cases`` per method; ``edit(schema)`` may change ExecuTorch's schema objects first."""
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.core import BundledProgram
    from executorch.devtools.bundled_program.serialize import (
        _bundled_program_schema_to_flatbuffer,
        serialize_from_bundled_program_to_flatbuffer,
    )

    suites = [
        MethodTestSuite(method_name=name, test_cases=[
            MethodTestCase(inputs=list(inputs), expected_outputs=list(outputs)) for inputs, outputs in items
        ])
        for name, items in cases.items()
    ]
    program = BundledProgram(None, suites, pte_file_path=str(pte))
    if edit is None:
        return serialize_from_bundled_program_to_flatbuffer(program)
    schema = program.serialize_to_schema()
    edit(schema)
    return _bundled_program_schema_to_flatbuffer(schema)


def _outputs(result) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def eager_cases(module, method: str, inputs: list[tuple]) -> list[Case]:
    with torch.no_grad():
        return [(x, _outputs(getattr(module, method)(*x))) for x in inputs]


# -- ExecuTorch's own sample: two methods of int32 tensors and an int ----------------------------------


def sample() -> tuple[Exported, torch.nn.Module]:
    """ExecuTorch's SampleModel (devtools/bundled_program/util/test_util.py): methods encode and decode."""
    from executorch.devtools.bundled_program.util.test_util import SampleModel, StatefulWrapperModule

    model = SampleModel()

    def build() -> ExportSpec:
        inputs = (torch.ones(2, 2, dtype=torch.int32), torch.ones(2, 2, dtype=torch.int32), 2)
        return ExportSpec({name: StatefulWrapperModule(model, getattr(model, name)) for name in model.method_names},
                          {name: inputs for name in model.method_names}, strict=True)

    return export_program("bundled-sample", build), model


def sample_inputs(n: int, seed: int) -> list[tuple]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(-5, 5, (2, 2), generator=g, dtype=torch.int32),
             torch.randint(-5, 5, (2, 2), generator=g, dtype=torch.int32), 2) for _ in range(n)]


# -- floats: a method of three outputs (Float, Float, Bool) and one with a Double input ----------------


class TwoMethods(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng():  # the same weights in every process, the caller's generator untouched
            torch.manual_seed(0)
            self.linear = torch.nn.Linear(8, 4)
            self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return torch.relu(self.linear(x)), x.sum(dim=-1), x > 0

    def mix(self, x, y, w: float):
        return (self.norm(x) * w + y,)


class _Mix(torch.nn.Module):
    def __init__(self, base: TwoMethods) -> None:
        super().__init__()
        self.base = base

    def forward(self, x, y, w: float):
        return self.base.mix(x, y, w)


MIX_WEIGHT = 0.25


def two_methods(**config) -> tuple[Exported, TwoMethods]:
    """TwoMethods exported (``config``: ExecutorchBackendConfig keywords, e.g. external constants)."""
    model = TwoMethods().eval()
    key = "bundled-two-methods" + "".join(f"-{k}" for k in sorted(config))

    def build() -> ExportSpec:
        x = torch.randn(3, 8)
        return ExportSpec({"forward": model, "mix": _Mix(model)},
                          {"forward": (x,), "mix": (x, torch.randn(3, 8), MIX_WEIGHT)}, config=dict(config))

    return export_program(key, build), model


def two_methods_inputs(n: int, seed: int) -> dict[str, list[tuple]]:
    g = torch.Generator().manual_seed(seed)
    return {
        "forward": [(torch.randn(3, 8, generator=g),) for _ in range(n)],
        "mix": [(torch.randn(3, 8, generator=g), torch.randn(3, 8, generator=g), MIX_WEIGHT) for _ in range(n)],
    }
