"""Quantized fully connected layers and dense convolutions on the CPU multiply integers (torch._int_mm, or
oneDNN's u8 x s8 product for large layers), and their results are ExecuTorch's XNNPACK results bit for bit
where those are integer arithmetic: static 8-bit programs, whose outputs are dequantized from 8-bit values,
and 8da4w layers, whose float steps are repeated in XNNPACK's order.

Each test first asserts its premise: which product the generated code calls, and that no float matrix
product stands in for it.
"""

from __future__ import annotations

import copy

import pytest
import torch

import pterun
from pterun.backends.xnnpack.graph import Datatype, PerTensor
from pterun.backends.xnnpack.nodes import qblock, qlinear
from tests.backends.xnnpack.programs import (
    assert_relative, export_8da4w, export_quantized, graphs, node_kinds, quantized_inputs,
)
from tests.support.oracle import run_reference

_INT_MM, _ONEDNN = "torch._int_mm(", "torch.ops.onednn.qlinear_pointwise.binary("
_PRODUCT = {"mlp": _INT_MM, "mlp256": _ONEDNN}


def _method_and_source(pte):
    method = pterun.Runtime.get().load_program(pte).load_method("forward")
    return method, "\n".join(handle.source for handle in method.delegate_handles)


def _premise(source: str, model: str, onednn: int | None = None) -> None:
    """The three layers multiply integers: all with ``_PRODUCT[model]``, or ``onednn`` of them with oneDNN."""
    if onednn is None:
        assert source.count(_PRODUCT[model]) == 3, f"the three layers do not call {_PRODUCT[model]}"
    else:
        assert (source.count(_ONEDNN), source.count(_INT_MM)) == (onednn, 3 - onednn)
    assert "torch.mm(" not in source and "torch.addmm(" not in source, "a float product stands in"


@pytest.mark.parametrize("model", ["mlp", "mlp256"])
@pytest.mark.parametrize("scheme", ["per-tensor", "per-channel"])
def test_static_int8_layers_are_bit_exact(model, scheme):
    exported = export_quantized(model, scheme)
    method, source = _method_and_source(exported.pte)
    _premise(source, model)
    for seed, scale in ((1, 1.0), (2, 0.05), (3, 8.0), (4, 100.0)):  # in range, nearly zero, saturating
        x = quantized_inputs(model, seed, scale)
        (actual,) = method.execute(list(x))
        (expected,) = run_reference(exported.pte, list(x))
        assert torch.equal(actual, expected), f"{model} {scheme} x{scale}: {(actual != expected).sum()} differ"


@pytest.mark.parametrize("model", ["convnet", "decoder"])
@pytest.mark.parametrize("scheme", ["per-tensor", "per-channel"])
def test_static_int8_convolutions_are_bit_exact(model, scheme):
    """Dense convolutions (1x1 ones on the pixels, others on gathered windows) multiply integers; depthwise,
    transposed and few-channel ones (3 or 6 input channels) keep the float emulation, exact too."""
    exported = export_quantized(model, scheme)
    kinds = node_kinds(exported.pte)
    dense = [n.p for g in graphs(exported.pte) for n in g.nodes if n.kind == "XNNConv2d"]
    few = sum(1 for p in dense if p.kernel_width > 1 and p.group_input_channels * p.kernel_width < 16)
    method, source = _method_and_source(exported.pte)
    assert len(dense) - few >= 1
    assert source.count("torch._int_mm(") == len(dense) - few + kinds["XNNFullyConnected"]
    assert source.count("torch.convolution(") == kinds["XNNDepthwiseConv2d"] + kinds["XNNConvTranspose2d"] + few
    assert "max_pool2d" not in source  # 8-bit max pooling takes maxima of the 8-bit values, no float pass
    for seed, scale in ((1, 1.0), (2, 0.05), (3, 8.0), (4, 100.0)):
        x = quantized_inputs(model, seed, scale)
        (actual,) = method.execute(list(x))
        (expected,) = run_reference(exported.pte, list(x))
        assert torch.equal(actual, expected), f"{model} {scheme} x{scale}: {(actual != expected).sum()} differ"


@pytest.mark.parametrize("model", ["mlp", "mlp256"])
def test_dynamic_int8_layers_multiply_integers(model):
    """Float outputs: XNNPACK scales with fused multiply-adds, pterun without, so equal to float32 rounding.
    oneDNN takes a layer only where the raw sums and corrections it adds are exact: 128 * sum |w| < 2**24."""
    exported = export_quantized(model, "dynamic")
    method, source = _method_and_source(exported.pte)
    sums = [v.data.abs().long().sum(1).max().item() for g in graphs(exported.pte) for v in g.values.values()
            if v.data is not None and v.datatype == Datatype.QCINT8]
    assert len(sums) == 3
    _premise(source, model, sum(s * 128 < 1 << 24 for s in sums) if model == "mlp256" else None)
    for seed, scale in ((1, 1.0), (2, 0.05), (3, 8.0)):
        x = quantized_inputs(model, seed, scale)
        (actual,) = method.execute(list(x))
        (expected,) = run_reference(exported.pte, list(x))
        assert_relative(actual, expected, 1e-6, f"{model} dynamic x{scale}")


