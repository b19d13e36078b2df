"""SwiGLU: the sigmoid/mul/mul chain ExecuTorch 1.5.1 exports is fused at load into one dispatch, and the
et_vk.swiglu operator newer exporters write runs on the same kernel; chains that must not fuse stay
as exported."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.backends.webgpu import FUSE_SWIGLU, NAME, WebGPUDelegate
from pterun.backends.webgpu.blob import split_blob
from pterun.backends.webgpu.graph import DType, Op, constant_bytes, read_graph
from pterun.format import ProgramFile
from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.crafted import Craft, run
from tests.backends.webgpu.programs import RTOL, delegate_ops, delegates, export, model
from tests.support.compare import assert_matches
from tests.support.oracle import run_reference

pytestmark = needs_adapter

FUSED = "silu_mul_fused"
SIGMOID, MUL, SILU, SWIGLU = (
    "aten.sigmoid.default",
    "aten.mul.Tensor",
    "aten.silu.default",
    "et_vk.swiglu.default",
)


@pytest.fixture(scope="module")
def mlp():
    return export("swiglu", True), export("swiglu", False)


def test_exported_chain_is_fused_into_one_dispatch(mlp):
    lowered, reference = mlp
    ops = delegate_ops(lowered.pte)
    # The premise: 1.5.1 writes SwiGLU as sigmoid, mul, mul inside the VulkanBackend delegate.
    assert ops[SIGMOID] == 1 and ops[MUL] == 2 and ops["aten.linear.default"] == 3 and SWIGLU not in ops
    _, inputs, _ = model("swiglu")
    x = list(inputs(1))
    expected = run_reference(reference.pte, x)

    fused = pterun.Runtime.get().load_program(lowered.pte).load_method("forward")
    unfused = (
        pterun.Runtime.get()
        .load_program(lowered.pte, backend_options={NAME: {FUSE_SWIGLU: False}})
        .load_method("forward")
    )
    out_fused, out_unfused = fused.execute(x), unfused.execute(x)
    assert_matches(out_fused, expected, rtol=RTOL)
    assert_matches(out_unfused, expected, rtol=RTOL)

    (df,), (du,) = delegates(fused), delegates(unfused)
    assert df.fused_swiglu == 1 and du.fused_swiglu == 0
    assert df.op_names.count(FUSED) == 1 and SIGMOID not in df.op_names and MUL not in df.op_names
    assert du.op_names.count(MUL) == 2 and FUSED not in du.op_names
    # 3 linears + silu_mul_fused, against 3 linears + sigmoid + mul + mul (views dispatch nothing).
    assert (df.dispatch_count, du.dispatch_count) == (4, 6)


def _edited_graph(pte):
    """The MLP's real graph with its sigmoid/mul/mul replaced by the et_vk.swiglu operator."""
    program = ProgramFile(pte)
    (d,) = [d for d in program.plan("forward").delegates if d.backend_id == NAME]
    blob = split_blob(program.delegate_data(d.inline, d.index))
    graph = read_graph(blob)
    chain = graph.chain
    s = next(i for i, op in enumerate(chain) if op.name == SIGMOID)
    gate = chain[s].args[0]
    m1 = next(i for i, op in enumerate(chain) if op.name == MUL and chain[s].args[-1] in op.args[:-1])
    m2 = next(i for i, op in enumerate(chain) if op.name == MUL and chain[m1].args[-1] in op.args[:-1])
    up = next(a for a in chain[m2].args[:-1] if a != chain[m1].args[-1])
    chain[m2] = Op(SWIGLU, [gate, up, chain[m2].args[-1]])
    graph.chain = [op for i, op in enumerate(chain) if i not in (s, m1)]
    constants = {
        i: bytes(constant_bytes(graph, i, blob.constants, program.named_data))
        for i in range(len(graph.constants))
    }
    return graph, constants


def test_et_vk_swiglu_operator_on_an_edited_real_graph(mlp):
    lowered, reference = mlp
    graph, constants = _edited_graph(lowered.pte)
    assert [op.name for op in graph.chain].count(SWIGLU) == 1
    delegate = WebGPUDelegate.from_graph(graph, constants)
    assert SWIGLU in delegate.op_names and delegate.fused_swiglu == 0
    _, inputs, _ = model("swiglu")
    for seed in (0, 2):
        x = list(inputs(seed))
        (actual,) = run(delegate, x)
        assert_matches(actual, run_reference(reference.pte, x)[0], rtol=RTOL)
        assert delegate.dispatch_count == 4


@pytest.mark.parametrize(
    "gate,up", [((5, 7), (5, 7)), ((3, 70, 33), (3, 70, 33)), ((4, 1, 9), (1, 6, 9)), ((9,), (2, 9))], ids=str
)
def test_et_vk_swiglu_operator(gate, up):
    c = Craft()
    g, u = c.input(gate), c.input(up)
    out = c.op(SWIGLU, g, u, out=torch.broadcast_shapes(gate, up))
    c.output(out)
    d = c.delegate()
    x, y = torch.randn(gate) * 4, torch.randn(up)
    (actual,) = run(d, [x, y])
    assert_matches(actual, torch.nn.functional.silu(x) * y, rtol=RTOL)
    assert d.dispatch_count == 1


