"""What the caller hands a method and gets back, checked against ExecuTorch's runtime: unplanned inputs and
outputs, outputs that alias an input, each other or a constant, scalar inputs, inputs that require grad."""

from __future__ import annotations

import pytest
import torch
from executorch.exir.passes import MemoryPlanningPass
from torch.export import Dim

import pterun
from pterun.format import Dynamism
from tests.support.compare import assert_matches
from tests.support.differential import check, load, lowerings, seeded
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import run_reference
from tests.support.premises import method_plan, tensor_spec


class Residual(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x, y):
        h = self.fc(x) + y
        return h, torch.sigmoid(h), (x > 0).sum(-1)


# Inputs, outputs, or both, left to the caller by the memory planning.
unplanned = pytest.mark.parametrize(
    "planning",
    [
        dict(alloc_graph_input=False),
        dict(alloc_graph_output=False),
        dict(alloc_graph_input=False, alloc_graph_output=False),
    ],
    ids=["inputs-unplanned", "outputs-unplanned", "both-unplanned"],
)


@unplanned
@lowerings
def test_unplanned_inputs_and_outputs(lower, planning):
    def build():
        torch.manual_seed(0)
        return ExportSpec(
            Residual(),
            (torch.randn(2, 8), torch.randn(2, 8)),
            lower=lower,
            config={"memory_planning_pass": MemoryPlanningPass(**planning)},
        )

    key = "-".join(k for k, v in sorted(planning.items()))
    exported = export_program(f"feature-unplanned-{key}-{lower}", build)
    plan = method_plan(exported)
    inputs_planned = [tensor_spec(plan, i).memory_id is not None for i in plan.inputs]
    outputs_planned = [tensor_spec(plan, i).memory_id is not None for i in plan.outputs]
    assert inputs_planned == [planning.get("alloc_graph_input", True)] * 2
    assert outputs_planned == [planning.get("alloc_graph_output", True)] * 3
    method = load(exported).load_method("forward")
    results = []
    for seed in range(3):
        x, y = seeded(seed, 2, 8), seeded(seed + 10, 2, 8)
        out = method.execute([x, y], clone_outputs=False)
        assert_matches(out, run_reference(exported.pte, [x, y]), what=f"call {seed}")
        results.append(([t.clone() for t in out], out))
    if not planning.get("alloc_graph_output", True):
        # Outputs handed out uncloned belong to the caller: later calls do not overwrite them.
        for kept, out in results:
            assert_matches(out, kept)


class DynamicPair(torch.nn.Module):
    def forward(self, x):
        return x.cumsum(0), x[:, :2] * 3


@unplanned
@lowerings
def test_dynamic_shapes_with_unplanned_inputs_and_outputs(lower, planning):
    n = Dim("n", min=2, max=10)

    def build():
        return ExportSpec(
            DynamicPair(),
            (torch.randn(4, 3),),
            lower=lower,
            dynamic_shapes=({0: n},),
            config={"memory_planning_pass": MemoryPlanningPass(**planning)},
        )

    key = "-".join(k for k, v in sorted(planning.items()))
    exported = export_program(f"feature-dynamic-unplanned-{key}-{lower}", build)
    plan = method_plan(exported)
    out = tensor_spec(plan, plan.outputs[0])
    assert out.dynamism == Dynamism.DYNAMIC_BOUND
    assert (out.memory_id is None) == (not planning.get("alloc_graph_output", True))
    program = load(exported)
    for size in (4, 10, 2, 7):
        check(exported, (seeded(size, size, 3),), program=program)


class Aliases(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(6.0).reshape(2, 3))

    def forward(self, x):
        y = x * 3
        return x, y, y, self.table, x.view(-1)


@lowerings
def test_outputs_aliasing_inputs_each_other_and_constants(lower):
    exported = export_program(
        f"feature-aliases-{lower}", lambda: ExportSpec(Aliases(), (torch.randn(2, 3),), lower=lower)
    )
    method = load(exported).load_method("forward")
    for seed in range(2):
        x = seeded(seed, 2, 3)
        out = method.execute([x])
        assert_matches(out, run_reference(exported.pte, [x]))
        # Cloned outputs are the caller's own.
        out[1].zero_()
        out[3].zero_()
    assert_matches(method.execute([x]), run_reference(exported.pte, [x]))


class ScalarInputs(torch.nn.Module):
    def forward(self, x, k: int, f: float, flag: bool):
        return (x * k + f) if flag else (x - f)


@lowerings
def test_scalar_inputs_must_be_the_exported_values(lower):
    def build():
        return ExportSpec(ScalarInputs(), (torch.ones(3), 3, 0.5, True), lower=lower)

    exported = export_program(f"feature-scalar-inputs-{lower}", build)
    method = load(exported).load_method("forward")
    check(exported, (seeded(0, 3), 3, 0.5, True))
    # The scalars were specialized at export: ExecuTorch refuses other values, and so does pterun.
    with pytest.raises(RuntimeError):
        run_reference(exported.pte, [seeded(0, 3), 4, 0.5, True])
    with pytest.raises(pterun.errors.InvalidArgument):
        method.execute([seeded(0, 3), 4, 0.5, True])
    x = seeded(1, 3)
    assert_matches(method.execute([x, 3, 0.5, True]), run_reference(exported.pte, [x, 3, 0.5, True]))


@pytest.mark.parametrize("planned", [True, False], ids=["planned", "unplanned"])
def test_inputs_that_require_grad(planned):
    """Inputs are data, as in ExecuTorch: no autograd history reaches the outputs or stays in the method."""
    import gc
    import weakref

    def build():
        return ExportSpec(
            Aliases(),
            (torch.randn(2, 3),),
            config={"memory_planning_pass": MemoryPlanningPass(alloc_graph_input=planned)},
        )

    exported = export_program(f"feature-requires-grad-{planned}", build)
    method = load(exported).load_method("forward")
    x = seeded(0, 2, 3).requires_grad_()
    expected = run_reference(exported.pte, [x.detach()])
    out = method.execute([x])
    assert_matches(out, expected)
    assert not any(o.requires_grad for o in out)
    out[0].numpy()  # plain tensors: no "call tensor.detach().numpy() instead"
    alive = weakref.ref(x)
    del x, out
    gc.collect()
    assert alive() is None, "the method keeps the caller's input alive"
