"""Programs lowered with ExecuTorch's XnnpackPartitioner, and what their delegate blobs hold.

Float models come from tests.support.models. Quantized ones go through the
XNNPACK quantizer's flow (export, prepare_pt2e, calibrate, convert_pt2e) and
are then lowered with the partitioner, so their 8-bit arithmetic runs inside
the XnnpackBackend blob.
"""

from __future__ import annotations

import collections
import math
from pathlib import Path

import torch

from pterun.backends.xnnpack.blob import split_blob
from pterun.backends.xnnpack.graph import Graph, PerTensor, read_graph
from pterun.format import ProgramFile
from tests.support import differential
from tests.support.exporting import Exported, ExportSpec, export_program
from tests.support.models.small import BranchyConvNet, ConvDecoder, ResidualMLP
from tests.support.quantizing import quantize

BACKEND = "XnnpackBackend"


def partitioners() -> list:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return [XnnpackPartitioner()]


def export_model(name: str) -> Exported:
    """A model of tests.support.models, lowered to XNNPACK (dynamic shapes as the model declares them)."""
    return differential.export_model(name, partitioners, key=f"xnnpack-{name}")


def graphs(pte: Path, method: str = "forward") -> list[Graph]:
    """The decoded graph of every XnnpackBackend delegate of ``method``."""
    program = ProgramFile(pte)
    plan = program.plan(method)
    out = []
    for d in plan.delegates:
        assert d.backend_id == BACKEND, f"unexpected delegate {d.backend_id!r}"
        out.append(read_graph(split_blob(program.delegate_data(d.inline, d.index)), program.named_data))
    return out


def node_kinds(pte: Path) -> collections.Counter:
    return collections.Counter(n.kind for g in graphs(pte) for n in g.nodes)


def value_types(pte: Path) -> set[str]:
    return {v.type_name for g in graphs(pte) for v in g.values.values()}


# -- float node coverage -----------------------------------------------------------------------

ZOO_NODES = {
    "XNNConv2d", "XNNConvTranspose2d", "XNNPReLU", "XNNLeakyReLU", "XNNHardswish", "XNNAdd", "XNNSubtract",
    "XNNMultiply", "XNNDiv", "XNNMaximum", "XNNMinimum", "XNNAbs", "XNNSigmoid", "XNNExp", "XNNFloor",
    "XNNCeiling", "XNNSquareRoot", "XNNLog", "XNNAvgPooling2d", "XNNStaticResizeBilinear2D", "XNNStaticSlice",
    "XNNNegate", "XNNConcatenate3", "XNNStaticConstantPad", "XNNStaticReshape", "XNNStaticTranspose",
    "XNNBatchMatrixMultiply", "XNNFullyConnected", "XNNClamp", "XNNGelu", "XNNSquare", "XNNSoftmax", "XNNTanh",
}


