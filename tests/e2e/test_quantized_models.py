"""PT2E-quantized models, run without a delegate, against ExecuTorch's runtime.

The models go through the XNNPACK quantizer's reference flow (export,
prepare_pt2e, calibrate, convert_pt2e) and to_edge with no partitioner, so
every quantize and dequantize stays a quantized_decomposed kernel call. Besides
the model's float output, each program also returns every activation its
quantize operators produce, so the int8 tensors inside the model are compared
exactly, not only the float result they lead to.
"""

from __future__ import annotations

import executorch.kernels.quantized  # noqa: F401 - out variants for the exporter, kernels for the oracle
import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 - the functional quantized_decomposed operators

import pterun
from tests.support.compare import assert_matches
from tests.support.exporting import ExportSpec, export_program
from tests.support.models.small import ConvNet, ResidualMLP
from tests.support.oracle import run_reference
from tests.support.premises import assert_calls, method_plan
from tests.support.quantizing import SCHEMES, quantize

qd = torch.ops.quantized_decomposed


_MODELS = {"convnet": (ConvNet, (2, 3, 12, 12)), "mlp": (lambda: ResidualMLP(32, 64, 10), (4, 32))}
_EXPECTED_OPS = {
    "per-channel": {"quantized_decomposed::quantize_per_tensor.out",
                    "quantized_decomposed::dequantize_per_tensor.out",
                    "quantized_decomposed::dequantize_per_channel.out"},
    "per-tensor": {"quantized_decomposed::quantize_per_tensor.out",
                   "quantized_decomposed::dequantize_per_tensor.out"},
    "dynamic": {"quantized_decomposed::choose_qparams.Tensor_out",
                "quantized_decomposed::quantize_per_tensor.Tensor_out",
                "quantized_decomposed::dequantize_per_tensor.Tensor_out",
                "quantized_decomposed::dequantize_per_channel.out"},
}


def _expose_quantized_activations(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Makes the module also return every tensor its quantize operators produce (flat outputs)."""
    quantize_ops = (qd.quantize_per_tensor.default, qd.quantize_per_tensor.tensor)
    quantized = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in quantize_ops]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    results = output.args[0]
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    gm.graph._codegen = torch.fx.graph.CodeGen()  # plain tuple in, tuple out
    output.args = (tuple(results + quantized),)
    gm.recompile()
    return gm


def _quantized_spec(model_name: str, scheme: str) -> ExportSpec:
    cls, shape = _MODELS[model_name]
    torch.manual_seed(0)
    model = cls().eval()
    example = (torch.randn(shape),)
    g = torch.Generator().manual_seed(1)
    calibration = ((torch.randn(shape, generator=g),) for _ in range(8))
    return ExportSpec(quantize(model, example, calibration, scheme, after=_expose_quantized_activations), example)


def _check_premise(exported, expected_ops: set[str]) -> None:
    assert_calls(exported.pte, expected_ops)
    assert not method_plan(exported).delegates, "the program must run every operator itself, not through a delegate"


@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.parametrize("model_name", list(_MODELS))
def test_pt2e_quantized_model_matches_executorch(model_name, scheme):
    exported = export_program(f"pt2e-{model_name}-{scheme}-v1", lambda: _quantized_spec(model_name, scheme))
    _check_premise(exported, _EXPECTED_OPS[scheme])
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    shape = _MODELS[model_name][1]
    g = torch.Generator().manual_seed(2)
    for scale in (1.0, 0.05, 8.0):  # in range, nearly zero, and saturating
        x = torch.randn(shape, generator=g) * scale
        actual = method.execute([x])
        expected = run_reference(exported.pte, [x])
        if scheme != "dynamic":
            assert any(not t.is_floating_point() for t in expected[1:]), "no quantized activation is compared"
        assert_matches(actual, expected)


class TokenClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 64)
        self.fc = torch.nn.Linear(64, 8)

    def forward(self, idx):
        return self.fc(self.emb(idx))


@pytest.mark.parametrize("bits,group_size", [(8, None), (4, 32), (2, 16)])
def test_llama_embedding_quantization_matches_executorch(bits, group_size):
    """The quantized embedding ExecuTorch's Llama export makes (``--embedding-quantize bits,group``)."""

    def build():
        from executorch.examples.models.llama.source_transformation.quantize import EmbeddingQuantHandler

        torch.manual_seed(0)
        model = EmbeddingQuantHandler(
            TokenClassifier().eval(), bitwidth=bits, group_size=group_size, packed=bits in (2, 4),
            quantize_with_hqq=False,
        ).quantized_model()
        return ExportSpec(model, (torch.randint(0, 50, (2, 7)),))

    exported = export_program(f"llama-embedding-{bits}bit-v1", build)
    kind = {8: "byte", 4: "4bit", 2: "2bit"}[bits]
    _check_premise(exported, {f"quantized_decomposed::embedding_{kind}.dtype_out"})
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        idx = torch.randint(0, 50, (2, 7), generator=g)
        assert_matches(method.execute([idx]), run_reference(exported.pte, [idx]))


class PerTokenDynamicLinear(torch.nn.Module):
    """Dynamic per-token int8 activations and per-channel int8 weights (the 8da8w linear's arithmetic)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(4)
        self.register_buffer("weight", torch.randint(-127, 128, (16, 32), generator=g, dtype=torch.int8))
        self.register_buffer("scales", torch.rand(16, generator=g) * 0.01 + 1e-3)

    def forward(self, x):
        scale, zero_point = qd.choose_qparams_per_token_asymmetric.default(x, torch.int8)
        q = qd.quantize_per_token.default(x, scale, zero_point, -128, 127, torch.int8)
        x_dq = qd.dequantize_per_token.default(q, scale, zero_point, -128, 127, torch.int8, torch.float32)
        w = qd.dequantize_per_channel.default(self.weight, self.scales, None, 0, -128, 127, torch.int8)
        return torch.nn.functional.linear(x_dq, w), q


def test_per_token_dynamic_linear_matches_executorch():
    tokens = torch.export.Dim("tokens", min=1, max=64)
    exported = export_program(
        "per-token-linear-v1",
        lambda: ExportSpec(PerTokenDynamicLinear(), (torch.randn(1, 5, 32),), dynamic_shapes=({1: tokens},)),
    )
    _check_premise(exported, {"quantized_decomposed::choose_qparams_per_token_asymmetric.out",
                              "quantized_decomposed::quantize_per_token.out",
                              "quantized_decomposed::dequantize_per_token.out"})
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    g = torch.Generator().manual_seed(5)
    for length in (5, 1, 64, 17):
        x = torch.randn(1, length, 32, generator=g) * torch.logspace(-2, 2, length)[None, :, None]
        assert_matches(method.execute([x]), run_reference(exported.pte, [x]))
