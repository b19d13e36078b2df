"""Per-node profiling inside XNNPACK delegates (XnnpackBackend.profiled, backends/xnnpack/profile.py).

On programs lowered by ExecuTorch's XnnpackPartitioner, a fake tracer collects
what the profiled execute reports. It must compute what execute computes,
report each node of the graph once in graph order with the blob's debug
handles, and (when values are logged) hand over the values the nodes
compute, in the exported graph's layout and as floats, so that they compare
with the eager module's intermediate results.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pterun
from pterun.backends.xnnpack.backend import XnnpackBackend, XnnpackDelegate
from pterun.backends.xnnpack.graph import Datatype, Graph, Node, PerTensor
from pterun.backends.xnnpack.optimize import outputs_of
from pterun.backends.xnnpack.profile import NO_DEBUG_HANDLE, labels, members
from pterun.errors import DelegateInvalidHandle
from tests.backends.xnnpack.programs import QUANT_MODELS, export_quantized, graphs, partitioners, quantized_inputs
from tests.backends.xnnpack.test_xnnpack_layout import ChannelsLastBetweenDelegates
from tests.backends.xnnpack.test_xnnpack_packed import Packed
from tests.support.exporting import ExportSpec, export_program
from tests.support.models.small import BranchyConvNet
from tests.support.oracle import run_reference


@dataclass
class Report:
    start: int
    end: int
    debug_handle: int
    name: str | None
    outputs: list[torch.Tensor] | None  # None: the call passed none


class Tracer:
    def __init__(self, logs_values: bool) -> None:
        self.logs_values = logs_values
        self.reports: list[Report] = []

    def now(self) -> int:
        return time.perf_counter_ns()

    def node(self, start, end, *, debug_handle=-1, name=None, outputs=()) -> None:
        logged = [o.clone() for o in outputs] if outputs else None
        self.reports.append(Report(start, end, debug_handle, name, logged))


def _delegate(pte, index: int = 0) -> XnnpackDelegate:
    handle = pterun.Runtime.get().load_program(pte).load_method("forward").delegate_handles[index]
    assert isinstance(handle, XnnpackDelegate)
    return handle


def _call(run, graph: Graph, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Runs ``run`` with the graph's inputs (in external order) and fresh outputs; returns the outputs."""
    args = [None] * graph.num_externs
    for value, x in zip(graph.inputs, inputs, strict=True):
        args[value.external_id] = x
    for value in graph.outputs:
        args[value.external_id] = torch.empty(value.dims, dtype=Datatype.STORAGE[value.datatype])
    run(args)
    return [args[v.external_id] for v in graph.outputs]


def _profile(handle: XnnpackDelegate, inputs: list, logs_values: bool) -> tuple[list, list[Report]]:
    """The outputs of the profiled execute (after checking them against execute's) and its reports."""
    tracer = Tracer(logs_values)
    run = XnnpackBackend().profiled(handle, tracer)
    expected = _call(handle, handle.graph, inputs)
    for _ in range(2):  # the same reports on every call
        tracer.reports.clear()
        actual = _call(run, handle.graph, inputs)
        for a, e in zip(actual, expected, strict=True):
            assert torch.equal(a, e), "the profiled execute computes other outputs than execute"
    return actual, tracer.reports


def _check_reports(handle: XnnpackDelegate, blob: Graph, reports: list[Report], logs_values: bool) -> None:
    """One report per node in graph order, timed in order, with the blob's debug handles; every node of the
    blob in exactly one report."""
    nodes = handle.graph.nodes
    assert len(reports) == len(nodes)
    for r in reports:
        assert r.start <= r.end
        assert (r.outputs is not None) == logs_values
    assert all(a.end <= b.start for a, b in zip(reports, reports[1:]))
    expected = [-1 if (h := members(n)[-1].debug_handle) in NO_DEBUG_HANDLE else h for n in nodes]
    assert [r.debug_handle for r in reports] == expected
    covered = sorted(m.index for n in nodes for m in members(n))
    assert covered == [n.index for n in blob.nodes], "not every node of the blob is in exactly one report"
    raw = {n.index: n.debug_handle for n in blob.nodes}
    assert all(m.debug_handle == raw[m.index] for n in nodes for m in members(n))
    assert all(r.name for r in reports) and len({r.name for r in reports}) == len(reports)