class Zoo(torch.nn.Module):
    """Most float node types the partitioner emits, strung together."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.up = torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.grouped_up = torch.nn.ConvTranspose2d(4, 4, 2, stride=2, groups=2)
        self.prelu = torch.nn.PReLU(8)
        self.fc = torch.nn.Linear(16, 6)

    def forward(self, x, y):
        a = self.prelu(self.conv(x))
        b = torch.nn.functional.leaky_relu(a, 0.2) - torch.nn.functional.hardswish(a)
        b = torch.maximum(b, a) * torch.minimum(a.abs(), b.sigmoid()) / (a.exp() + 1.0)
        b = b + torch.floor(a) + torch.ceil(a) + torch.sqrt(a.abs() + 1) + torch.log(a.abs() + 1)
        b = torch.nn.functional.avg_pool2d(b, 2, stride=2)
        b = torch.nn.functional.interpolate(b, scale_factor=2.0, mode="bilinear", align_corners=False)
        up = self.grouped_up(self.up(b)[:, :, :8, :8])
        c = torch.cat([up, up * 2, -up], 1)[:, :, 1:5, 2:6]
        c = torch.nn.functional.pad(c, (1, 2, 0, 1), value=0.5)
        e = torch.tanh(y) @ y.transpose(-1, -2)
        f = self.fc(y.reshape(-1, 16)).relu()
        return c, e, torch.clamp(f, -0.5, 0.5), torch.nn.functional.gelu(f).square(), torch.softmax(e, -1)


def zoo_inputs(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 4, 16, 16, generator=g), torch.randn(2, 5, 16, generator=g)]


def export_zoo() -> Exported:
    return export_program("xnnpack-node-zoo", lambda: ExportSpec(Zoo(), tuple(zoo_inputs(0)), lower=partitioners))


# -- quantized models --------------------------------------------------------------------------

def _transformers(config: str, model: str, **settings) -> torch.nn.Module:
    import transformers

    from tests.support.models.registry import Field

    return Field(getattr(transformers, model)(getattr(transformers, config)(**settings)), "logits")


QUANT_MODELS = {
    "convnet": (BranchyConvNet, (2, 3, 16, 16)),
    "mlp": (lambda: ResidualMLP(48, 96, 12), (8, 48)),
    "decoder": (ConvDecoder, (1, 3, 12, 12)),
    # large enough for the CPU's oneDNN products (every layer at least 2**23 multiply-adds)
    "mlp256": (lambda: ResidualMLP(256, 1024, 256), (32, 256)),
}
# Convolution networks written apart from this repository (transformers'): MobileNetV2's depthwise convolutions
# with TensorFlow's asymmetric padding, RegNet's grouped convolutions with squeeze-and-excitation (a broadcast
# multiply), ResNet's bottlenecks and residual adds.
CONV_MODELS = {
    "mobilenet": (lambda: _transformers("MobileNetV2Config", "MobileNetV2ForImageClassification", image_size=48,
                                        depth_multiplier=0.35, num_labels=10, tf_padding=True), (1, 3, 48, 48)),
    "regnet": (lambda: _transformers("RegNetConfig", "RegNetForImageClassification", embedding_size=16,
                                     hidden_sizes=[24, 40], depths=[1, 2], groups_width=8, layer_type="y",
                                     num_labels=10), (2, 3, 32, 32)),
    "resnet": (lambda: _transformers("ResNetConfig", "ResNetForImageClassification", embedding_size=16,
                                     hidden_sizes=[16, 32, 48], depths=[1, 1, 1], layer_type="bottleneck",
                                     num_labels=10, downsample_in_bottleneck=True), (1, 3, 40, 40)),
}
QUANT_MODELS.update(CONV_MODELS)


def quantized_inputs(model: str, seed: int, scale: float = 1.0) -> tuple:
    shape = QUANT_MODELS[model][1]
    return (torch.randn(shape, generator=torch.Generator().manual_seed(100 + seed)) * scale,)


def export_quantized(model: str, scheme: str) -> Exported:
    def make() -> ExportSpec:
        cls, _ = QUANT_MODELS[model]
        torch.manual_seed(0)
        module = cls().eval()
        example = quantized_inputs(model, 0)
        calibration = (quantized_inputs(model, seed) for seed in range(1, 9))
        return ExportSpec(quantize(module, example, calibration, scheme), example, lower=partitioners)

    return export_program(f"xnnpack-q-{model}-{scheme}", make)


def output_steps(pte: Path) -> list[float | None]:
    """For each output of the (single) delegate, the scale of the 8-bit value it is dequantized from."""
    (graph,) = graphs(pte)
    producers = {n.p.output_id: n for n in graph.nodes if hasattr(n.p, "output_id")}
    steps = []
    for value in graph.outputs:
        node = producers.get(value.id)
        source = graph.values.get(node.p.input_id) if node is not None and node.kind == "XNNConvert" else None
        steps.append(float(source.quant.scale) if source is not None and isinstance(source.quant, PerTensor)
                     else None)
    return steps


def assert_within_one_step(actual: torch.Tensor, expected: torch.Tensor, step: float, what: str) -> float:
    """At least 99.9% of the elements within one quantization step (and none NaN); returns the exact fraction."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    diff = (actual.double() - expected.double()).abs()
    off = (diff > step * 1.001).double().mean().item()
    assert off <= 1e-3, f"{what}: {off:.2%} of elements differ by more than one step ({step:g}); max {diff.max():g}"
    return (diff == 0).double().mean().item()


