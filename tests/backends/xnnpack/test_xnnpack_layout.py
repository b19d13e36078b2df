"""Delegate arguments laid out channels-last (dim order 0, 2, 3, 1), against ExecuTorch's XNNPACK.

Where a channels-last tensor made outside a delegate feeds it (the exporter's
``_clone_dim_order`` to channels-last, as a bicubic resize leaves it), or a
delegate's output is planned channels-last, ExecuTorch's XNNPACK executor gives
XNNPACK the tensor's bytes with dimensions N, H, W, C: the graph's value is
NHWC. Taken with the tensor's own N, C, H, W sizes, a graph computes on a
scrambled image, or refuses the shapes.
"""

from __future__ import annotations

import torch

import pterun
from pterun.core.layout import CHANNELS_LAST_4D
from pterun.format import ProgramFile
from pterun.format.plan import DelegateCall
from tests.backends.xnnpack.programs import assert_relative, graphs, partitioners
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import run_reference


class ChannelsLastBetweenDelegates(torch.nn.Module):
    """A delegate's result made channels-last outside any delegate, then read as tokens by the next one."""

    def forward(self, x):
        y = (x + 1).contiguous(memory_format=torch.channels_last)
        return y.permute(0, 2, 3, 1).reshape(1, -1, 3) * 2


class ChannelsLastConv(torch.nn.Module):
    """A convolution whose input and output are both planned channels-last."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return self.conv(x.contiguous(memory_format=torch.channels_last))


def _image(seed: int, height: int = 4) -> torch.Tensor:
    return torch.randn(1, 3, height, 5, generator=torch.Generator().manual_seed(seed))


def _channels_last_args(pte) -> list[tuple[int, int]]:
    """(delegate call, argument position) of every delegate argument the program plans channels-last."""
    plan = ProgramFile(pte).plan("forward")
    calls = [ins for ins in plan.instructions if isinstance(ins, DelegateCall)]
    return [(c, k) for c, ins in enumerate(calls) for k, vi in enumerate(ins.args)
            if tuple(getattr(plan.values[vi], "dim_order", ())) == CHANNELS_LAST_4D]


def test_channels_last_input_between_delegates():
    exported = export_program("xnnpack-channels-last-between-delegates", lambda: ExportSpec(
        ChannelsLastBetweenDelegates(), (_image(0),), lower=partitioners))
    # Premise: the second delegate's input is channels-last, and its graph takes it as NHWC.
    assert _channels_last_args(exported.pte) == [(1, 0)]
    assert graphs(exported.pte)[1].inputs[0].dims == (1, 4, 5, 3)
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    for seed in (1, 2):
        x = _image(seed)
        (actual,) = method.execute([x])
        (expected,) = run_reference(exported.pte, [x])
        assert torch.equal(expected, ChannelsLastBetweenDelegates()(x)), "ExecuTorch's premise"
        assert torch.equal(actual, expected), f"seed {seed}"


def test_channels_last_input_and_output_of_a_dynamic_delegate():
    """The output is sized from the NHWC shape the graph computes, for each input height."""
    conv = ChannelsLastConv().eval()
    height = torch.export.Dim("height", min=2, max=8)
    exported = export_program("xnnpack-channels-last-conv-dynamic", lambda: ExportSpec(
        conv, (_image(0),), dynamic_shapes=({2: height},), lower=partitioners))
    assert _channels_last_args(exported.pte) == [(0, 0), (0, 1)]
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    for seed, h in enumerate((4, 7, 2, 4)):
        x = _image(seed, h)
        (actual,) = method.execute([x])
        (expected,) = run_reference(exported.pte, [x])
        assert expected.shape == (1, 4, h, 5) and expected.is_contiguous(memory_format=torch.channels_last)
        assert actual.shape == expected.shape and actual.stride() == expected.stride(), f"height {h}"
        assert_relative(actual, expected, 1e-5, f"height {h}")