@pytest.mark.parametrize("route", ["grouped", "onednn-per-block", "int_mm-per-block"])
def test_block_scaled_4bit_layers_are_bit_exact(route, monkeypatch):
    """8da4w: block sums are integer products, scaled and added block after block as XNNPACK's qd8_f32_qb4w
    kernels add them, so the float outputs are ExecuTorch's bit for bit. Few rows go as block-diagonal
    groups, many as a product per block (oneDNN's, or _int_mm's without it)."""
    exported = export_8da4w()  # 8 rows, 64 -> 128 -> 64, blocks of 32
    if route != "grouped":
        monkeypatch.setattr(qblock, "BLOCKWISE_ROWS", 1)
        monkeypatch.setattr(qblock, "ONEDNN_MIN_OUTPUTS", 1)
    if route == "int_mm-per-block":
        monkeypatch.setattr(qlinear, "onednn_available", lambda: False)
    method, source = _method_and_source(exported.pte)
    products = {"grouped": (0, 2), "onednn-per-block": (2 + 4, 0), "int_mm-per-block": (0, 2 + 4)}[route]
    assert (source.count(_ONEDNN), source.count(_INT_MM)) == products
    assert "torch.mm(" not in source and "torch.addmm(" not in source, "a float product stands in"
    for seed, scale in ((1, 1.0), (2, 0.05), (3, 8.0), (4, 100.0)):
        x = [torch.randn(8, 64, generator=torch.Generator().manual_seed(seed)) * scale]
        (actual,) = method.execute(x)
        (expected,) = run_reference(exported.pte, x)
        assert torch.equal(actual, expected), f"8da4w {route} x{scale}: {(actual != expected).sum()} differ"


def test_dynamic_quantization_of_edge_rows():
    """Rows of zeros, of one value, of subnormals and huge values quantize as XNNPACK quantizes them."""
    exported = export_quantized("mlp", "dynamic")
    method, _ = _method_and_source(exported.pte)
    x = torch.randn(8, 48, generator=torch.Generator().manual_seed(7))
    x[0], x[1], x[2], x[3], x[4] = 0.0, 3.0, -1e-38, 1e30, -2.0
    x[5, 5], x[6] = 1e-39, torch.linspace(0.0, 1.0, 48)
    (actual,) = method.execute([x])
    (expected,) = run_reference(exported.pte, [x])
    assert not actual.isnan().any()
    assert_relative(actual, expected, 1e-6, "edge rows")


@pytest.mark.parametrize("model", ["mlp", "mlp256", "convnet"])
def test_unsigned_activations_shift_by_128(model):
    """The uint8 way into the products (top bit flipped, zero point minus 128): the per-tensor program with
    every int8 activation made uint8 and its zero point raised by 128 computes the same floats."""
    from pterun.backends.xnnpack.backend import XnnpackDelegate

    exported = export_quantized(model, "per-tensor")
    (graph,) = graphs(exported.pte)
    shifted = copy.deepcopy(graph)
    flipped = 0
    for value in shifted.values.values():
        if value.datatype == Datatype.QINT8 and value.data is None:
            value.datatype = Datatype.QUINT8
            value.quant = PerTensor(value.quant.scale, value.quant.zero_point + 128)
            flipped += 1
    assert flipped >= 3
    x = quantized_inputs(model, 1)[0]
    outputs = []
    for g in (graph, shifted):
        delegate = XnnpackDelegate(g, torch.device("cpu"))
        if g is shifted:  # uint8 rows go to oneDNN as they are, to _int_mm with their top bit flipped
            source = delegate.source
            assert source.count(_INT_MM) + source.count(_ONEDNN) >= 3
            assert source.count("torch.bitwise_xor(") == source.count(_INT_MM)
        (out,) = (torch.empty(v.dims) for v in g.outputs)
        delegate([x, out])
        outputs.append(out)
    assert torch.equal(outputs[0], outputs[1])


@pytest.mark.parametrize("scheme", ["per-tensor", "per-channel", "dynamic"])
def test_onednn_and_int_mm_agree_bit_for_bit(scheme, monkeypatch):
    """oneDNN's float32 handover is one rounding of the exact sums, as _int_mm's int32 sums converted once."""
    exported = export_quantized("mlp256", scheme)
    method, source = _method_and_source(exported.pte)
    monkeypatch.setattr(qlinear, "ONEDNN_MIN_MACS", 1 << 62)
    reference, reference_source = _method_and_source(exported.pte)
    assert _ONEDNN in source and _ONEDNN not in reference_source
    for seed, scale in ((1, 1.0), (3, 8.0), (4, 100.0)):
        x = list(quantized_inputs("mlp256", seed, scale))
        assert torch.equal(method.execute(x)[0], reference.execute(x)[0]), f"{scheme} x{scale}"