def assert_relative(actual: torch.Tensor, expected: torch.Tensor, rtol: float, what: str) -> None:
    """max |actual - expected| <= rtol * max |expected| (float results; XNNPACK sums in another order)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    scale = expected.abs().max().item()
    diff = (actual - expected).abs().max().item()
    assert diff <= rtol * scale + 1e-30, f"{what}: max abs diff {diff:.3g} > {rtol:g} * {scale:.3g}"


def _quantize_8da4w(module: torch.nn.Module, group: int) -> torch.nn.Module:
    from torchao.quantization import quantize_
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

    config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group))
    quantize_(module, config)
    return module


def export_8da4w() -> Exported:
    """Linear layers with 4-bit weights in blocks of 32 and activations quantized per row at run time (8da4w),
    as ExecuTorch's LLM exports quantize them."""

    def make() -> ExportSpec:
        torch.manual_seed(0)
        module = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)).eval()
        return ExportSpec(_quantize_8da4w(module, 32), (torch.randn(8, 64),), lower=partitioners)

    return export_program("xnnpack-q-8da4w", make)


WIDE_8DA4W_ROWS = 32  # the upper bound of the wide program's dynamic rows


def export_8da4w_wide() -> Exported:
    """8da4w with blocks of 128 over 512 inputs, a layer without a bias, and 1 to 32 rows (dynamic): the
    shapes of a decode step and of a prefill."""

    def make() -> ExportSpec:
        torch.manual_seed(1)
        module = torch.nn.Sequential(torch.nn.Linear(512, 256, bias=False), torch.nn.ReLU(),
                                     torch.nn.Linear(256, 128)).eval()
        rows = torch.export.Dim("rows", min=1, max=WIDE_8DA4W_ROWS)
        return ExportSpec(_quantize_8da4w(module, 128), (torch.randn(4, 512),), dynamic_shapes=({0: rows},),
                          lower=partitioners)

    return export_program("xnnpack-q-8da4w-wide", make)


# -- float elementwise nodes in XNNPACK's own arithmetic ---------------------------------------------------------

ELEMENTWISE_NODES = {
    "XNNSigmoid", "XNNReciprocalSquareRoot", "XNNSquareRoot", "XNNSin", "XNNCos", "XNNExp", "XNNTanh", "XNNGelu",
    "XNNLog", "XNNHardswish", "XNNSoftmax",
}
ELEMENTWISE_OUTPUTS = ("sigmoid", "rsqrt", "sqrt", "sin", "cos", "exp", "tanh", "gelu", "log", "hardswish",
                       "softmax", "rsqrt(x)", "sqrt(x)", "log(x)")
ELEMENTWISE_MAX = (64, 1100)  # the upper bounds of the program's dynamic rows and columns
# Zeros, infinities, NaN, huge, tiny and denormal numbers, the ends of the kernels' ranges (exp's and sigmoid's
# cutoffs, tanh's and gelu's clamps, sin's multiples of pi).
EDGE_VALUES = (
    0.0, -0.0, math.inf, -math.inf, math.nan, 3e38, -3e38, 1e-45, -1e-45, 1e-38, 1.2e-38, 5e-39, 88.7, 89.0, -87.0,
    -88.0, -104.0, 1e5, -1e5, 8.0, 7.98, 7.9807181358, 5.1638283730, 5.2, 1e-7, 0.5, 128.0, 1.0, 2.0, 0.25,
    3.1415927, -3.1415927, 1.5707964, 6.2831855, 1e30, -17.4, -17.3, 2.0**-126, 2.0**126,
)


