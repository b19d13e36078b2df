"""8-bit models from the XNNPACK quantizer, lowered with XnnpackPartitioner, against ExecuTorch's XNNPACK.

Static quantization (per-channel and per-tensor weights) runs the whole model
on int8 values inside the delegate: results must agree to one quantization
step of the output on at least 99.9% of elements (pterun reproduces XNNPACK's
requantization, so in practice they are equal). Dynamic quantization
quantizes activations per row at run time and produces floats, compared as
float results.
"""

from __future__ import annotations

import pytest
import torch

import pterun
from tests.backends.xnnpack.programs import (
    CONV_MODELS,
    QUANT_MODELS,
    assert_relative,
    assert_within_one_step,
    export_8da4w,
    export_quantized,
    node_kinds,
    output_steps,
    quantized_inputs,
    value_types,
)
from tests.support.oracle import run_reference
from tests.support.quantizing import SCHEMES

_NODES = {
    "convnet": {"XNNConvert", "XNNConv2d", "XNNDepthwiseConv2d", "XNNAdd", "XNNMaxPooling2d",
                "XNNConcatenate2", "XNNMultiply", "XNNGlobalAvgPooling2d", "XNNFullyConnected"},
    "mlp": {"XNNConvert", "XNNFullyConnected", "XNNAdd"},
    "mlp256": {"XNNConvert", "XNNFullyConnected", "XNNAdd"},
    "decoder": {"XNNConvert", "XNNConv2d", "XNNConvTranspose2d"},
}
_TYPES = {
    "per-channel": {"qint8", "qcint8", "qcint32"},
    "per-tensor": {"qint8", "qint32"},
    "dynamic": {"qdint8", "qcint8"},
}


# The convolution networks of CONV_MODELS are tested bit for bit in test_xnnpack_qinteger.py.
CASES = [(m, s) for m in QUANT_MODELS for s in SCHEMES
         if m not in CONV_MODELS and not (m == "decoder" and s == "dynamic")]


@pytest.mark.parametrize("model,scheme", CASES)
def test_quantized_model_matches_executorch_xnnpack(model, scheme):
    exported = export_quantized(model, scheme)
    kinds, types = set(node_kinds(exported.pte)), value_types(exported.pte)
    assert _NODES[model] <= kinds, f"the delegate lacks {sorted(_NODES[model] - kinds)}"
    assert _TYPES[scheme] <= types, f"the delegate has no {sorted(_TYPES[scheme] - types)} values"
    (step,) = output_steps(exported.pte)
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    for seed, scale in ((1, 1.0), (2, 0.05), (3, 8.0)):  # in range, nearly zero, saturating
        x = quantized_inputs(model, seed, scale)
        (actual,) = method.execute(list(x))
        (expected,) = run_reference(exported.pte, list(x))
        what = f"{model} {scheme} input x{scale}"
        if scheme == "dynamic":
            assert step is None
            assert_relative(actual, expected, 1e-4, what)
        else:
            assert step is not None, "the output is not dequantized from an 8-bit value inside the delegate"
            assert_within_one_step(actual, expected, step, what)


def test_4bit_weights_with_dynamic_activations():
    """8da4w linear layers (torchao's Int8DynamicActivationIntxWeightConfig): 4-bit weights with bf16 block
    scales, activations quantized per row at run time, float output."""
    exported = export_8da4w()
    assert {"XNNConvert", "XNNFullyConnected"} <= set(node_kinds(exported.pte))
    assert {"qdint8", "qbint4"} <= value_types(exported.pte)
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    for seed, scale in ((1, 1.0), (2, 0.01), (3, 30.0)):
        x = torch.randn(8, 64, generator=torch.Generator().manual_seed(seed)) * scale
        (actual,) = method.execute([x])
        (expected,) = run_reference(exported.pte, [x])
        assert_relative(actual, expected, 1e-4, f"8da4w input x{scale}")
