"""Float models lowered with XnnpackPartitioner: pterun's XNNPACK interpretation against ExecuTorch's XNNPACK.

Each program is run by both runtimes on the same inputs; the graphs' compute is
all inside XnnpackBackend delegates, which ExecuTorch runs with XNNPACK's
kernels and pterun with torch ops. XNNPACK sums in another order, so float
results agree to a relative 1e-4 of the output's magnitude.
"""

from __future__ import annotations

import pytest

import pterun
from tests.backends.xnnpack.programs import assert_relative, export_model, node_kinds
from tests.support.differential import flat
from tests.support.models import build
from tests.support.oracle import run_reference

RTOL = 1e-4

# The node types each model's delegates must contain (what the test claims to cover).
MODELS = {
    "llama": {"XNNFullyConnected", "XNNBatchMatrixMultiply", "XNNSoftmax", "XNNSigmoid", "XNNSquare",
              "XNNReciprocalSquareRoot", "XNNSin", "XNNCos", "XNNNegate", "XNNStaticSlice",
              "XNNConcatenate2", "XNNStaticReshape", "XNNStaticTranspose", "XNNMultiply", "XNNAdd"},
    "gpt2": {"XNNFullyConnected", "XNNBatchMatrixMultiply", "XNNSoftmax", "XNNTanh", "XNNMultiply", "XNNAdd"},
    "bert": {"XNNFullyConnected", "XNNBatchMatrixMultiply", "XNNSoftmax", "XNNGelu", "XNNTanh", "XNNCopy"},
    "vit": {"XNNConv2d", "XNNFullyConnected", "XNNConcatenate2", "XNNGelu", "XNNSoftmax"},
    # The bicubic position-embedding resize ends channels-last, outside any delegate, feeding the next one.
    "dinov2": {"XNNConv2d", "XNNFloor", "XNNClamp", "XNNConcatenate2", "XNNBatchMatrixMultiply", "XNNGelu"},
    "mobilenet_v2": {"XNNConv2d", "XNNDepthwiseConv2d", "XNNStaticConstantPad", "XNNGlobalAvgPooling2d"},
    "resnet": {"XNNConv2d", "XNNMaxPooling2d", "XNNGlobalAvgPooling2d", "XNNAdd", "XNNFullyConnected"},
    "convnext": {"XNNDepthwiseConv2d", "XNNConv2d", "XNNFullyConnected", "XNNGelu", "XNNMultiply"},
    "whisper_encoder": {"XNNConv2d", "XNNGelu", "XNNBatchMatrixMultiply", "XNNSoftmax"},
    "et_ds_cnn": {"XNNDepthwiseConv2d", "XNNAvgPooling2d", "XNNFullyConnected"},
}


def _check(name: str, seeds=(0, 1)) -> pterun.Program:
    exported = export_model(name)
    kinds = node_kinds(exported.pte)
    missing = MODELS.get(name, set()) - set(kinds)
    assert not missing, f"{name}: the delegates lack {sorted(missing)}; they hold {dict(kinds)}"
    program = pterun.Runtime.get().load_program(exported.pte)
    method = program.load_method("forward")
    model = build(name)
    for seed in seeds:
        args = flat(model.make_inputs(seed))
        actual = method.execute(args)
        expected = run_reference(exported.pte, args)
        assert len(actual) == len(expected)
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_relative(a, e, RTOL, f"{name} seed {seed} output {i}")
    return program


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_executorch_xnnpack(name):
    _check(name)


def test_dynamic_sequence_length():
    """A dynamic sequence length: each length is translated once, then its translation is reused."""
    from tests.support.models import SEQ_LENGTHS

    exported = export_model("llama_dynamic")
    assert {"XNNFullyConnected", "XNNBatchMatrixMultiply", "XNNSoftmax"} <= set(node_kinds(exported.pte))
    program = pterun.Runtime.get().load_program(exported.pte)
    method = program.load_method("forward")
    model = build("llama_dynamic")
    for seed in (0, 1, 2, 3, 1):  # lengths 12, 5, 32 (the bound), 1, then 5 again
        args = flat(model.make_inputs(seed))
        assert args[0].shape[1] == SEQ_LENGTHS[seed]
        actual = method.execute(args)
        expected = run_reference(exported.pte, args)
        assert_relative(actual[0], expected[0], RTOL, f"length {SEQ_LENGTHS[seed]}")
    # Four lengths, plus the shapes serialized in the blob (which spell 0-d inputs as [1]).
    delegates = method.delegate_handles
    assert delegates and all(len(d._translations) <= 5 for d in delegates)
    assert any(len(d._translations) > 2 for d in delegates), "no delegate saw more than one shape"
