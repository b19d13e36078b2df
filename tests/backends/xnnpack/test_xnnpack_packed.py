"""Float convolutions and fully connected nodes on oneDNN with prepacked weights (nodes/packed.py), and
max pooling by torch.max_pool2d.

Each test first asserts that the generated code calls the prepacked ops (the
premise), then compares with ExecuTorch's XNNPACK runtime on the same file.
pterun's native kernels take the small layers first (test_xnnpack_dense.py,
test_xnnpack_dwconv.py): the tests that count oneDNN's calls load with them off.
oneDNN sums in another order than XNNPACK: results agree to a relative 1e-4 of
the output's magnitude, as the plain path's do.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pterun
from pterun.backends.xnnpack.nodes import packed
from tests.backends.xnnpack.programs import assert_relative, export_model, node_kinds, partitioners
from tests.support.differential import flat
from tests.support.exporting import ExportSpec, export_program
from tests.support.models import build
from tests.support.oracle import run_reference

RTOL = 1e-4
OFF = {"XnnpackBackend": {packed.OPTION: False}}
NATIVE_OFF = {"XnnpackBackend": {"native": False}}

pytestmark = pytest.mark.skipif(not packed._has_ops(), reason="this torch build has no oneDNN ops")


class Packed(torch.nn.Module):
    """A 3x3 convolution with ReLU6, a depthwise one with ReLU, a wide 1x1 one (also an output), a strided
    depthwise one after an asymmetric pad, a transposed one, a wide linear layer with a clamp, and a max
    pooling with a ReLU (fused into it), whose result is an output."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.pw = torch.nn.Conv2d(32, 128, 1)
        self.dw2 = torch.nn.Conv2d(128, 128, 3, stride=2, groups=128)
        self.up = torch.nn.ConvTranspose2d(128, 8, 2, stride=2)
        self.fc = torch.nn.Linear(128, 512)

    def forward(self, x):
        a = F.relu6(self.stem(x))
        c = self.pw(F.relu(self.dw(a)))
        d = self.dw2(F.pad(c, (0, 1, 0, 1)))
        tokens = d.flatten(2).transpose(1, 2)
        pooled = F.relu(F.max_pool2d(a - 3.0, 3, 1, 1))
        return c, torch.clamp(self.fc(tokens), -1.0, 1.0), self.up(d), pooled


def _inputs(seed: int, batch: int = 2) -> list:
    return [torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(seed))]


def _export():
    batch = torch.export.Dim("batch", min=1, max=4)
    return export_program("xnnpack-packed-v2", lambda: ExportSpec(
        Packed().eval(), tuple(_inputs(0)), dynamic_shapes=({0: batch},), lower=partitioners))


def _source(method) -> str:
    return "".join(d.source for d in method.delegate_handles)


def _compare(method, pte, inputs, what: str) -> None:
    actual = method.execute(inputs)
    expected = run_reference(pte, inputs)
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert_relative(a, e, RTOL, f"{what} output {i}")


def test_prepacked_ops_match_executorch():
    exported = _export()
    assert {"XNNConv2d", "XNNDepthwiseConv2d", "XNNConvTranspose2d", "XNNFullyConnected"} <= set(
        node_kinds(exported.pte))
    method = pterun.Runtime.get().load_program(exported.pte, backend_options=NATIVE_OFF).load_method("forward")
    source = _source(method)
    # The 3x3 convolution and both depthwise ones, the 1x1 one and the linear layer as products over rows, the
    # clamps as post-ops; the transposed convolution stays on torch.convolution.
    assert source.count("conv_pw(") == 3 and source.count("linear_pw(") == 2, source
    assert "'hardtanh'" in source and "'relu'" in source, source
    assert "torch.convolution(" in source, source
    assert "torch.max_pool2d(" in source and "clamp_(min=" in source, source
    for seed in (0, 1):
        _compare(method, exported.pte, _inputs(seed), f"seed {seed}")


def test_other_batch_sizes_translate_again():
    """Batch 1 makes the 1x1 convolution small enough for addmm; other batches reuse the weights packed at load."""
    exported = _export()
    method = pterun.Runtime.get().load_program(exported.pte, backend_options=NATIVE_OFF).load_method("forward")
    for batch in (1, 4, 2, 1):
        _compare(method, exported.pte, _inputs(batch, batch), f"batch {batch}")
    convs = method.delegate_handles[0]._translations  # the linear layer is a delegate of its own
    by_batch = {key[0][0]: t.source for key, t in convs.items()}
    assert by_batch[1].count("linear_pw(") == 0 and "torch.addmm(" in by_batch[1], by_batch[1]
    assert by_batch[4].count("linear_pw(") == 1 and by_batch[2].count("linear_pw(") == 1
    packed = [k for d in method.delegate_handles for k in d._cache if k[1] == "onednn"]
    # one per convolution and linear layer, not one per shape
    assert len(packed) == 5, packed


def test_calls_pin_no_switch_when_they_are_exact_and_compute_float32_whatever_the_caller_set():
    """A method on the CPU whose delegates run CPU kernels alone pins no precision switch when the CPU's are exact
    (a few microseconds a call); when the caller lets oneDNN multiply float32 in bfloat16, or runs under autocast,
    its products are float32 all the same."""
    exported = _export()
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    assert method._precision.host, "premise: the XNNPACK delegates run CPU kernels alone"
    default = method.execute(_inputs(3))
    assert "linear_pw(" in _source(method), "premise: oneDNN's products, which the caller's switches reach"
    saved = torch.get_float32_matmul_precision()  # user-set: the caller's setting, put back after
    torch.set_float32_matmul_precision("medium")  # user-set: what the test is about
    try:
        assert torch._C._get_fp32_precision_getter("mkldnn", "matmul") == "bf16", "premise: the caller's switch"
        medium = method.execute(_inputs(3))
        assert torch._C._get_fp32_precision_getter("mkldnn", "matmul") == "bf16", "the caller's, back after"
    finally:
        torch.set_float32_matmul_precision(saved)  # user-set
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = method.execute(_inputs(3))
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(default, medium, autocast))


def test_option_off_runs_the_plain_ops():
    exported = _export()
    method = pterun.Runtime.get().load_program(exported.pte, backend_options=OFF).load_method("forward")
    source = _source(method)
    assert "conv_pw" not in source and "linear_pw" not in source and "torch.convolution(" in source, source
    _compare(method, exported.pte, _inputs(0), "plain ops")


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet", "et_ds_cnn", "convnext"])
def test_models_take_the_prepacked_convolutions(name):
    exported = export_model(name)
    method = pterun.Runtime.get().load_program(exported.pte, backend_options=NATIVE_OFF).load_method("forward")
    assert "conv_pw(" in _source(method)
    model = build(name)
    for seed in (0, 1):
        _compare(method, exported.pte, flat(model.make_inputs(seed)), f"{name} seed {seed}")
