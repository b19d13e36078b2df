"""Bounded dynamic shapes: new input shapes resize the compiled graph (parameters and grids only; no
pipeline is compiled and no buffer allocated), and every operator's resize hook hears about each input
its output shape depends on, so changing either input of a two-input operator alone is enough."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.backends.webgpu import WebGPUDelegate, device
from pterun.backends.webgpu.graph import DType
from pterun.errors import InvalidArgument
from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.crafted import Craft, run
from tests.backends.webgpu.programs import RTOL, delegate_ops, delegates, dynamic_inputs, export, model
from tests.support.compare import assert_matches
from tests.support.differential import flat
from tests.support.oracle import run_reference

pytestmark = [needs_adapter, pytest.mark.slow]  # slow: runs first (tests/conftest.py)


def buffers(d: WebGPUDelegate) -> list[int]:
    return sorted(id(s.storage.buffer) for s in d.program.slots.tensors())


@pytest.fixture(scope="module")
def block():
    return export("dynamic", True), export("dynamic", False)


def test_dynamic_model_matches_cpu_runtime(block):
    lowered, reference = block
    ops = delegate_ops(lowered.pte)
    # The premise: the delegate resizes views by SymInts, and SwiGLU and the broadcast mul are inside it.
    assert ops["sym_size.int"] >= 1 and ops["aten.linear.default"] == 4 and ops["aten.sigmoid.default"] >= 1
    assert ops["aten._softmax.default"] == 1 and ops["aten.mul.Tensor"] >= 3
    method = pterun.Runtime.get().load_program(lowered.pte).load_method("forward")
    (d,) = [h for h in delegates(method) if h.fused_swiglu]
    pipelines, memory = device.gpu().pipeline_count, buffers(d)
    # Each input's length alone, then both, then the bounds and the smallest sizes.
    for n, m in [(9, 5), (3, 5), (3, 2), (16, 2), (16, 8), (1, 1), (12, 7), (9, 5)]:
        x = flat(dynamic_inputs(n * 31 + m, n, m))
        actual = method.execute(x)
        assert [tuple(a.shape) for a in actual] == [(1, n, 32), (m, 32)]
        assert_matches(actual, run_reference(reference.pte, x), rtol=RTOL, what=f"n={n} m={m}")
    assert device.gpu().pipeline_count == pipelines, "resizing compiled a pipeline"
    assert buffers(d) == memory, "resizing allocated memory"


def _two_input(name: str, a_dims, b_dims, out_dims, *extra):
    c = Craft()
    a, b = c.input(a_dims), c.input(b_dims)
    out = c.op(name, a, b, *[c.scalar(e) for e in extra], out=out_dims)
    c.output(out)
    return c, a, b


CASES = {
    # operator: (reference, a's upper bound, b's upper bound, output bound)
    "aten.mul.Tensor": (torch.mul, (8, 1, 16), (1, 6, 16), (8, 6, 16)),
    "aten.add.Tensor": (torch.add, (8, 1, 16), (1, 6, 16), (8, 6, 16)),
    "et_vk.swiglu.default": (
        lambda g, u: torch.nn.functional.silu(g) * u,
        (8, 1, 16),
        (1, 6, 16),
        (8, 6, 16),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_input_of_a_two_input_operator_resizes_it(name):
    ref, a_dims, b_dims, out_dims = CASES[name]
    extra = (1,) if name == "aten.add.Tensor" else ()
    c, a, b = _two_input(name, a_dims, b_dims, out_dims, *extra)
    d = c.delegate()
    node = d.program.nodes[0]
    assert d.program.hooks[a] == [node] and d.program.hooks[b] == [node]
    gen = torch.Generator().manual_seed(0)
    for sa, sb in [
        ((8, 1, 16), (1, 6, 16)),  # the bounds
        ((3, 1, 16), (1, 6, 16)),  # a alone
        ((3, 1, 16), (1, 2, 16)),  # b alone
        ((3, 1, 16), (1, 1, 16)),  # b alone again
        ((1, 1, 16), (1, 1, 16)),  # a alone
        ((8, 1, 16), (1, 6, 16)),
    ]:
        x, y = torch.randn(sa, generator=gen), torch.randn(sb, generator=gen)
        (actual,) = run(d, [x, y])
        assert_matches(actual, ref(x, y), rtol=RTOL, what=f"{name} {sa} x {sb}")


def test_fused_swiglu_resizes_on_each_input():
    # sigmoid/mul/mul over two dynamic inputs, fused at load: the fused node must hear both.
    c = Craft()
    g, u = c.input((8, 16)), c.input((8, 16))
    s = c.op("aten.sigmoid.default", g, out=(8, 16))
    h = c.op("aten.mul.Tensor", g, s, out=(8, 16))
    y = c.op("aten.mul.Tensor", h, u, out=(8, 16))
    c.output(y)
    d = c.delegate()
    assert d.fused_swiglu == 1
    node = d.program.nodes[0]
    assert d.program.hooks[g] == [node] and d.program.hooks[u] == [node]
    for sg, su in [
        ((8, 16), (8, 16)),
        ((1, 16), (8, 16)),
        ((1, 16), (1, 16)),
        ((5, 16), (1, 16)),
        ((5, 16), (5, 16)),
    ]:
        x1, x2 = torch.randn(sg), torch.randn(su)
        (actual,) = run(d, [x1, x2])
        assert_matches(actual, torch.nn.functional.silu(x1) * x2, rtol=RTOL, what=f"{sg} x {su}")


def test_symint_chain_follows_its_input():
    c = Craft()
    x = c.input((10, 6))
    n = c.op("sym_size.int", x, c.scalar(0), out="sym")
    n1 = c.op("add", n, c.scalar(1), out="sym")
    r = c.op("aten.arange.start_step", c.scalar(0), n1, c.scalar(1), out=(11,), dtype=DType.INT32)
    v = c.op("aten.view_copy.default", x, c.vlist([c.scalar(3), n, c.scalar(2)]), out=(3, 10, 2))
    # (3n // 2) - 1 through every SymInt operator
    k = c.op(
        "sub",
        c.op("floordiv", c.op("mul", n, c.scalar(3), out="sym"), c.scalar(2), out="sym"),
        c.scalar(1),
        out="sym",
    )
    r2 = c.op("aten.arange.start_step", c.scalar(0), k, c.scalar(1), out=(14,), dtype=DType.INT32)
    c.output(r, v, r2)
    d = c.delegate()
    for rows in (10, 4, 1):
        t = torch.randn(rows, 6)
        ar, view, ar2 = run(d, [t])
        assert ar.tolist() == list(range(rows + 1))
        assert ar2.tolist() == list(range(3 * rows // 2 - 1))
        assert_matches(view, t.view(3, rows, 2))


def test_input_past_its_bound_is_refused():
    c = Craft()
    x = c.input((4, 8))
    y = c.op("aten.neg.default", x, out=(4, 8))
    c.output(y)
    d = c.delegate()
    with pytest.raises(InvalidArgument, match="upper bound"):
        run(d, [torch.randn(5, 8)])
    (ok,) = run(d, [torch.ones(2, 8)])
    assert_matches(ok, -torch.ones(2, 8))


def test_symbolic_sizes_a_delegate_returns_reach_the_next_one():
    """transformers' Llama with a dynamic length: one delegate computes a size another one needs."""
    lowered, reference = export("llama_dynamic", True), export("llama_dynamic", False)
    plan = pterun.format.ProgramFile(lowered.pte).plan("forward")
    calls = [ins for ins in plan.instructions if isinstance(ins, pterun.format.DelegateCall)]
    ints = [
        a
        for ins in calls
        for a in ins.args
        if getattr(plan.values[a], "kind", None) == pterun.format.Kind.INT
    ]
    assert len(calls) > 1 and ints, "premise: delegates pass an int (a symbolic size) between them"
    method = pterun.Runtime.get().load_program(lowered.pte).load_method("forward")
    _, inputs, _ = model("llama_dynamic")
    for seed in range(4):
        args = flat(inputs(seed))
        assert_matches(
            method.execute(args), run_reference(reference.pte, args), rtol=RTOL, what=f"seed {seed}"
        )