def _chain(c: Craft, gate: int, up: int, shape, *, silu=False, swap=False, dtype=DType.FLOAT32):
    """silu(gate) * up spelled as the exporter spells it; returns (silu value, sigmoid value, product)."""
    if silu:
        h = c.op(SILU, gate, out=shape)
        s = None
    else:
        s = c.op(SIGMOID, gate, out=shape)
        h = c.op(MUL, *((s, gate) if swap else (gate, s)), out=shape)
    y = c.op(MUL, *((up, h) if swap else (h, up)), out=shape, dtype=dtype)
    return h, s, y


def _expect(x, y):
    return torch.nn.functional.silu(x) * y


@pytest.mark.parametrize("variant", ["sigmoid", "swapped", "silu"])
def test_fusable_spellings(variant):
    c = Craft()
    g, u = c.input((6, 70)), c.input((6, 70))
    _, _, y = _chain(c, g, u, (6, 70), silu=variant == "silu", swap=variant == "swapped")
    c.output(y)
    fused, plain = c.delegate(), c.delegate(fuse=False)
    assert fused.fused_swiglu == 1 and fused.op_names == [FUSED]
    x1, x2 = torch.randn(6, 70) * 3, torch.randn(6, 70)
    (a,), (b,) = run(fused, [x1, x2]), run(plain, [x1, x2])
    assert_matches(a, _expect(x1, x2), rtol=RTOL)
    assert_matches(b, _expect(x1, x2), rtol=RTOL)
    assert fused.dispatch_count == 1 and plain.dispatch_count == (2 if variant == "silu" else 3)


def _not_fused(c: Craft, inputs, expected):
    d = c.delegate()
    assert d.fused_swiglu == 0 and FUSED not in d.op_names
    actual = run(d, inputs)
    assert_matches(actual, expected, rtol=RTOL)


def test_no_fusion_when_the_sigmoid_has_another_reader():
    c = Craft()
    g, u = c.input((4, 9)), c.input((4, 9))
    _, s, y = _chain(c, g, u, (4, 9))
    extra = c.op("aten.add.Tensor", s, u, c.scalar(1), out=(4, 9))
    c.output(y, extra)
    x1, x2 = torch.randn(4, 9), torch.randn(4, 9)
    _not_fused(c, [x1, x2], [_expect(x1, x2), torch.sigmoid(x1) + x2])


def test_no_fusion_when_the_sigmoid_is_an_output():
    c = Craft()
    g, u = c.input((4, 9)), c.input((4, 9))
    _, s, y = _chain(c, g, u, (4, 9))
    c.output(y, s)
    x1, x2 = torch.randn(4, 9), torch.randn(4, 9)
    _not_fused(c, [x1, x2], [_expect(x1, x2), torch.sigmoid(x1)])


@pytest.mark.parametrize("silu", [False, True], ids=["gate*sigmoid", "silu"])
def test_no_fusion_when_the_silu_result_has_another_reader(silu):
    c = Craft()
    g, u = c.input((4, 9)), c.input((4, 9))
    h, _, y = _chain(c, g, u, (4, 9), silu=silu)
    extra = c.op("aten.neg.default", h, out=(4, 9))
    c.output(y, extra)
    x1, x2 = torch.randn(4, 9), torch.randn(4, 9)
    _not_fused(c, [x1, x2], [_expect(x1, x2), -torch.nn.functional.silu(x1)])


def test_no_fusion_when_shapes_differ():
    c = Craft()
    g, u = c.input((4, 9)), c.input((1, 9))
    _, _, y = _chain(c, g, u, (4, 9))
    c.output(y)
    x1, x2 = torch.randn(4, 9), torch.randn(1, 9)
    _not_fused(c, [x1, x2], [_expect(x1, x2)])


def test_no_fusion_when_not_float32():
    c = Craft()
    g, u = c.input((4, 9), DType.INT32), c.input((4, 9))
    _, _, y = _chain(c, g, u, (4, 9))
    c.output(y)
    x1, x2 = torch.randint(-4, 4, (4, 9)), torch.randn(4, 9)
    _not_fused(c, [x1, x2], [_expect(x1.float(), x2)])


def test_decoder_fuses_every_layer():
    lowered = export("et_llama", True)
    ops = delegate_ops(lowered.pte)
    assert ops[SIGMOID] == 2 and FUSED not in ops  # two layers, each a sigmoid/mul/mul SwiGLU
    method = pterun.Runtime.get().load_program(lowered.pte).load_method("forward")
    assert sum(d.fused_swiglu for d in delegates(method)) == 2
