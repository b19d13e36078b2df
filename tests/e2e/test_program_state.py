"""State across calls, checked against ExecuTorch's runtime: mutable buffers, and inputs a program writes."""

from __future__ import annotations

import pytest
import torch
from executorch.exir.passes import MemoryPlanningPass

from pterun.format import TensorSpec
from tests.support.compare import assert_matches
from tests.support.differential import load, lowerings, seeded
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import reference_module, run_reference
from tests.support.premises import method_plan


class Accumulator(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.linspace(-1, 1, 12).reshape(3, 4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.total.add_(x)
        self.steps.add_(1)
        return self.total * 2, self.steps.clone(), self.total.mean()


@lowerings
def test_mutable_buffers_keep_state_across_calls(lower):
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    def build():
        # "total" starts from its initial value in the program; "steps" is left to the runtime,
        # whose planned memory starts zeroed.
        return ExportSpec(
            Accumulator(),
            (torch.randn(3, 4),),
            lower=lower,
            config={"passes": [InitializedMutableBufferPass(["total"])]},
        )

    exported = export_program(f"feature-mutable-{lower}", build)
    plan = method_plan(exported)
    planned = [v for v in plan.values if isinstance(v, TensorSpec) and v.memory_id is not None]
    assert [v.sizes for v in planned if v.data_buffer_idx] == [(3, 4)], "total has no initial value"
    assert ("aten::copy_", "") in plan.operators, "no buffer is written back"
    method = load(exported).load_method("forward")
    reference = reference_module(exported.pte)
    for step in range(4):
        x = seeded(step, 3, 4)
        expected = list(reference.run_method("forward", [x.clone()]))
        actual = method.execute([x])
        assert_matches(actual, expected, what=f"call {step}")
    assert actual[1].item() == 4
    # A program loaded again starts from the initial values.
    fresh = load(exported).load_method("forward")
    x = seeded(0, 3, 4)
    assert_matches(fresh.execute([x]), run_reference(exported.pte, [x]))


class RingBuffer(torch.nn.Module):
    """State written through index_put at a position the caller gives (as KV caches are)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(6, 4))

    def forward(self, row, pos):
        self.cache.index_put_((pos,), row)
        return self.cache.sum(0), self.cache[pos].clone()


@lowerings
def test_mutable_buffer_indexed_writes(lower):
    def build():
        return ExportSpec(RingBuffer(), (torch.randn(1, 4), torch.tensor([0])), lower=lower)

    exported = export_program(f"feature-ring-{lower}", build)
    method = load(exported).load_method("forward")
    reference = reference_module(exported.pte)
    for step, pos in enumerate([0, 3, 5, 3, 1]):
        args = [seeded(step, 1, 4), torch.tensor([pos])]
        assert_matches(
            method.execute(args),
            list(reference.run_method("forward", [a.clone() for a in args])),
            what=f"call {step}",
        )


class MutatesInput(torch.nn.Module):
    def forward(self, x, y):
        x.add_(y)
        return x * 2


@pytest.mark.parametrize("planned", [True, False], ids=["planned", "unplanned"])
@lowerings
def test_input_mutation(lower, planned):
    """A program writing into its input writes the caller's tensor exactly when the input is unplanned."""

    def build():
        return ExportSpec(
            MutatesInput(),
            (torch.ones(3), torch.ones(3)),
            lower=lower,
            config={"memory_planning_pass": MemoryPlanningPass(alloc_graph_input=planned)},
        )

    exported = export_program(f"feature-input-mutation-{planned}-{lower}", build)
    x, y = torch.arange(3.0), seeded(0, 3)
    x_reference = x.clone()
    expected = list(reference_module(exported.pte).run_method("forward", [x_reference, y.clone()]))
    actual = load(exported).load_method("forward").execute([x, y])
    assert_matches(actual, expected)
    assert_matches(x, x_reference, what="the caller's input after the call")
    assert torch.equal(x, torch.arange(3.0)) == planned