class Elementwise(torch.nn.Module):
    """Each float node XNNPACK computes with an approximation of its own, on x and on |x|."""

    def forward(self, x):
        p = x.abs()
        return (torch.sigmoid(x), torch.rsqrt(p), torch.sqrt(p), torch.sin(x), torch.cos(x), torch.exp(x),
                torch.tanh(x), torch.nn.functional.gelu(x), torch.log(p), torch.nn.functional.hardswish(x),
                torch.softmax(x, -1), torch.rsqrt(x), torch.sqrt(x), torch.log(x))


def elementwise_inputs(seed: int, scale: float = 4.0, rows: int = 3, cols: int = 203, edges: bool = True) -> list:
    """Normal values times ``scale``; with ``edges``, the edge values (and their negations) opening the first two
    rows."""
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * scale
    if edges:
        edge = torch.tensor(EDGE_VALUES)[:cols]
        x[0, : edge.numel()] = edge
        if rows > 1:
            x[1, : edge.numel()] = -edge
    return [x]


def export_elementwise() -> Exported:
    def make() -> ExportSpec:
        rows = torch.export.Dim("rows", min=1, max=ELEMENTWISE_MAX[0])
        cols = torch.export.Dim("cols", min=2, max=ELEMENTWISE_MAX[1])
        return ExportSpec(Elementwise(), tuple(elementwise_inputs(0)), dynamic_shapes=({0: rows, 1: cols},),
                          lower=partitioners)

    return export_program("xnnpack-elementwise", make)


class FloatMLP(torch.nn.Module):
    """Fully connected layers of odd widths (outputs past a multiple of 16), with and without bias, their clamps
    fused (hardtanh, relu) and one output of a layer without an activation."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(37, 70)
        self.b = torch.nn.Linear(70, 33, bias=False)
        self.c = torch.nn.Linear(33, 16)

    def forward(self, x):
        h = self.a(x)
        return self.c(torch.relu(self.b(torch.nn.functional.hardtanh(h, -0.5, 0.7)))), h


FLOAT_MLP_ROWS = 160


def float_mlp_inputs(seed: int, scale: float = 1.0, rows: int = 9) -> list:
    return [torch.randn(rows, 37, generator=torch.Generator().manual_seed(200 + seed)) * scale]


def export_float_mlp() -> Exported:
    def make() -> ExportSpec:
        torch.manual_seed(0)
        rows = torch.export.Dim("rows", min=1, max=FLOAT_MLP_ROWS)
        return ExportSpec(FloatMLP().eval(), tuple(float_mlp_inputs(0)), dynamic_shapes=({0: rows},),
                          lower=partitioners)

    return export_program("xnnpack-float-mlp", make)


class FloatConvs(torch.nn.Module):
    """Dense convolutions of odd channel counts: 3 x 3 padded with a stride of 2 (ReLU6), 1 x 1 with a stride of 2,
    a dilated 3 x 3 one-sided pad (ReLU), 5 x 5 without bias, and a 1 x 1 one (also an output)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 20, 3, stride=2, padding=1)
        self.sub = torch.nn.Conv2d(20, 33, 1, stride=2)
        self.dilated = torch.nn.Conv2d(33, 17, 3, dilation=2, padding=2)
        self.wide = torch.nn.Conv2d(17, 24, 5, padding=2, bias=False)
        self.point = torch.nn.Conv2d(24, 40, 1)

    def forward(self, x):
        a = torch.nn.functional.relu6(self.stem(x))
        b = torch.relu(self.dilated(self.sub(a)))
        return self.point(self.wide(b)), a


def float_convs_inputs(seed: int, scale: float = 1.0) -> list:
    return [torch.randn(1, 3, 23, 21, generator=torch.Generator().manual_seed(300 + seed)) * scale]


def export_float_convs() -> Exported:
    return export_program("xnnpack-float-convs", lambda: ExportSpec(
        FloatConvs().eval(), tuple(float_convs_inputs(0)), lower=partitioners))
