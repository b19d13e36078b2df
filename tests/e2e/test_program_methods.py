"""Programs of several methods, methods with no inputs or no outputs, and weights in a data file (shared by
methods too), each checked against ExecuTorch's runtime.

Each test first asserts the premise it depends on (that the exporter really
produced the feature), so a change in the exporter cannot turn it into a test
of something else.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import pterun
from pterun.format import TensorSpec
from tests.support.compare import assert_matches
from tests.support.differential import check, load, lowerings, seeded
from tests.support.exporting import ExportSpec, export_program
from tests.support.premises import method_plan


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
    x, scale = seeded(1, 3, 8), seeded(2, 3, 1)
    (h,) = check(exported, (x,), method="encode", program=program)
    check(exported, (h, scale), method="decode", program=program)
    # Methods of one program are independent: running one leaves the other's results alone.
    again = program.load_method("encode").execute([x])
    assert_matches(again, [h])


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
        assert not method_plan(exported, name).inputs and not method_plan(exported, name).instructions
        check(exported, (), method=name, program=program)
    assert check(exported, (seeded(0, 3),), method="set_state", program=program) == [None]


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
    plan = method_plan(exported)
    external = [v for v in plan.values if isinstance(v, TensorSpec) and v.external]
    assert len(external) >= 4, "the weights are not stored outside the program"
    assert all(v.memory_id is None for v in external)
    x = seeded(1, 2, 10)
    check(exported, (x,))
    # Without its data file the method cannot load.
    program = pterun.Runtime.get().load_program(exported.pte)
    with pytest.raises(pterun.errors.PteError):
        program.load_method("forward")


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
        m: {v.fqn for v in method_plan(exported, m).values if isinstance(v, TensorSpec) and v.external}
        for m in ("forward", "head")
    }
    assert names["forward"] and names["forward"] == names["head"], (
        "the methods do not share the stored weights"
    )
    program = load(exported)
    for size in (3, 1, 8):
        x = seeded(size, size, 10)
        check(exported, (x,), program=program)
        check(exported, (x,), method="head", program=program)

