"""What an XNNPACK delegate call writes: its outputs, never its inputs, so a constant may be read but not written."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.backends.xnnpack._generated import xnngraph_generated as fb
from pterun.errors import InvalidProgram
from tests.backends.xnnpack.crafted import unary_graph, with_header
from tests.format import build

X = build.Tensor(sizes=(3, 3), memory=(1, 0))
W = build.Tensor(sizes=(3, 3), data_buffer_idx=1)
OUT = build.Tensor(sizes=(3, 3), memory=(1, 48))
WEIGHT = torch.arange(9, dtype=torch.float32).reshape(3, 3) - 4


def _program(args) -> bytes:
    """forward(x) with one abs delegate (external input 0, output 1) called with ``args``."""
    plan = build.Plan(values=[X, W, OUT], inputs=[0], outputs=[2], instructions=[("delegate", 0, args)],
                      delegates=[("XnnpackBackend", 0, 0)], buffer_sizes=[0, 96])
    return build.program([plan], constant_buffers=[b"", WEIGHT.numpy().tobytes()],
                         delegate_data=[with_header(unary_graph(fb.XNodeUnion.XNNAbs))])


def test_a_constant_as_the_delegate_input_loads():
    (out,) = pterun.Runtime.get().load_program(_program([1, 2])).load_method("forward").execute([torch.ones(3, 3)])
    assert torch.equal(out, WEIGHT.abs())


def test_a_constant_as_the_delegate_output_is_refused():
    data = _program([0, 1])
    before = bytes(data)
    with pytest.raises(InvalidProgram) as info:
        pterun.Runtime.get().load_program(data).load_method("forward")
    assert info.value.code == 0x23
    assert "instruction 0 (delegate XnnpackBackend) writes value 1, a constant" in str(info.value)
    assert data == before
    test_a_constant_as_the_delegate_input_loads()  # the runtime still runs a valid one


def test_a_call_with_the_wrong_number_of_arguments_is_refused_at_load():
    with pytest.raises(InvalidProgram) as info:
        pterun.Runtime.get().load_program(_program([0, 2, 2])).load_method("forward")
    assert info.value.code == 0x23
    assert "instruction 0 (delegate XnnpackBackend)" in str(info.value)
    assert "takes 2 arguments; the call passes 3" in str(info.value)
