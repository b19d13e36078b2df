"""Outputs of every kind, checked against ExecuTorch's runtime: channels-last and permuted layouts, lists,
integers, bools, ints computed at export, in-place results and mixed dtypes."""

from __future__ import annotations

import torch

from tests.support.differential import check, lowerings, seeded
from tests.support.exporting import ExportSpec, export_program
from tests.support.models.small import ConvBlock
from tests.support.premises import method_plan, tensor_spec


@lowerings
def test_channels_last_input(lower):
    def build():
        torch.manual_seed(0)
        return ExportSpec(
            ConvBlock(), (torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last),), lower=lower
        )

    exported = export_program(f"feature-channels-last-{lower}", build)
    plan = method_plan(exported)
    assert tensor_spec(plan, plan.inputs[0]).dim_order == (0, 2, 3, 1)
    x = seeded(3, 2, 4, 6, 6).to(memory_format=torch.channels_last)
    out = check(exported, (x,))
    assert tensor_spec(plan, plan.outputs[0]).dim_order == (0, 2, 3, 1)
    assert out[0].is_contiguous(memory_format=torch.channels_last)


class Permuted(torch.nn.Module):
    def forward(self, x):
        return x.permute(0, 2, 3, 1).contiguous() * 2, x.transpose(1, 2)


@lowerings
def test_permuted_outputs(lower):
    exported = export_program(
        f"feature-permuted-{lower}", lambda: ExportSpec(Permuted(), (torch.randn(2, 3, 4, 5),), lower=lower)
    )
    check(exported, (seeded(0, 2, 3, 4, 5),))


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
    out = check(exported, (seeded(4, 3, 6),))
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
    x = seeded(6, 3, 5) * 4
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


class StaticScalar(torch.nn.Module):
    def forward(self, x):
        return x + 1, x.shape[1]


@lowerings
def test_static_int_output(lower):
    exported = export_program(
        f"feature-static-int-{lower}", lambda: ExportSpec(StaticScalar(), (torch.randn(2, 7),), lower=lower)
    )
    out = check(exported, (seeded(0, 2, 7),))
    assert out[1] == 7


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
    check(exported, (seeded(0, 4, 5), seeded(1, 4, 5)))


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
        seeded(0, 3, 4),
        torch.randn(3, 4, dtype=torch.float64, generator=g),
        torch.randint(0, 9, (3, 4), dtype=torch.int32, generator=g),
        torch.randint(0, 100, (3, 4), dtype=torch.int16, generator=g),
    )
    check(exported, args)
