"""Quantized fully connected layers and dense convolutions on the CPU multiply integers (torch._int_mm, or
oneDNN's u8 x s8 product for large layers, where this CPU runs them exactly: ``nodes/isa.py``; float products
of the integers elsewhere), and their results are ExecuTorch's XNNPACK results bit for bit where those are
integer arithmetic: static 8-bit programs, whose outputs are dequantized from 8-bit values, and 8da4w layers,
whose float steps are repeated in the order of the XNNPACK kernels this CPU runs.

Each test first asserts its premise: which product the generated code calls, as this CPU decides, and that
no other product stands in for it. ``test_xnnpack_isa.py`` runs these programs under other instruction sets.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter

import pytest
import torch

import pterun
from pterun.backends.xnnpack.graph import Datatype, PerTensor
from pterun.backends.xnnpack.nodes import isa, native, qblock, qlinear
from tests.backends.xnnpack.programs import (
    assert_relative,
    export_8da4w,
    export_quantized,
    graphs,
    node_kinds,
    quantized_inputs,
)
from tests.support.oracle import run_reference

_INT_MM, _ONEDNN = "torch._int_mm(", "torch.ops.onednn.qlinear_pointwise.binary("
_BIG = {"mlp": False, "mlp256": True}  # whether the layers are large enough for oneDNN


def _method_and_source(pte, **xnnpack_options):
    options = {"XnnpackBackend": xnnpack_options} if xnnpack_options else None
    method = pterun.Runtime.get().load_program(pte, backend_options=options).load_method("forward")
    return method, "\n".join(handle.source for handle in method.delegate_handles)


def _products(handles) -> tuple[int, int, int]:
    """How many layers multiply on oneDNN, on _int_mm and as float products of their integers, as the delegates
    say (``routes``); the generated code calls the integer products once per layer."""
    routes = [how for handle in handles for _, how in handle.routes]
    counts = (sum(r.startswith("onednn") for r in routes), sum(r.startswith("int_mm") for r in routes),
              sum(r.startswith("float32 product of integers") for r in routes))
    source = "\n".join(handle.source for handle in handles)
    assert (source.count(_ONEDNN), source.count(_INT_MM)) == counts[:2], routes
    return counts


def _float_layers(handles) -> int:
    """How many layers multiply their integers as floats, as the delegates say: convolutions (a pointwise one as a
    product of its pixels), fully connected nodes, each once."""
    routes = [how for handle in handles for _, how in handle.routes]
    return sum(r.startswith(("float32 ", "float64 ")) and " of integers" in r for r in routes)


def _native_layers(handles) -> int:
    routes = [how for handle in handles for _, how in handle.routes]
    return sum(r.startswith("native int8 product") for r in routes)


# pterun's native kernels (the default where they are built), and its PyTorch path
PATHS = ["native", "pytorch"]


def _load(pte, path: str):
    if path == "native":
        assert native.available()[0], native.available()[1]
        return _method_and_source(pte)
    return _method_and_source(pte, native=False)


def _expected(layers: int, big: bool, onednn_layers: int | None = None) -> tuple[int, int, int]:
    """The products of ``layers`` layers as this CPU decides: oneDNN's for large ones (``onednn_layers`` of
    them where not all qualify), else _int_mm, else float products of the integers."""
    cpu = isa.cpu()
    on_onednn = (layers if onednn_layers is None else onednn_layers) if big and cpu.onednn else 0
    rest = layers - on_onednn
    return (on_onednn, rest, 0) if cpu.int_mm else (on_onednn, 0, rest)


def _premise(handles, model: str, path: str) -> None:
    if path == "native":
        assert _native_layers(handles) == 3 and _products(handles) == (0, 0, 0)
    else:
        assert _products(handles) == _expected(3, _BIG[model]), f"{isa.cpu().summary}: {_products(handles)}"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("model", ["mlp", "mlp256"])
@pytest.mark.parametrize("scheme", ["per-tensor", "per-channel"])
def test_static_int8_layers_are_bit_exact(model, scheme, path):
    exported = export_quantized(model, scheme)
    method, source = _load(exported.pte, path)
    _premise(method.delegate_handles, model, path)
    for seed, scale in ((1, 1.0), (2, 0.05), (3, 8.0), (4, 100.0)):  # in range, nearly zero, saturating
        x = quantized_inputs(model, seed, scale)
        (actual,) = method.execute(list(x))
        (expected,) = run_reference(exported.pte, list(x))
        assert torch.equal(actual, expected), f"{model} {scheme} x{scale}: {(actual != expected).sum()} differ"


# Static 8-bit convolution programs: the corpus's own and transformers' (programs.CONV_MODELS: depthwise, grouped,
# residual adds, a broadcast multiply)
CONV_CASES = [("convnet", "per-tensor"), ("convnet", "per-channel"), ("decoder", "per-tensor"),
              ("decoder", "per-channel"), ("mobilenet", "per-channel"), ("regnet", "per-channel"),
              ("resnet", "per-tensor")]


def _routes(handles) -> Counter:
    return Counter(how.split(" (")[0] for handle in handles for _, how in handle.routes)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("model", "scheme"), CONV_CASES)
def test_static_int8_convolutions_are_bit_exact(model, scheme, path):
    """Natively, every signed 8-bit convolution but transposed ones runs pterun's kernels (dense, grouped and
    depthwise), and so do the programs' 8-bit adds and multiplies. On the PyTorch path dense convolutions (1x1
    ones on the pixels, others on gathered windows) multiply integers; depthwise, grouped, transposed and
    few-channel ones (3 or 6 input channels) keep the float emulation, exact too."""
    exported = export_quantized(model, scheme)
    nodes = [(n, g) for g in graphs(exported.pte) for n in g.nodes]
    kinds = node_kinds(exported.pte)
    assert all(v.datatype != Datatype.QUINT8 for g in graphs(exported.pte) for v in g.values.values())
    method, source = _load(exported.pte, path)
    convs = [n.p for n, _ in nodes if n.kind == "XNNConv2d"]
    dense = [p for p in convs if p.groups == 1]
    grouped = len(convs) - len(dense)
    eight_bit = {kind: sum(1 for n, g in nodes if n.kind == kind and g.values[n.p.output_id].datatype
                           == Datatype.QINT8) for kind in ("XNNAdd", "XNNMultiply")}
    if path == "native":
        routes = _routes(method.delegate_handles)
        assert routes["native int8 dense convolution"] == len(dense), routes
        assert routes["native int8 grouped convolution"] == grouped, routes
        assert routes["native int8 depthwise convolution"] == kinds["XNNDepthwiseConv2d"], routes
        assert routes["native int8 product"] == kinds["XNNFullyConnected"], routes
        assert (routes["native int8 add"], routes["native int8 mul"]) == tuple(eight_bit.values()), routes
        assert source.count("torch.convolution(") == kinds["XNNConvTranspose2d"]
    else:
        few = sum(1 for p in dense if p.kernel_width > 1 and p.group_input_channels * p.kernel_width < 16)
        assert len(dense) - few >= 1
        convolutions = kinds["XNNDepthwiseConv2d"] + kinds["XNNConvTranspose2d"] + few + grouped
        assert "native" not in "".join(_routes(method.delegate_handles))
        if isa.cpu().int_mm:
            assert source.count("torch._int_mm(") == len(dense) - few + kinds["XNNFullyConnected"]
            assert source.count("torch.convolution(") == convolutions
        else:  # float products of the integers: convolutions, pointwise ones and fully connected nodes as mm
            assert "torch._int_mm(" not in source and _ONEDNN not in source, isa.cpu().summary
            layers = len(convs) + kinds["XNNDepthwiseConv2d"] + kinds["XNNConvTranspose2d"] + kinds["XNNFullyConnected"]
            assert _float_layers(method.delegate_handles) == layers, _routes(method.delegate_handles)
            products = sum(source.count(call) for call in ("torch.convolution(", "torch.addmm(", "torch.mm("))
            assert products >= layers, source
    assert "max_pool2d" not in source  # 8-bit max pooling takes maxima of the 8-bit values, no float pass
    for seed, scale in ((1, 1.0), (2, 0.05), (3, 8.0), (4, 100.0)):
        x = quantized_inputs(model, seed, scale)
        (actual,) = method.execute(list(x))
        (expected,) = run_reference(exported.pte, list(x))
        assert torch.equal(actual, expected), f"{model} {scheme} x{scale}: {(actual != expected).sum()} differ"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("model", ["mlp", "mlp256"])
def test_dynamic_int8_layers_multiply_integers(model, path):
    """Float outputs. The native kernels take XNNPACK's float steps (times the row's scale, then a fused
    multiply-add of the channel's scale and the bias): ExecuTorch's bits. The PyTorch path does not fuse, so
    it is equal to float32 rounding; oneDNN takes a layer there only where the raw sums and corrections it
    adds are exact: 128 * sum |w| < 2**24."""
    exported = export_quantized(model, "dynamic")
    method, source = _load(exported.pte, path)
    sums = [v.data.abs().long().sum(1).max().item() for g in graphs(exported.pte) for v in g.values.values()
            if v.data is not None and v.datatype == Datatype.QCINT8]
    assert len(sums) == 3
    if path == "native":
        assert _native_layers(method.delegate_handles) == 3
    else:
        expected = _expected(3, _BIG[model], sum(s * 128 < 1 << 24 for s in sums))
        assert _products(method.delegate_handles) == expected, isa.cpu().summary
    for seed, scale in ((1, 1.0), (2, 0.05), (3, 8.0)):
        x = quantized_inputs(model, seed, scale)
        (actual,) = method.execute(list(x))
        (expected,) = run_reference(exported.pte, list(x))
        if path == "native":
            assert torch.equal(actual, expected), f"{model} dynamic x{scale}: {(actual != expected).sum()} differ"
        assert_relative(actual, expected, 1e-6, f"{model} dynamic x{scale}")


_BLOCK_ROUTES = {  # route: (kernel family, (oneDNN products, _int_mm products, batched float products, native))
    "native": (None, (0, 0, 0, 2)),
    "grouped": ("avx512vnni", (0, 2, 0, 0)),
    "onednn-per-block": ("avx512vnni", (2 + 4, 0, 0, 0)),
    "int_mm-per-block": ("avx512vnni", (0, 2 + 4, 0, 0)),
    "avx2": ("avx2", (0, 0, 2, 0)),
}


@pytest.mark.parametrize("route", list(_BLOCK_ROUTES))
def test_block_scaled_4bit_layers_are_bit_exact(route, monkeypatch):
    """8da4w: block sums are exact integers, scaled and added block after block as XNNPACK's qd8_f32_qb4w
    kernels add them, so the float outputs are ExecuTorch's bit for bit: pterun's native kernels, and its
    PyTorch path (``native=False``). There, for XNNPACK's avx512vnni kernels: few rows go as block-diagonal
    groups, many as a product per block (oneDNN's, or _int_mm's without it); for its avx2 kernels: four lanes
    of block sums per output, from one batched product."""
    family, products = _BLOCK_ROUTES[route]
    if family is not None and isa.cpu().block_kernels != family:
        pytest.skip(f"ExecuTorch's XNNPACK runs its {isa.cpu().block_kernels} kernels on this CPU, not {family}'s "
                    "(test_xnnpack_isa.py runs the avx2 kernels on an emulated AVX2 CPU)")
    exported = export_8da4w()  # 8 rows, 64 -> 128 -> 64, blocks of 32
    if route in ("onednn-per-block", "int_mm-per-block"):
        monkeypatch.setattr(qblock, "BLOCKWISE_ROWS", 1)
        monkeypatch.setattr(qblock, "ONEDNN_MIN_OUTPUTS", 1)
    if route == "int_mm-per-block":
        monkeypatch.setattr(isa, "onednn_available", lambda: False)
    if route == "native":
        assert native.available()[0], native.available()[1]
        method, source = _method_and_source(exported.pte)
    else:
        method, source = _method_and_source(exported.pte, native=False)
    found = (source.count(_ONEDNN), source.count(_INT_MM), source.count("torch.bmm("), source.count("qb4w_run("))
    assert found == products
    assert "torch.mm(" not in source and "torch.addmm(" not in source, "a float product stands in"
    for seed, scale in ((1, 1.0), (2, 0.05), (3, 8.0), (4, 100.0)):
        x = [torch.randn(8, 64, generator=torch.Generator().manual_seed(seed)) * scale]
        (actual,) = method.execute(x)
        (expected,) = run_reference(exported.pte, x)
        assert torch.equal(actual, expected), f"8da4w {route} x{scale}: {(actual != expected).sum()} differ"


@pytest.mark.parametrize("route", ["native", "this CPU's PyTorch products", "float"])
def test_dynamic_quantization_of_edge_rows(route, monkeypatch):
    """Rows of zeros, of one value, of subnormals and huge values quantize as XNNPACK quantizes them, whichever
    product follows (integer products take NaN's conversion to int8 as it comes; float ones would carry it)."""
    exported = export_quantized("mlp", "dynamic")
    if route == "float":
        _forced(monkeypatch, "float")
    method, source = _load(exported.pte, "native" if route == "native" else "pytorch")
    assert route != "float" or _products(method.delegate_handles) == (0, 0, 3)
    assert (route == "native") == (_native_layers(method.delegate_handles) == 3)
    x = torch.randn(8, 48, generator=torch.Generator().manual_seed(7))
    x[0], x[1], x[2], x[3], x[4] = 0.0, 3.0, -1e-38, 1e30, -2.0
    x[5, 5], x[6] = 1e-39, torch.linspace(0.0, 1.0, 48)
    x[7, :24], x[7, 24:] = -1e-38, 0.0  # a range so small its scale is infinite, times zeros: NaN
    (actual,) = method.execute([x])
    (expected,) = run_reference(exported.pte, [x])
    assert not actual.isnan().any()
    if route == "native":
        assert torch.equal(actual, expected), f"edge rows: {(actual != expected).sum()} differ"
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
        if g is shifted and isa.cpu().integer_products:
            # uint8 rows go to oneDNN as they are, to _int_mm with their top bit flipped
            source = delegate.source
            assert source.count(_INT_MM) + source.count(_ONEDNN) >= 3
            assert source.count("torch.bitwise_xor(") == source.count(_INT_MM)
        elif g is shifted:  # float products of the rows minus their zero point
            assert _float_layers([delegate]) >= 3 and "bitwise_xor" not in delegate.source
        (out,) = (torch.empty(v.dims) for v in g.outputs)
        delegate([x, out])
        outputs.append(out)
    assert torch.equal(outputs[0], outputs[1])


def _forced(monkeypatch, route: str) -> None:
    """Makes the next load take ``route`` for every 8-bit product: one of the products this CPU has exact."""
    cpu = isa.cpu()
    if route == "float":
        forced = dataclasses.replace(cpu, int_mm=False, onednn=False)
    else:
        forced = dataclasses.replace(cpu, int_mm=route == "int_mm", onednn=route == "onednn")
        monkeypatch.setattr(qlinear, "ONEDNN_MIN_MACS", 0 if route == "onednn" else 1 << 62)
    monkeypatch.setattr(isa, "cpu", lambda: forced)


@pytest.mark.parametrize("scheme", ["per-tensor", "per-channel", "dynamic"])
def test_every_exact_product_agrees_bit_for_bit(scheme, monkeypatch):
    """oneDNN's float32 handover is one rounding of the exact sums, as _int_mm's int32 sums converted once and
    as the float products of the integers: each product this CPU runs exactly gives the same bits, and so do
    the native kernels for static 8-bit layers (for dynamic ones they also fuse XNNPACK's multiply-add)."""
    cpu = isa.cpu()
    routes = [r for r, exact in (("onednn", cpu.onednn), ("int_mm", cpu.int_mm), ("float", True),
                                 ("native", scheme != "dynamic")) if exact]
    exported = export_quantized("mlp256", scheme)
    outputs = {}
    for route in routes:
        with monkeypatch.context() as patch:
            if route == "native":
                method, source = _load(exported.pte, "native")
                assert _native_layers(method.delegate_handles) == 3
            else:
                _forced(patch, route)
                method, source = _method_and_source(exported.pte, native=False)
                counts = dict(zip(("onednn", "int_mm", "float"), _products(method.delegate_handles)))
                assert counts[route] == 3 and sum(counts.values()) == 3, f"{route}: {counts}"
        outputs[route] = [method.execute(list(quantized_inputs("mlp256", seed, scale)))[0]
                          for seed, scale in ((1, 1.0), (3, 8.0), (4, 100.0))]
    for route in routes[1:]:
        for i, (a, b) in enumerate(zip(outputs[routes[0]], outputs[route])):
            assert torch.equal(a, b), f"{scheme}: {routes[0]} and {route} differ on input {i}"


def test_float_products_are_cut_where_float32_sums_would_round():
    """A layer whose worst dot product passes 2**24 multiplies as float32 pieces, each exact, as few as the
    weights allow; the pieces cover every input once."""
    from pterun.backends.xnnpack.nodes import qmath

    w = torch.full((4, 3000), 127.0, dtype=torch.float64)
    w[1, :1500] = 0.0  # one channel's weights lighter: the worst channel decides
    ranges = qmath.pieces(w.abs(), 255)
    assert [stop - start for start, stop in ranges] == [518, 518, 518, 518, 518, 410]
    assert ranges[0][0] == 0 and ranges[-1][1] == 3000 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(float(w[:, a:c].abs().sum(1).max()) * 255 < qmath.EXACT_F32 for a, c in ranges)
    assert qmath.pieces(w[:, :500].abs(), 255) == [(0, 500)]
