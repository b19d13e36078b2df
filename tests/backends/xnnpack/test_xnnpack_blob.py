"""The delegate blob: header and graph checks, hand-built blobs, unsupported and corrupt ones.

Hand-built blobs are spliced into a program exported with XnnpackPartitioner
(a single linear layer, so one delegate taking a [3, 3] input to a [3, 3]
output), so they go through load_method exactly as exported blobs do.
"""

from __future__ import annotations

import random

import pytest
import torch

import pterun
from pterun.backends.interface import BackendInitContext
from pterun.backends.xnnpack import XnnpackBackend
from pterun.backends.xnnpack._generated import xnngraph_generated as fb
from pterun.errors import DelegateInvalidCompatibility, InvalidProgram, NotFound, PteError
from pterun.format import ProgramFile
from tests.backends.xnnpack.crafted import delegate_blob, splice, unary_graph, with_header
from tests.backends.xnnpack.programs import export_model, export_quantized, graphs, node_kinds
from tests.support.oracle import run_reference

XNN = fb.XNodeUnion


@pytest.fixture(scope="module")
def linear():
    exported = export_model("et_toy_linear")
    assert set(node_kinds(exported.pte)) == {"XNNFullyConnected"}
    return exported.pte


def _load(pte):
    return pterun.Runtime.get().load_program(pte).load_method("forward")


def test_hand_built_blob_runs_on_both_runtimes(linear, tmp_path):
    pte = splice(linear, with_header(unary_graph(XNN.XNNAbs)), tmp_path / "abs.pte")
    ((graph,)) = graphs(pte)
    assert [n.kind for n in graph.nodes] == ["XNNAbs"]
    x = torch.randn(3, 3)
    (actual,) = _load(pte).execute([x])
    (expected,) = run_reference(pte, [x])
    assert torch.equal(expected, x.abs()) and torch.equal(actual, expected)


def test_bare_flatbuffer_without_header(linear, tmp_path):
    """Blobs from before the header existed are the flatbuffer alone."""
    pte = splice(linear, unary_graph(XNN.XNNNegate, identifier=b"XN00"), tmp_path / "bare.pte")
    x = torch.randn(3, 3)
    assert torch.equal(_load(pte).execute([x])[0], -x)


@pytest.mark.parametrize("node_type,name", [(200, "200"), (XNN.XNNScaledDotProductAttention,
                                                          "XNNScaledDotProductAttention")])
def test_unsupported_node_type_fails_load_method(linear, tmp_path, node_type, name):
    pte = splice(linear, with_header(unary_graph(node_type)), tmp_path / "unknown.pte")
    program = pterun.Runtime.get().load_program(pte)
    with pytest.raises(DelegateInvalidCompatibility) as info:
        program.load_method("forward")
    assert info.value.code == 0x30 and name in str(info.value)


def test_wrong_identifier(linear, tmp_path):
    pte = splice(linear, with_header(unary_graph(XNN.XNNAbs, identifier=b"ZZ99")), tmp_path / "ident.pte")
    with pytest.raises(DelegateInvalidCompatibility, match="identifier"):
        _load(pte)


def test_constant_in_the_blob(linear, tmp_path):
    """Constants can follow the flatbuffer in the blob itself, located by offset."""
    values = torch.arange(9, dtype=torch.float32).reshape(3, 3) - 4
    blob = with_header(unary_graph(XNN.XNNAbs, inline_constant=True), values.numpy().tobytes())
    pte = splice(linear, blob, tmp_path / "inline.pte")
    # Not run on ExecuTorch: its runtime crashes (SIGSEGV) on a graph whose only node reads a constant.
    (actual,) = _load(pte).execute([torch.randn(3, 3)])
    assert torch.equal(actual, values.abs())


def test_missing_named_data(linear, tmp_path):
    blob = with_header(unary_graph(XNN.XNNAbs, named_constant="no-such-key"))
    pte = splice(linear, blob, tmp_path / "named.pte")
    with pytest.raises(NotFound, match="no-such-key"):
        _load(pte)


@pytest.mark.parametrize("field,value", [(10, 10**6), (14, 10**6), (18, 3), (22, 10**9), (8, 4)])
def test_inconsistent_header(linear, tmp_path, field, value):
    blob = bytearray(with_header(unary_graph(XNN.XNNAbs)))
    width = 8 if field == 22 else 2 if field == 8 else 4
    blob[field:field + width] = value.to_bytes(width, "little")
    pte = splice(linear, bytes(blob), tmp_path / "header.pte")
    with pytest.raises((InvalidProgram, DelegateInvalidCompatibility)):
        _load(pte)


def test_corrupt_blobs_raise_pte_errors():
    """Random damage to a real blob (8-bit weights, scales in named data): a PteError or a working delegate,
    never another exception."""
    exported = export_quantized("mlp", "per-channel")
    program = ProgramFile(exported.pte)
    original = delegate_blob(exported.pte)
    context = BackendInitContext(method_name="forward", named_data=program.named_data)
    backend = XnnpackBackend()
    backend.init(context, memoryview(original), ())
    rng = random.Random(0)
    failures = 0
    for trial in range(300):
        blob = bytearray(original)
        kind = trial % 3
        if kind == 0:
            for _ in range(rng.randint(1, 6)):
                blob[rng.randrange(len(blob))] = rng.randrange(256)
        elif kind == 1:
            blob = blob[: rng.randrange(len(blob))]
        else:
            at = rng.randrange(32, len(blob) - 4)
            blob[at:at + 4] = rng.randrange(2**32).to_bytes(4, "little")
        try:
            backend.init(context, memoryview(bytes(blob)), ())
        except PteError:
            failures += 1
    assert failures > 100, f"only {failures} of 300 damaged blobs were rejected"
