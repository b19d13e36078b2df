"""Program features, each checked against ExecuTorch's runtime.

Multi-method programs, bounded dynamic shapes, weights in a .ptd, mutable
state across calls, unplanned inputs and outputs, channels-last tensors, list,
integer, bool and scalar outputs, and outputs that alias each other, an input
or a constant. Each test first asserts the premise it depends on (that the
exporter really produced the feature), so a change in the exporter cannot
turn it into a test of something else.
"""

from __future__ import annotations

import pytest
import torch
from executorch.exir.passes import MemoryPlanningPass
from torch.export import Dim

import pterun
from pterun.errors import ErrorCode, NotSupported
from pterun.format import Dynamism, ProgramFile, TensorSpec
from tests.support.compare import assert_matches
from tests.support.differential import LOWERINGS, check, load
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import reference_module, run_reference

lowerings = pytest.mark.parametrize("lower", LOWERINGS)


def _plan(exported, method: str = "forward"):
    return ProgramFile(exported.pte).plan(method)


def _spec(plan, index: int) -> TensorSpec:
    value = plan.values[index]
    assert isinstance(value, TensorSpec), f"value {index} is {value!r}, not a tensor"
    return value


def _seeded(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# -- several methods ----------------------------------------------------------------------------------


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 16)

    def forward(self, x):
        return torch.tanh(self.proj(x))


class Decoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 4)

    def forward(self, h, scale):
        return self.proj(h) * scale, h.mean(-1)


@lowerings
def test_multi_method_program(lower):
    def build():
        torch.manual_seed(0)
        return ExportSpec(
            {"encode": Encoder(), "decode": Decoder()},
            {"encode": (torch.randn(3, 8),), "decode": (torch.randn(3, 16), torch.randn(3, 1))},
            lower=lower,
        )

    exported = export_program(f"feature-multi-method-{lower}", build)
    program = load(exported)
    assert program.method_names == {"encode", "decode"}
    x, scale = _seeded(1, 3, 8), _seeded(2, 3, 1)
    (h,) = check(exported, (x,), method="encode", program=program)
    check(exported, (h, scale), method="decode", program=program)
    # Methods of one program are independent: running one leaves the other's results alone.
    again = program.load_method("encode").execute([x])
    assert_matches(again, [h])


# -- bounded dynamic shapes ---------------------------------------------------------------------------


class Ragged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x, y):
        h = torch.relu(self.fc(x)) + y
        return h, h.sum(0), torch.cat([x, y], 0), x.shape[0] * 2


@lowerings
def test_dynamic_shapes_within_bound(lower):
    n = Dim("n", min=2, max=12)

    def build():
        torch.manual_seed(0)
        return ExportSpec(
            Ragged(), (torch.randn(4, 6), torch.randn(4, 6)), lower=lower, dynamic_shapes=({0: n}, {0: n})
        )

    exported = export_program(f"feature-dynamic-{lower}", build)
    plan = _plan(exported)
    for index in plan.inputs:
        spec = _spec(plan, index)
        assert spec.dynamism == Dynamism.DYNAMIC_BOUND and spec.sizes == (12, 6)
    program = load(exported)
    for size in (4, 2, 12, 7, 3):
        out = check(exported, (_seeded(size, size, 6), _seeded(size + 50, size, 6)), program=program)
        assert out[0].shape == (size, 6) and out[3] == size * 2


@lowerings
def test_dynamic_shape_above_bound_is_refused_and_method_still_works(lower):
    n = Dim("n", min=2, max=12)

    def build():
        torch.manual_seed(0)
        return ExportSpec(
            Ragged(), (torch.randn(4, 6), torch.randn(4, 6)), lower=lower, dynamic_shapes=({0: n}, {0: n})
        )

    exported = export_program(f"feature-dynamic-{lower}", build)
    method = load(exported).load_method("forward")
    check(exported, (_seeded(0, 5, 6), _seeded(1, 5, 6)))
    with pytest.raises(NotSupported) as info:
        method.execute([_seeded(2, 13, 6), _seeded(3, 13, 6)])
    assert info.value.code == ErrorCode.NotSupported == 0x10
    # ExecuTorch refuses it too.
    with pytest.raises(RuntimeError):
        run_reference(exported.pte, [_seeded(2, 13, 6), _seeded(3, 13, 6)])
    # A static dimension changed within the element bound: accepted as an input by both runtimes
    # (they check the element count only), then refused by the first kernel that sees it.
    bad = [_seeded(2, 8, 5), _seeded(3, 8, 5)]
    with pytest.raises(RuntimeError):
        run_reference(exported.pte, bad)
    with pytest.raises(pterun.errors.PteError):
        method.execute(bad)
    # The refusals left nothing half-set: the next call with a good shape works.
    x, y = _seeded(4, 6, 6), _seeded(5, 6, 6)
    assert_matches(method.execute([x, y]), run_reference(exported.pte, [x, y]))