def _by_name(reports: list[Report]) -> dict[str, torch.Tensor]:
    return {r.name: r.outputs[0] for r in reports if r.outputs}


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, rtol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {list(actual.shape)}, expected {list(expected.shape)}"
    diff = (actual.double() - expected.double()).abs().max().item()
    scale = expected.abs().max().item()
    assert diff <= rtol * scale, f"{what}: max abs diff {diff:.3g} > {rtol:g} * {scale:.3g}"


# -- float: BranchyConvNet --------------------------------------------------------------------------


def _branchy() -> BranchyConvNet:
    torch.manual_seed(0)
    return BranchyConvNet().eval()


def _export_branchy():
    return export_program("xnnpack-branchy", lambda: ExportSpec(
        _branchy(), (torch.randn(2, 3, 16, 16),), lower=partitioners))


def _branchy_intermediates(m: BranchyConvNet, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Eager results of the operators behind the graph's nodes, by node name. The exporter folds the batch
    norm and the ReLU into the stem convolution: its node computes all three."""
    with torch.no_grad():
        stem = torch.relu(m.bn(m.stem(x)))
        added = stem + m.pw(F.relu6(m.dw(stem)))
        pooled = F.max_pool2d(added, 2)
        cat = torch.cat([torch.relu(m.down(pooled)), m.side(pooled)], dim=1)
        mul = cat * m.gate(cat)
        return {"XNNConv2d #1": stem, "XNNAdd #1": added, "XNNMaxPooling2d #1": pooled,
                "XNNConcatenate2 #1": cat, "XNNMultiply #1": mul,
                "XNNGlobalAvgPooling2d #1": mul.mean((2, 3), keepdim=True), "XNNFullyConnected #1": m(x)}


def test_float_reports_every_node_with_its_debug_handle():
    exported = _export_branchy()
    (blob,) = graphs(exported.pte)
    handles = [n.debug_handle for n in blob.nodes]
    assert sum(h not in NO_DEBUG_HANDLE for h in handles) >= 10, f"the blob has few debug handles: {handles}"
    assert {"XNNConv2d", "XNNDepthwiseConv2d", "XNNAdd", "XNNMaxPooling2d"} <= {n.kind for n in blob.nodes}
    handle = _delegate(exported.pte)
    assert len(handle.graph.inputs) == 1 and handle.graph.inputs[0].dims == (2, 3, 16, 16)
    before = handle._last
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    _, reports = _profile(handle, [x], logs_values=False)
    _check_reports(handle, blob, reports, logs_values=False)
    assert reports[1].name == "XNNConv2d #1" and reports[0].debug_handle == -1  # the inserted transpose
    # The plain translation is left as it was.
    assert handle._last is before and "_node(" not in handle.source and handle._hooks is None


def test_float_logged_values_match_eager():
    exported = _export_branchy()
    (blob,) = graphs(exported.pte)
    handle = _delegate(exported.pte)
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    (output,), reports = _profile(handle, [x], logs_values=True)
    _check_reports(handle, blob, reports, logs_values=True)
    assert torch.equal(reports[-1].outputs[0], output)
    logged = _by_name(reports)
    for name, expected in _branchy_intermediates(_branchy(), x).items():
        _assert_close(logged[name], expected, 1e-4, name)


def test_other_shapes_are_profiled_too():
    """A dynamic batch: the profiled execute translates again for the new shapes, with its reports."""
    exported = export_program("xnnpack-packed-v2", lambda: ExportSpec(
        Packed().eval(), (torch.randn(2, 3, 32, 32),),
        dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=4)},), lower=partitioners))
    blob = graphs(exported.pte)[0]
    handle = _delegate(exported.pte, 0)
    # The premise: optimize.py folded the zero pad into the depthwise convolution reading it.
    (folded,) = [n for n in handle.graph.nodes if n.fused]
    assert [m.kind for m in members(folded)] == ["XNNStaticConstantPad", "XNNDepthwiseConv2d"]
    assert handle.graph.inputs[0].dims == (4, 3, 32, 32)
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    outputs, reports = _profile(handle, [x], logs_values=True)
    _check_reports(handle, blob, reports, logs_values=True)
    (report,) = [r for r in reports if "+" in r.name]
    assert report.name.startswith("XNNStaticConstantPad #1 + XNNDepthwiseConv2d #")
    assert report.debug_handle == folded.debug_handle
    # Its NHWC value, logged NCHW, is what the transpose after it hands out.
    assert outputs[2].shape == (3, 128, 8, 8) and torch.equal(report.outputs[0], outputs[2])


def test_channels_last_argument_values_are_logged_as_the_exported_graph_has_them():
    """A delegate whose input the exported graph passes channels-last (its graph value is NHWC) and
    permutes: the permute's value is logged with the exported graph's shape and contents."""
    exported = export_program("xnnpack-channels-last-between-delegates", lambda: ExportSpec(
        ChannelsLastBetweenDelegates(), (torch.randn(1, 3, 4, 5),), lower=partitioners))
    blob = graphs(exported.pte)[1]
    handle = _delegate(exported.pte, 1)
    assert handle.graph.inputs[0].dims == (1, 4, 5, 3)  # the premise: NHWC in the graph
    x = torch.randn(1, 3, 4, 5, generator=torch.Generator().manual_seed(3))
    y = (x + 1).contiguous(memory_format=torch.channels_last)
    (output,), reports = _profile(handle, [y, torch.tensor([2.0])], logs_values=True)
    _check_reports(handle, blob, reports, logs_values=True)
    assert torch.equal(output, ChannelsLastBetweenDelegates()(x))
    (permute,) = [r for r in reports if r.debug_handle != -1 and r.name.startswith("XNNStaticTranspose")]
    assert torch.equal(permute.outputs[0], y.permute(0, 2, 3, 1))
    assert torch.equal(reports[-1].outputs[0], output)


# -- quantized: BranchyConvNet with 8-bit values inside the delegate --------------------------------------


def test_quantized_reports_and_dequantized_values():
    exported = export_quantized("convnet", "per-channel")
    (blob,) = graphs(exported.pte)
    assert {"qint8", "qcint8"} <= {v.type_name for v in blob.values.values()}
    handle = _delegate(exported.pte)
    # The premise: a clamp XNNPACK folds into the depthwise convolution producing its input.
    (folded,) = [n for n in handle.graph.nodes if n.fused]
    assert [m.kind for m in members(folded)] == ["XNNDepthwiseConv2d", "XNNClamp"]
    (x,) = quantized_inputs("convnet", 1)
    (output,), reports = _profile(handle, [x], logs_values=True)
    _check_reports(handle, blob, reports, logs_values=True)
    # The fused node reports once, under the clamp's handle: the value it writes is the clamp's.
    (report,) = [r for r in reports if r.name == "XNNDepthwiseConv2d #1 + XNNClamp #1"]
    assert report.debug_handle == members(folded)[-1].debug_handle
    assert torch.equal(reports[-1].outputs[0], output)
    logged = _by_name(reports)
    # The quantize at the entry is logged as its integers; values inside as the floats they stand for.
    assert logged["XNNConvert #1"].dtype == torch.int8 and logged["XNNConvert #1"].shape == x.shape
    for node, r in zip(handle.graph.nodes, reports, strict=True):
        (vid,) = outputs_of(node)
        value = handle.graph.values[vid]
        if isinstance(value.quant, PerTensor) and node.kind != "XNNConvert":
            q = r.outputs[0] / value.quant.scale + value.quant.zero_point
            assert r.outputs[0].dtype == torch.float32 and torch.allclose(q, q.round(), atol=1e-3), r.name
    # Against the float model the program was quantized from: within a few quantization steps.
    for name, expected in _branchy_intermediates(_branchy(), x).items():
        _assert_close(logged[name], expected, 0.05, f"quantized {name}")


# -- labels and errors ---------------------------------------------------------------------------------


def test_nodes_without_a_debug_handle_are_named():
    """65535 (what the exporter writes for nodes of its own) and 0 (an absent field) mean no handle; names
    number each type over the blob's nodes, those folded into others included."""
    clamp = Node(2, "XNNClamp", 9, SimpleNamespace())
    nodes = [Node(0, "XNNStaticTranspose", 65535, SimpleNamespace()), Node(1, "XNNConv2d", 5, SimpleNamespace(),
             fused=(clamp,)), Node(3, "XNNClamp", 0, SimpleNamespace()), Node(4, "XNNConv2d", 12, SimpleNamespace())]
    assert labels(Graph({}, nodes, 0)) == {
        0: (-1, "XNNStaticTranspose #1"), 1: (9, "XNNConv2d #1 + XNNClamp #1"), 3: (-1, "XNNClamp #2"),
        4: (12, "XNNConv2d #2"),
    }


def test_profiled_refuses_a_handle_it_did_not_make():
    with pytest.raises(DelegateInvalidHandle):
        XnnpackBackend().profiled(object(), Tracer(False))


def test_dynamically_quantized_rows_are_logged_as_integers():
    """Activations quantized per row at run time: the Convert's value is logged as its int8 rows (each row's
    range reaches one end of [-128, 127]); the fully connected nodes' float values match the float model."""
    exported = export_quantized("mlp", "dynamic")
    (blob,) = graphs(exported.pte)
    assert "qdint8" in {v.type_name for v in blob.values.values()}
    handle = _delegate(exported.pte)
    (x,) = quantized_inputs("mlp", 1)
    (output,), reports = _profile(handle, [x], logs_values=True)
    _check_reports(handle, blob, reports, logs_values=True)
    logged = _by_name(reports)
    q = logged["XNNConvert #1"]
    assert q.dtype == torch.int8 and q.shape == x.shape
    assert bool(((q.amax(1) == 127) | (q.amin(1) == -128)).all())
    assert torch.equal(reports[-1].outputs[0], output)
    torch.manual_seed(0)
    m = QUANT_MODELS["mlp"][0]().eval()
    with torch.no_grad():
        h = torch.relu(m.fc1(x))
        _assert_close(logged["XNNFullyConnected #1"], h, 0.05, "fc1")
        _assert_close(logged["XNNAdd #1"], h + torch.relu(m.fc2(h)), 0.05, "residual add")


# -- round trips through float (optimize.drop_round_trips) ----------------------------------------------------


def test_round_trips_through_float_are_dropped_and_still_reported():
    """transformers' MobileNetV2 with TensorFlow's padding pads in float32 between a dequantize and a quantize
    (the second often with another zero point): the chains become 8-bit pads folded into the convolutions, and
    every node of the blob still reports once, its values as the floats they stand for."""
    exported = export_quantized("mobilenet", "per-channel")
    (blob,) = graphs(exported.pte)
    handle = _delegate(exported.pte)
    converts = sum(n.kind == "XNNConvert" for n in blob.nodes)
    pads = sum(n.kind == "XNNStaticConstantPad" for n in blob.nodes)
    assert converts >= 30 and pads >= 15  # the premise: chains of convert, pad, convert
    shifted = [n for n in blob.nodes if n.kind == "XNNConvert" and blob.values[n.p.output_id].quant is not None
               and blob.values[n.p.input_id].quant is None]
    assert any(blob.values[n.p.output_id].quant.zero_point != blob.values[_opening(blob, n)].quant.zero_point
               for n in shifted if _opening(blob, n) is not None)  # some quantize again with another zero point
    tables = [n for n in handle.graph.nodes if hasattr(n.p, "lookup")]  # where the scales differ
    assert tables and all(n.kind == "XNNConvert" for n in tables)
    kinds = [n.kind for n in handle.graph.nodes]
    # left: the quantize at the entry (after the float input's pad), the tables and the dequantize at the exit
    assert kinds.count("XNNConvert") == 2 + len(tables) and "XNNStaticConstantPad" not in kinds[1:], kinds
    (x,) = quantized_inputs("mobilenet", 1)
    (output,), reports = _profile(handle, [x], logs_values=True)
    _check_reports(handle, blob, reports, logs_values=True)
    assert torch.equal(output, run_reference(exported.pte, [x])[0])


def _opening(blob, quantize) -> int | None:
    """The 8-bit value a quantize's input was dequantized from, through a pad or not (None: no such chain)."""
    producer = {v: n for n in blob.nodes for v in outputs_of(n)}
    node = producer.get(quantize.p.input_id)
    if node is not None and node.kind == "XNNStaticConstantPad":
        node = producer.get(node.p.input_id)
    return node.p.input_id if node is not None and node.kind == "XNNConvert" else None


@pytest.mark.parametrize(("a", "b", "expected"), [
    ((0.02, 3), (0.02, 3), lambda q: q),                                     # the same quantization
    ((2.0 ** -12, -119), (2.0 ** -12, -128), lambda q: np.maximum(q - 9, -128)),  # shifted: the lowest saturate
    ((0.1, 0), (0.10000001, 0), lambda q: q),                                # scales an ulp apart: every value back
    ((0.25, 0), (0.5, 0), lambda q: np.rint(q / 2).astype(np.int64)),        # half the values, ties to even
    ((1e-30, 0), (1e-30, 0), lambda q: q),
])
def test_round_trips_are_tables_of_xnnpacks_two_converts(a, b, expected):
    from pterun.backends.xnnpack.optimize import _requantized

    q = np.arange(-128, 128)
    assert np.array_equal(_requantized(PerTensor(*a), PerTensor(*b), -128, 127), expected(q))


# -- row quantizations shared (optimize.share_row_quantizations) ------------------------------------------------


def test_rows_quantized_alike_once_are_quantized_once_and_still_reported():
    """ExecuTorch's 8da4w Llama quantizes one normalized row three times for the query, key and value
    projections (one blob): one convert stands for all three, with the same outputs, and every node of the blob
    still reports once."""
    from tests.support.llm_programs import llama_program

    pte = llama_program("xnnpack-8da4w").pte
    blobs = graphs(pte)
    index = next(i for i, blob in enumerate(blobs) if sum(n.kind == "XNNConvert" for n in blob.nodes) == 3)
    blob, handle = blobs[index], _delegate(pte, index)
    converts = [n for n in blob.nodes if n.kind == "XNNConvert"]
    assert len({n.p.input_id for n in converts}) == 1, "premise: three converts of one value"
    assert [n.kind for n in handle.graph.nodes].count("XNNConvert") == 1
    x = torch.randn(handle.graph.inputs[0].dims, generator=torch.Generator().manual_seed(0))
    _, reports = _profile(handle, [x], logs_values=True)
    _check_reports(handle, blob, reports, logs_values=True)
    # The blob as read, every convert kept (it has nothing else optimize.py rewrites): the same outputs.
    assert {n.kind for n in blob.nodes} == {"XNNConvert", "XNNFullyConnected"}
    unshared = XnnpackDelegate(blob, torch.device("cpu"))
    for a, e in zip(_call(handle, handle.graph, [x]), _call(unshared, blob, [x]), strict=True):
        assert torch.equal(a, e)
