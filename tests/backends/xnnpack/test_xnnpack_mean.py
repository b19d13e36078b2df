"""XNNPACK's float global average pooling in pterun's native kernel (``native/fpool.c``): each channel summed in
pixel order, times 1 / pixels, the node's clamp; ExecuTorch's bits, where ``torch.mean`` (the path without the native
kernels) sums in another order and divides."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import pterun
from pterun import native
from tests.backends.xnnpack.programs import node_kinds, partitioners
from tests.support.compare import same_bits
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import run_reference

pytestmark = pytest.mark.skipif(native.kernels is None, reason="needs pterun's native kernels (CI builds them)")


class Pooled(torch.nn.Module):
    """Three global means: a plain one, one with a ReLU XNNPACK fuses as its clamp, and one over many channels."""

    def forward(self, x, wide):
        clamped = torch.relu(F.adaptive_avg_pool2d(x * 2.0, 1))
        return F.adaptive_avg_pool2d(x, 1), clamped, F.adaptive_avg_pool2d(wide, 1)


def _inputs(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 24, 9, 11, generator=g) * 3
    x[0, 0, 0, :4] = torch.tensor([-0.0, math.inf, 1e-40, 3e38])
    x[1, 5, 2, 2] = math.nan
    return [x, torch.randn(1, 600, 7, 7, generator=g)]



def test_global_means_are_executorchs_bits_and_replay():
    exported = export_program("xnnpack-mean-v1", lambda: ExportSpec(Pooled(), tuple(_inputs(0)), lower=partitioners))
    assert node_kinds(exported.pte)["XNNGlobalAvgPooling2d"] == 3, "premise: the means are XNNPACK's nodes"
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    for seed in range(4):
        args = _inputs(seed)
        actual, expected = method.execute(args), run_reference(exported.pte, args)
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert same_bits(a, e), f"call {seed}, output {k}"
        if seed == 0:
            routes = [way for d in method.delegate_handles for _, way in d.routes]
            assert routes.count("native float mean") == 3, routes
            assert not torch.equal(expected[0], torch.mean(args[0], dim=(2, 3), keepdim=True)), (
                "premise: torch.mean's order gives other bits")
    assert sum(method.replays.values()) >= 1, method.replays


def test_the_native_call_refuses_an_image_of_no_pixels():
    x, y = torch.zeros(4), torch.zeros(4)
    with pytest.raises(ValueError, match="1 images of 0 pixels and 4 channels"):
        native.kernels.mean_f32(x.data_ptr(), y.data_ptr(), 1, 0, 4, -math.inf, math.inf, 1)
    native.kernels.mean_f32(x.data_ptr(), y.data_ptr(), 1, 1, 4, -math.inf, math.inf, 1)
    assert torch.equal(y, x)