class DynamicConv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.conv(x))
        return y, self.pool(y).flatten(1), y.amax(dim=(2, 3))


@lowerings
def test_dynamic_image_size(lower):
    h, w = Dim("h", min=4, max=20), Dim("w", min=4, max=24)

    def build():
        torch.manual_seed(0)
        return ExportSpec(
            DynamicConv(), (torch.randn(1, 3, 8, 8),), lower=lower, dynamic_shapes=({2: h, 3: w},)
        )

    exported = export_program(f"feature-dynamic-conv-{lower}", build)
    assert _spec(_plan(exported), _plan(exported).inputs[0]).dynamism == Dynamism.DYNAMIC_BOUND
    program = load(exported)
    for hw in ((8, 8), (20, 24), (5, 17), (12, 4), (20, 24)):
        check(exported, (_seeded(hw[0], 1, 3, *hw),), program=program)


# -- weights in a data file -----------------------------------------------------------------------------


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(10, 20)
        self.b = torch.nn.Linear(20, 5)
        self.register_buffer("offset", torch.linspace(-1, 1, 5))

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) + self.offset


@lowerings
def test_external_constants_in_ptd(lower):
    def build():
        torch.manual_seed(0)
        return ExportSpec(
            TwoLayers(), (torch.randn(2, 10),), lower=lower, config={"external_constants": True}
        )

    exported = export_program(f"feature-external-{lower}", build)
    assert exported.ptd, "the exporter wrote no .ptd"
    plan = _plan(exported)
    external = [v for v in plan.values if isinstance(v, TensorSpec) and v.external]
    assert len(external) >= 4, "the weights are not stored outside the program"
    assert all(v.memory_id is None for v in external)
    x = _seeded(1, 2, 10)
    check(exported, (x,))
    # Without its data file the method cannot load.
    program = pterun.Runtime.get().load_program(exported.pte)
    with pytest.raises(pterun.errors.PteError):
        program.load_method("forward")


# -- mutable state --------------------------------------------------------------------------------------


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
    plan = _plan(exported)
    planned = [v for v in plan.values if isinstance(v, TensorSpec) and v.memory_id is not None]
    assert [v.sizes for v in planned if v.data_buffer_idx] == [(3, 4)], "total has no initial value"
    assert ("aten::copy_", "") in plan.operators, "no buffer is written back"
    method = load(exported).load_method("forward")
    reference = reference_module(exported.pte)
    for step in range(4):
        x = _seeded(step, 3, 4)
        expected = list(reference.run_method("forward", [x.clone()]))
        actual = method.execute([x])
        assert_matches(actual, expected, what=f"call {step}")
    assert actual[1].item() == 4
    # A program loaded again starts from the initial values.
    fresh = load(exported).load_method("forward")
    x = _seeded(0, 3, 4)
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
        args = [_seeded(step, 1, 4), torch.tensor([pos])]
        assert_matches(
            method.execute(args),
            list(reference.run_method("forward", [a.clone() for a in args])),
            what=f"call {step}",
        )


# -- unplanned inputs and outputs -----------------------------------------------------------------------


class Residual(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x, y):
        h = self.fc(x) + y
        return h, torch.sigmoid(h), (x > 0).sum(-1)


@pytest.mark.parametrize(
    "planning",
    [
        dict(alloc_graph_input=False),
        dict(alloc_graph_output=False),
        dict(alloc_graph_input=False, alloc_graph_output=False),
    ],
    ids=["inputs-unplanned", "outputs-unplanned", "both-unplanned"],
)
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
    plan = _plan(exported)
    inputs_planned = [_spec(plan, i).memory_id is not None for i in plan.inputs]
    outputs_planned = [_spec(plan, i).memory_id is not None for i in plan.outputs]
    assert inputs_planned == [planning.get("alloc_graph_input", True)] * 2
    assert outputs_planned == [planning.get("alloc_graph_output", True)] * 3
    method = load(exported).load_method("forward")
    results = []
    for seed in range(3):
        x, y = _seeded(seed, 2, 8), _seeded(seed + 10, 2, 8)
        out = method.execute([x, y], clone_outputs=False)
        assert_matches(out, run_reference(exported.pte, [x, y]), what=f"call {seed}")
        results.append(([t.clone() for t in out], out))
    if not planning.get("alloc_graph_output", True):
        # Outputs handed out uncloned belong to the caller: later calls do not overwrite them.
        for kept, out in results:
            assert_matches(out, kept)


