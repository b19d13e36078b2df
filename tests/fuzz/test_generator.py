"""The generator, checker and shrinker on their own (no export): programs are a pure function of the seed,
valid by construction, cover what they claim to, and shrink to what a failure needs."""

from __future__ import annotations

import collections

import pytest
import torch

from tests.fuzz.builder import dynamic_shapes, eager, make_inputs, sizes_for_call
from tests.fuzz.check import check
from tests.fuzz.generator import generate
from tests.fuzz.ops import OPS, Invalid
from tests.fuzz.shrink import cost, shrink, tidy
from tests.fuzz.spec import Node, Spec, Symbol, TensorDecl

SEEDS = range(60)


@pytest.fixture(scope="module")
def specs() -> list[Spec]:
    return [generate(seed) for seed in SEEDS]


def test_a_program_is_a_pure_function_of_its_seed(specs):
    for seed, spec in zip(SEEDS, specs):
        assert generate(seed).dumps() == spec.dumps()
        assert Spec.from_json(spec.to_json()).dumps() == spec.dumps()
        for k in range(spec.calls):
            for a, b in zip(make_inputs(spec, k), make_inputs(spec, k)):
                assert torch.equal(a, b)


def test_programs_are_valid_and_run_eagerly(specs):
    for spec in specs:
        check(spec)  # recorded types are what the operators make
        module = eager(spec)
        with torch.no_grad():
            for k in range(spec.calls):
                outputs = module(*make_inputs(spec, k))
                assert len(outputs) == len(spec.outputs)


def test_programs_cover_the_features_they_are_meant_to(specs):
    seen = collections.Counter()
    for spec in specs:
        seen["dynamic dims"] += bool(spec.symbols)
        seen["mutable buffers"] += bool(spec.buffers)
        seen["several outputs"] += len(spec.outputs) > 1
        kinds = {OPS[n.op].kind for n in spec.nodes}
        seen["in place"] += "inplace" in kinds
        seen["views"] += "view" in kinds
        seen["a node with several outputs"] += any(len(n.outs) > 1 for n in spec.nodes)
        dtypes = {t.dtype for t in spec.inputs} | {o.dtype for n in spec.nodes for o in n.outs}
        for dtype in ("float16", "bfloat16", "int64", "int32", "bool"):
            seen[dtype] += dtype in dtypes
        seen["layers"] += any(n.op in ("linear", "conv2d", "matmul", "layer_norm") for n in spec.nodes)
    assert len(seen) == 12 and all(seen[k] >= 3 for k in seen), seen
    assert all(3 <= len(s.nodes) <= 20 for s in specs)


def test_calls_cover_the_bounds_of_dynamic_dims():
    spec = next(s for s in map(generate, range(200)) if s.symbols)
    symbol = spec.symbols[0]
    assert [sizes_for_call(spec, k)[symbol.name] for k in range(3)] == [
        symbol.example,
        symbol.max,
        symbol.min,
    ]
    (per_input,) = dynamic_shapes(spec)
    assert any(d for d in per_input), "premise: an input has a dynamic dim"


def N(node_id: str, op: str, args: list[str], attrs: dict, *outs: str) -> Node:
    """A node whose output types the checker fills in (``check(..., retype=True)``)."""
    return Node(node_id, op, args, attrs, [TensorDecl(o, [], "float32") for o in outs])


def _spec(nodes, *, outputs, inputs=None, **kwargs) -> Spec:
    inputs = inputs or [TensorDecl("x0", [2, 3], "float32")]
    return Spec(seed=0, inputs=inputs, nodes=nodes, outputs=outputs, **kwargs)


def test_the_checker_refuses_writes_to_inputs_and_to_expanded_views():
    write_input = _spec(
        [N("n0", "iadd", ["x0"], {"scalar": 1.0}), N("n1", "relu", ["x0"], {}, "v0")], outputs=["v0"]
    )
    with pytest.raises(Invalid, match="may not be written"):
        check(write_input, retype=True)
    expanded = _spec(
        [
            N("n0", "clone", ["x0"], {"contiguous": True}, "v0"),
            N("n1", "unsqueeze", ["v0"], {"dim": 0}, "v1"),
            N("n2", "expand", ["v1"], {"shape": [4, 2, 3]}, "v2"),
            N("n3", "iadd", ["v2"], {"scalar": 1.0}),
        ],
        outputs=["v0"],
    )
    with pytest.raises(Invalid, match="may not be written"):
        check(expanded, retype=True)


def test_the_checker_refuses_dims_derived_from_dynamic_ones():
    symbols = [Symbol("s0", 2, 6, 3)]
    inputs = [TensorDecl("x0", ["s0", 3], "float32")]
    doubled = _spec(
        [N("n0", "cat", ["x0", "x0"], {"dim": 0}, "v0")], inputs=inputs, outputs=["v0"], symbols=symbols
    )
    with pytest.raises(Invalid, match="derived"):
        check(doubled, retype=True)
    along = _spec(
        [N("n0", "cat", ["x0", "x0"], {"dim": 1}, "v0")], inputs=inputs, outputs=["v0"], symbols=symbols
    )
    assert list(check(along, retype=True).values["v0"].shape) == ["s0", 6]


def test_tidy_drops_what_no_output_needs_but_keeps_buffer_writes():
    spec = _spec(
        [
            N("n0", "relu", ["x0"], {}, "v0"),
            N("n1", "sigmoid", ["x0"], {}, "v1"),
            N("n2", "copy", ["b0", "x0"], {}),
            N("n3", "tanh", ["x1"], {}, "v2"),
        ],
        inputs=[TensorDecl("x0", [2, 3], "float32"), TensorDecl("x1", [2], "float32")],
        outputs=["v0"],
        buffers=[TensorDecl("b0", [2, 3], "float32", "zeros")],
    )
    small = tidy(spec)
    assert [n.id for n in small.nodes] == ["n0", "n2"]
    assert [t.name for t in small.inputs] == ["x0"]


def test_shrinking_keeps_the_failure_and_little_else():
    spec = next(
        s
        for s in map(generate, range(100))
        if len(s.nodes) >= 10 and any(n.op == "layer_norm" for n in s.nodes)
    )

    def evaluate(candidate: Spec) -> str:
        return "failure/layer_norm" if any(n.op == "layer_norm" for n in candidate.nodes) else "agree/"

    small = shrink(spec, "failure/layer_norm", evaluate, seconds=120)
    assert evaluate(small) == "failure/layer_norm"
    assert [n.op for n in small.nodes] == ["layer_norm"]
    assert len(small.inputs) == 1 and not small.buffers and not small.symbols
    assert cost(small) < cost(spec)
