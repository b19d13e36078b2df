"""Bounded dynamic shapes, checked against ExecuTorch's runtime: sizes anywhere within the bound (images of
any height and width too, channels-last ones keeping their layout), sizes above it refused, and outputs
computed from sizes."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import pterun
from pterun.errors import ErrorCode, NotSupported
from pterun.format import Dynamism
from tests.support.compare import assert_matches
from tests.support.differential import check, load, lowerings, seeded
from tests.support.exporting import ExportSpec, export_program
from tests.support.models.small import ConvBlock
from tests.support.oracle import run_reference
from tests.support.premises import method_plan, tensor_spec


class Ragged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x, y):
        h = torch.relu(self.fc(x)) + y
        return h, h.sum(0), torch.cat([x, y], 0), x.shape[0] * 2


def _ragged(lower):
    n = Dim("n", min=2, max=12)

    def build():
        torch.manual_seed(0)
        return ExportSpec(
            Ragged(), (torch.randn(4, 6), torch.randn(4, 6)), lower=lower, dynamic_shapes=({0: n}, {0: n})
        )

    return export_program(f"feature-dynamic-{lower}", build)


@lowerings
def test_dynamic_shapes_within_bound(lower):
    exported = _ragged(lower)
    plan = method_plan(exported)
    for index in plan.inputs:
        spec = tensor_spec(plan, index)
        assert spec.dynamism == Dynamism.DYNAMIC_BOUND and spec.sizes == (12, 6)
    program = load(exported)
    for size in (4, 2, 12, 7, 3):
        out = check(exported, (seeded(size, size, 6), seeded(size + 50, size, 6)), program=program)
        assert out[0].shape == (size, 6) and out[3] == size * 2


@lowerings
def test_dynamic_shape_above_bound_is_refused_and_method_still_works(lower):
    exported = _ragged(lower)
    method = load(exported).load_method("forward")
    check(exported, (seeded(0, 5, 6), seeded(1, 5, 6)))
    with pytest.raises(NotSupported) as info:
        method.execute([seeded(2, 13, 6), seeded(3, 13, 6)])
    assert info.value.code == ErrorCode.NotSupported == 0x10
    # ExecuTorch refuses it too.
    with pytest.raises(RuntimeError):
        run_reference(exported.pte, [seeded(2, 13, 6), seeded(3, 13, 6)])
    # A static dimension changed within the element bound: accepted as an input by both runtimes
    # (they check the element count only), then refused by the first kernel that sees it.
    bad = [seeded(2, 8, 5), seeded(3, 8, 5)]
    with pytest.raises(RuntimeError):
        run_reference(exported.pte, bad)
    with pytest.raises(pterun.errors.PteError):
        method.execute(bad)
    # The refusals left nothing half-set: the next call with a good shape works.
    x, y = seeded(4, 6, 6), seeded(5, 6, 6)
    assert_matches(method.execute([x, y]), run_reference(exported.pte, [x, y]))


class DynamicConv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.conv(x))
        return y, self.pool(y).flatten(1), y.amax(dim=(2, 3))


def _dynamic_image(key: str, module, shape: tuple, lower: str, layout=torch.contiguous_format):
    """``module()`` exported with an example image of ``shape`` whose height and width are dynamic."""
    h, w = Dim("h", min=4, max=20), Dim("w", min=4, max=24)

    def build():
        torch.manual_seed(0)
        example = (torch.randn(*shape).to(memory_format=layout),)
        return ExportSpec(module(), example, lower=lower, dynamic_shapes=({2: h, 3: w},))

    return export_program(key, build)


@lowerings
def test_dynamic_image_size(lower):
    exported = _dynamic_image(f"feature-dynamic-conv-{lower}", DynamicConv, (1, 3, 8, 8), lower)
    plan = method_plan(exported)
    assert tensor_spec(plan, plan.inputs[0]).dynamism == Dynamism.DYNAMIC_BOUND
    program = load(exported)
    for hw in ((8, 8), (20, 24), (5, 17), (12, 4), (20, 24)):
        check(exported, (seeded(hw[0], 1, 3, *hw),), program=program)


@lowerings
def test_channels_last_with_dynamic_image_size(lower):
    """Tensors whose shape changes keep their planned dim order (ExecuTorch re-strides them by it)."""
    exported = _dynamic_image(
        f"feature-channels-last-dynamic-{lower}", ConvBlock, (2, 4, 8, 8), lower, torch.channels_last
    )
    plan = method_plan(exported)
    first_output = tensor_spec(plan, plan.outputs[0])
    assert first_output.dim_order == (0, 2, 3, 1) and first_output.dynamism == Dynamism.DYNAMIC_BOUND
    program = load(exported)
    for hw in ((8, 8), (20, 24), (6, 10), (8, 8)):
        out = check(
            exported, (seeded(hw[0], 2, 4, *hw).to(memory_format=torch.channels_last),), program=program
        )
        assert out[0].is_contiguous(memory_format=torch.channels_last)


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
        out = check(exported, (seeded(size, size, 4),), program=program)
        assert out[1:] == [size, size * 4 + 1] and all(type(o) is int for o in out[1:])