# -- layouts --------------------------------------------------------------------------------------------


class ConvBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pool = torch.nn.MaxPool2d(2)

    # No batch norm: ExecuTorch's portable kernel for it takes contiguous tensors only.
    def forward(self, x):
        y = torch.relu(self.conv(x))
        z = self.dw(y) + y
        return z, y.mean((2, 3)), self.pool(z), torch.nn.functional.interpolate(z, scale_factor=2.0)


@lowerings
def test_channels_last_input(lower):
    def build():
        torch.manual_seed(0)
        return ExportSpec(
            ConvBlock(), (torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last),), lower=lower
        )

    exported = export_program(f"feature-channels-last-{lower}", build)
    plan = _plan(exported)
    assert _spec(plan, plan.inputs[0]).dim_order == (0, 2, 3, 1)
    x = _seeded(3, 2, 4, 6, 6).to(memory_format=torch.channels_last)
    out = check(exported, (x,))
    assert _spec(plan, plan.outputs[0]).dim_order == (0, 2, 3, 1)
    assert out[0].is_contiguous(memory_format=torch.channels_last)


@lowerings
def test_channels_last_with_dynamic_image_size(lower):
    """Tensors whose shape changes keep their planned dim order (ExecuTorch re-strides them by it)."""
    h, w = Dim("h", min=4, max=20), Dim("w", min=4, max=24)

    def build():
        torch.manual_seed(0)
        return ExportSpec(
            ConvBlock(),
            (torch.randn(2, 4, 8, 8).to(memory_format=torch.channels_last),),
            lower=lower,
            dynamic_shapes=({2: h, 3: w},),
        )

    exported = export_program(f"feature-channels-last-dynamic-{lower}", build)
    plan = _plan(exported)
    first_output = _spec(plan, plan.outputs[0])
    assert first_output.dim_order == (0, 2, 3, 1) and first_output.dynamism == Dynamism.DYNAMIC_BOUND
    program = load(exported)
    for hw in ((8, 8), (20, 24), (6, 10), (8, 8)):
        out = check(
            exported, (_seeded(hw[0], 2, 4, *hw).to(memory_format=torch.channels_last),), program=program
        )
        assert out[0].is_contiguous(memory_format=torch.channels_last)


class Permuted(torch.nn.Module):
    def forward(self, x):
        return x.permute(0, 2, 3, 1).contiguous() * 2, x.transpose(1, 2)


@lowerings
def test_permuted_outputs(lower):
    exported = export_program(
        f"feature-permuted-{lower}", lambda: ExportSpec(Permuted(), (torch.randn(2, 3, 4, 5),), lower=lower)
    )
    check(exported, (_seeded(0, 2, 3, 4, 5),))


# -- outputs of every kind -------------------------------------------------------------------------------


class ListOutputs(torch.nn.Module):
    def forward(self, x):
        a, b, c = torch.split(x, [2, 3, 1], dim=1)
        rows = torch.unbind(x, 0)
        values, indices = torch.topk(x, 3, dim=-1)
        chunks = torch.chunk(x, 2, dim=1)
        return a, b, c * 2, rows[0] + rows[-1], values, indices, chunks[1]


@lowerings
def test_list_outputs(lower):
    exported = export_program(
        f"feature-lists-{lower}", lambda: ExportSpec(ListOutputs(), (torch.randn(3, 6),), lower=lower)
    )
    out = check(exported, (_seeded(4, 3, 6),))
    assert out[5].dtype == torch.long


class IntBoolOutputs(torch.nn.Module):
    def forward(self, x, ids):
        return (
            x.argmax(-1),
            x > 0,
            (x > 0).any(-1),
            ids * 3 + 1,
            ids.to(torch.int32) // 2,
            torch.where(x > 0, ids, -ids),
            (ids % 3 == 0).logical_and(x < 0),
            x.to(torch.int64),
            torch.cumsum(ids, -1),
        )


