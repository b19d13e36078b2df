"""One-operator graphs checked against PyTorch: the harness of the per-kernel tests.

The kernel tests run each operator on random inputs of several shapes, with odd sizes and sizes past
one workgroup (64 invocations, 16 x 16 matmul tiles, 65535 workgroups per grid dimension).

``check(name, *args)`` builds a graph holding the single operator ``name``
with ``args`` laid out as the Vulkan serializer lays out that operator's
schema (tensors become graph inputs, lists and scalars become values), runs
it on the WebGPU backend, and compares with ``torch.ops.<name>`` called on the
same arguments (or ``reference`` when the operator is not an aten one).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pterun.backends.webgpu.graph import DType
from tests.backends.webgpu.crafted import DTYPES, Craft, run
from tests.support.compare import assert_matches

RTOL = 1e-4


def rand(*shape, scale=1.0, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def positive(*shape, seed=0):
    return rand(*shape, seed=seed).abs() + 0.05


def aten(name: str):
    """The ``torch.ops`` overload ``name``, called with its arguments in schema order, as graphs hold them."""
    ns, op, overload = name.split(".")
    fn = getattr(getattr(getattr(torch.ops, ns), op), overload)
    schema = fn._schema.arguments

    def call(*args):
        positional, keywords = [], {}
        for arg, value in zip(schema, args, strict=False):
            if arg.kwarg_only:
                keywords[arg.name] = value
            else:
                positional.append(value)
        return fn(*positional, **keywords)

    return call


def _graph_arg(c: Craft, a, inputs: list):
    if isinstance(a, torch.Tensor):
        inputs.append(a)
        return c.input(a.shape, DTYPES[a.dtype])
    if isinstance(a, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in a):
        # Tensor lists (and optional-tensor lists, whose Nones are Null values) are value lists.
        return c.vlist([_graph_arg(c, t, inputs) for t in a])
    if isinstance(a, (list, tuple)):
        if all(isinstance(v, bool) for v in a) and a:
            return c.bools(a)
        if any(isinstance(v, float) for v in a):
            return c.doubles(a)
        return c.ints(a)
    return c.scalar(a)


def _dtype(t: torch.Tensor) -> DType:
    return DTYPES[t.dtype]


def build(name: str, args, expected):
    c = Craft()
    inputs: list = []
    gargs = [_graph_arg(c, a, inputs) for a in args]
    if isinstance(expected, (tuple, list)):
        out = c.op(name, *gargs, out=[tuple(e.shape) for e in expected], dtype=[_dtype(e) for e in expected])
        outs = list(c.values[out].items)
    else:
        out = c.op(name, *gargs, out=tuple(expected.shape), dtype=_dtype(expected))
        outs = [out]
    c.output(*outs)
    return c, inputs


def check(name: str, *args, reference: Callable | None = None, rtol: float = RTOL, outputs=None):
    """Runs ``name`` on ``args`` through the backend and asserts it matches PyTorch; returns the outputs."""
    expected = (reference or aten(name))(*args)
    if outputs is not None:
        expected = [expected[i] for i in outputs] if isinstance(expected, (tuple, list)) else expected
    c, inputs = build(name, args, expected)
    delegate = c.delegate()
    assert delegate.op_names == [name], f"the graph under test holds {delegate.op_names}, not {name}"
    actual = run(delegate, inputs)
    exp_list = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    for k, (a, e) in enumerate(zip(actual, exp_list, strict=True)):
        if e.dtype == torch.int32:
            e = e.long()
        assert_matches(a, e, rtol=rtol, what=f"{name} output {k}")
    return actual, delegate