@lowerings
def test_integer_and_bool_outputs(lower):
    def build():
        return ExportSpec(IntBoolOutputs(), (torch.randn(3, 5), torch.randint(-9, 9, (3, 5))), lower=lower)

    exported = export_program(f"feature-int-bool-{lower}", build)
    x = _seeded(6, 3, 5) * 4
    ids = torch.randint(-9, 9, (3, 5), generator=torch.Generator().manual_seed(6))
    out = check(exported, (x, ids))
    assert [o.dtype for o in out] == [
        torch.long,
        torch.bool,
        torch.bool,
        torch.long,
        torch.int32,
        torch.long,
        torch.bool,
        torch.long,
        torch.long,
    ]


class ScalarOutputs(torch.nn.Module):
    def forward(self, x):
        return x * 2, x.shape[0], x.shape[0] * x.shape[1] + 1


@lowerings
def test_scalar_outputs(lower):
    n = Dim("n", min=2, max=8)

    def build():
        return ExportSpec(ScalarOutputs(), (torch.randn(3, 4),), lower=lower, dynamic_shapes=({0: n},))

    exported = export_program(f"feature-scalars-{lower}", build)
    program = load(exported)
    for size in (3, 8, 2):
        out = check(exported, (_seeded(size, size, 4),), program=program)
        assert out[1:] == [size, size * 4 + 1] and all(type(o) is int for o in out[1:])


class StaticScalar(torch.nn.Module):
    def forward(self, x):
        return x + 1, x.shape[1]


@lowerings
def test_static_int_output(lower):
    exported = export_program(
        f"feature-static-int-{lower}", lambda: ExportSpec(StaticScalar(), (torch.randn(2, 7),), lower=lower)
    )
    out = check(exported, (_seeded(0, 2, 7),))
    assert out[1] == 7


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
        x = _seeded(seed, 2, 3)
        out = method.execute([x])
        assert_matches(out, run_reference(exported.pte, [x]))
        # Cloned outputs are the caller's own.
        out[1].zero_()
        out[3].zero_()
    assert_matches(method.execute([x]), run_reference(exported.pte, [x]))


class Inplace(torch.nn.Module):
    def forward(self, x, y):
        z = x.clone()
        z.mul_(2).add_(y)
        z[0] = -1.0
        z.masked_fill_(y > 1, 0.0)
        return z


@lowerings
def test_inplace_ops_and_views(lower):
    exported = export_program(
        f"feature-inplace-{lower}",
        lambda: ExportSpec(Inplace(), (torch.randn(4, 5), torch.randn(4, 5)), lower=lower),
    )
    check(exported, (_seeded(0, 4, 5), _seeded(1, 4, 5)))


class Dtypes(torch.nn.Module):
    def forward(self, a, b, c, d):
        return (
            a.to(torch.float16) * 2,
            (b.float() + a).to(torch.bfloat16),
            c.to(torch.int8) + 1,
            d.to(torch.uint8) * 2,
            a.double().sin(),
            (c > 2).to(torch.float32),
        )


@lowerings
def test_mixed_dtypes(lower):
    def build():
        return ExportSpec(
            Dtypes(),
            (
                torch.randn(3, 4),
                torch.randn(3, 4, dtype=torch.float64),
                torch.randint(0, 9, (3, 4), dtype=torch.int32),
                torch.randint(0, 100, (3, 4), dtype=torch.int16),
            ),
            lower=lower,
        )

    exported = export_program(f"feature-dtypes-{lower}", build)
    g = torch.Generator().manual_seed(3)
    args = (
        _seeded(0, 3, 4),
        torch.randn(3, 4, dtype=torch.float64, generator=g),
        torch.randint(0, 9, (3, 4), dtype=torch.int32, generator=g),
        torch.randint(0, 100, (3, 4), dtype=torch.int16, generator=g),
    )
    check(exported, args)


class DynamicPair(torch.nn.Module):
    def forward(self, x):
        return x.cumsum(0), x[:, :2] * 3


@pytest.mark.parametrize(
    "planning",
    [
        dict(alloc_graph_input=False),
        dict(alloc_graph_output=False),
        dict(alloc_graph_input=False, alloc_graph_output=False),
    ],
    ids=["inputs-unplanned", "outputs-unplanned", "both-unplanned"],
)
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
    plan = _plan(exported)
    out = _spec(plan, plan.outputs[0])
    assert out.dynamism == Dynamism.DYNAMIC_BOUND
    assert (out.memory_id is None) == (not planning.get("alloc_graph_output", True))
    program = load(exported)
    for size in (4, 10, 2, 7):
        check(exported, (_seeded(size, size, 3),), program=program)


# -- methods without inputs or outputs, and scalar inputs ------------------------------------------------


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(3))

    def forward(self, x):
        return x * 2 + self.state


class SetState(torch.nn.Module):
    def __init__(self, owner: Scaled) -> None:
        super().__init__()
        self.owner = owner

    def forward(self, x):
        self.owner.state.copy_(x)


CONSTANTS = {
    "get_int": 42,
    "get_float": 0.25,
    "get_bool": True,
    "get_tensor": torch.arange(4.0),
    "get_ints": [1, 2, 3],
    "get_name": "pterun",
}


@lowerings
def test_constant_methods_and_a_method_with_no_outputs(lower):
    def build():
        scaled = Scaled()
        return ExportSpec(
            {"forward": scaled, "set_state": SetState(scaled)},
            {"forward": (torch.ones(3),), "set_state": (torch.ones(3),)},
            lower=lower,
            constant_methods=CONSTANTS,
        )

    exported = export_program(f"feature-constant-methods-{lower}", build)
    program = load(exported)
    assert program.method_names == {"forward", "set_state", *CONSTANTS}
    for name in CONSTANTS:
        assert not _plan(exported, name).inputs and not _plan(exported, name).instructions
        check(exported, (), method=name, program=program)
    assert check(exported, (_seeded(0, 3),), method="set_state", program=program) == [None]


class ScalarInputs(torch.nn.Module):
    def forward(self, x, k: int, f: float, flag: bool):
        return (x * k + f) if flag else (x - f)


@lowerings
def test_scalar_inputs_must_be_the_exported_values(lower):
    def build():
        return ExportSpec(ScalarInputs(), (torch.ones(3), 3, 0.5, True), lower=lower)

    exported = export_program(f"feature-scalar-inputs-{lower}", build)
    method = load(exported).load_method("forward")
    check(exported, (_seeded(0, 3), 3, 0.5, True))
    # The scalars were specialized at export: ExecuTorch refuses other values, and so does pterun.
    with pytest.raises(RuntimeError):
        run_reference(exported.pte, [_seeded(0, 3), 4, 0.5, True])
    with pytest.raises(pterun.errors.InvalidArgument):
        method.execute([_seeded(0, 3), 4, 0.5, True])
    x = _seeded(1, 3)
    assert_matches(method.execute([x, 3, 0.5, True]), run_reference(exported.pte, [x, 3, 0.5, True]))


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
    x, y = torch.arange(3.0), _seeded(0, 3)
    x_reference = x.clone()
    expected = list(reference_module(exported.pte).run_method("forward", [x_reference, y.clone()]))
    actual = load(exported).load_method("forward").execute([x, y])
    assert_matches(actual, expected)
    assert_matches(x, x_reference, what="the caller's input after the call")
    assert torch.equal(x, torch.arange(3.0)) == planned


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
    x = _seeded(0, 2, 3).requires_grad_()
    expected = run_reference(exported.pte, [x.detach()])
    out = method.execute([x])
    assert_matches(out, expected)
    assert not any(o.requires_grad for o in out)
    out[0].numpy()  # plain tensors: no "call tensor.detach().numpy() instead"
    alive = weakref.ref(x)
    del x, out
    gc.collect()
    assert alive() is None, "the method keeps the caller's input alive"


class Head(torch.nn.Module):
    def __init__(self, body: TwoLayers, softmax: bool) -> None:
        super().__init__()
        self.body = body
        self.softmax = softmax

    def forward(self, x):
        y = self.body(x)
        return torch.softmax(y, -1) if self.softmax else y


@lowerings
def test_external_constants_shared_by_methods_with_dynamic_batch(lower):
    n = Dim("n", min=1, max=8)

    def build():
        torch.manual_seed(0)
        body = TwoLayers()
        return ExportSpec(
            {"forward": Head(body, False), "head": Head(body, True)},
            {"forward": (torch.randn(3, 10),), "head": (torch.randn(3, 10),)},
            dynamic_shapes={"forward": ({0: n},), "head": ({0: n},)},
            lower=lower,
            config={"external_constants": True},
        )

    exported = export_program(f"feature-external-shared-{lower}", build)
    assert len(exported.ptd) == 1
    names = {
        m: {v.fqn for v in _plan(exported, m).values if isinstance(v, TensorSpec) and v.external}
        for m in ("forward", "head")
    }
    assert names["forward"] and names["forward"] == names["head"], (
        "the methods do not share the stored weights"
    )
    program = load(exported)
    for size in (3, 1, 8):
        x = _seeded(size, size, 10)
        check(exported, (x,), program=program)
        check(exported, (x,), method="head", program=program)
