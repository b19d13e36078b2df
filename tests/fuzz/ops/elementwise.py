"""Elementwise operators: unary, binary with broadcasting and scalars, comparisons, ``where``, casts.

Operations that are undefined somewhere are guarded the way models guard them
(``sqrt(|x|)``, ``log(|x| + 1)``, a divisor of at least one), so outputs stay finite
and comparisons between runtimes mean something.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.fuzz.ops.registry import op
from tests.fuzz.spec import ALL, FLOATS, INTS, REALS


def unary(dtypes):
    def propose(g):
        v = g.pick(dtypes=dtypes)
        return ([v.name], {}) if v else None

    return propose


UNARY = {
    "relu": (torch.relu, FLOATS + INTS),
    "sigmoid": (torch.sigmoid, FLOATS),
    "tanh": (torch.tanh, FLOATS),
    "abs": (torch.abs, REALS),
    "neg": (torch.neg, REALS),
    "sin": (torch.sin, FLOATS),
    "cos": (torch.cos, FLOATS),
    "exp": (lambda x: torch.exp(x.clamp(max=8.0)), FLOATS),
    "sqrt": (lambda x: torch.sqrt(x.abs()), FLOATS),
    "log": (lambda x: torch.log(x.abs() + 1), FLOATS),
    "rsqrt": (lambda x: torch.rsqrt(x.abs() + 1), FLOATS),
    "reciprocal": (lambda x: torch.reciprocal(x.abs() + 1), FLOATS),
    "gelu": (F.gelu, FLOATS),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), FLOATS),
    "silu": (F.silu, FLOATS),
    "hardswish": (F.hardswish, FLOATS),
    "hardsigmoid": (F.hardsigmoid, FLOATS),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.125), FLOATS),
    "elu": (F.elu, FLOATS),
    "floor": (torch.floor, FLOATS),
    "ceil": (torch.ceil, FLOATS),
    "round": (torch.round, FLOATS),
    "trunc": (torch.trunc, FLOATS),
    "erf": (torch.erf, FLOATS),
    "square": (torch.square, REALS),
    "sign": (torch.sign, FLOATS + INTS),
    "logical_not": (torch.logical_not, ALL),
    "bitwise_not": (torch.bitwise_not, INTS + ("bool",)),
}

for _name, (_fn, _dtypes) in UNARY.items():
    op(_name, unary(_dtypes), weight=0.25)(lambda ctx, x, _fn=_fn: _fn(x))


def _clamp_attrs(g, dtype):
    lo = g.scalar(dtype, low=-2, high=0)
    hi = g.scalar(dtype, low=0, high=2)
    return {"min": lo if g.chance(0.8) else None, "max": hi}


def propose_clamp(g):
    v = g.pick(dtypes=FLOATS + INTS)
    return ([v.name], _clamp_attrs(g, v.dtype)) if v else None


@op("clamp", propose_clamp, weight=0.8)
def clamp(ctx, x, min, max):
    return torch.clamp(x, min, max)


def propose_hardtanh(g):
    v = g.pick(dtypes=FLOATS)
    return ([v.name], {"min": -g.choice([0.5, 1.0, 2.0]), "max": g.choice([0.5, 1.0, 6.0])}) if v else None


@op("hardtanh", propose_hardtanh, weight=0.3)
def hardtanh(ctx, x, min, max):
    return F.hardtanh(x, min, max)


# -- binary -----------------------------------------------------------------------------------------------


def binary(dtypes, *, scalar=True, mixed=True, nonzero=False):
    """``a op b`` with ``b`` broadcasting against ``a`` (either way round), another dtype now and then, or a
    Python scalar."""

    def propose(g):
        a = g.pick(dtypes=dtypes)
        if a is None:
            return None
        if scalar and g.chance(0.25):
            return [a.name], {"scalar": g.scalar(a.dtype, nonzero=nonzero)}
        dtype = a.dtype
        if mixed and g.chance(0.1):
            dtype = g.choice([d for d in dtypes if d != a.dtype] or [a.dtype])
        b = g.operand(a.shape, dtype)
        if b is None:
            return None
        return ([b, a.name] if g.chance(0.3) else [a.name, b]), {}

    return propose


def _binary(fn, guard=None):
    def run(ctx, a, b=None, scalar=None):
        if b is None:
            b = scalar
        elif guard is not None:
            b = guard(b)
        return fn(a, b)

    return run


def _divisor(b):
    return b.abs() + 1


BINARY = {
    "add": (torch.add, REALS + ("bool",), {}),
    "sub": (torch.sub, REALS, {}),
    "mul": (torch.mul, ALL, {}),
    "div": (torch.div, FLOATS, {"guard": _divisor, "nonzero": True}),
    "maximum": (torch.maximum, REALS, {"scalar": False}),
    "minimum": (torch.minimum, REALS, {"scalar": False}),
    "remainder": (torch.remainder, INTS, {"guard": _divisor, "nonzero": True, "mixed": False}),
    "floor_divide": (torch.floor_divide, INTS, {"guard": _divisor, "nonzero": True, "mixed": False}),
    "bitwise_and": (torch.bitwise_and, INTS + ("bool",), {"mixed": False}),
    "bitwise_or": (torch.bitwise_or, INTS + ("bool",), {"mixed": False}),
    "bitwise_xor": (torch.bitwise_xor, INTS + ("bool",), {"mixed": False}),
    "logical_and": (torch.logical_and, ALL, {"scalar": False}),
    "logical_or": (torch.logical_or, ALL, {"scalar": False}),
    "eq": (torch.eq, ALL, {}),
    "ne": (torch.ne, ALL, {}),
    "lt": (torch.lt, REALS, {}),
    "le": (torch.le, REALS, {}),
    "gt": (torch.gt, REALS, {}),
    "ge": (torch.ge, REALS, {}),
}

# ExecuTorch's remainder of a negative integer differs from PyTorch's: rarely, to find anything else.
_WEIGHTS = {"add": 2.0, "sub": 1.0, "mul": 2.0, "div": 0.8, "remainder": 0.15}

for _name, (_fn, _dtypes, _opts) in BINARY.items():
    _guard = _opts.get("guard")
    op(
        _name,
        binary(
            _dtypes,
            scalar=_opts.get("scalar", True),
            mixed=_opts.get("mixed", True),
            nonzero=_opts.get("nonzero", False),
        ),
        weight=_WEIGHTS.get(_name, 0.4),
    )(_binary(_fn, _guard))


def propose_add_alpha(g):
    a = g.pick(dtypes=FLOATS)
    b = g.operand(a.shape, a.dtype) if a else None
    return ([a.name, b], {"alpha": g.choice([0.5, 2.0, -1.0])}) if b else None


@op("add_alpha", propose_add_alpha, weight=0.3)
def add_alpha(ctx, a, b, alpha):
    return torch.add(a, b, alpha=alpha)


def propose_rsub(g):
    a = g.pick(dtypes=FLOATS + INTS)
    return ([a.name], {"scalar": g.scalar(a.dtype)}) if a else None


@op("rsub", propose_rsub, weight=0.3)
def rsub(ctx, a, scalar):
    return torch.rsub(a, scalar)


# -- selection ----------------------------------------------------------------------------------------------


def propose_where(g):
    a = g.pick(dtypes=REALS)
    if a is None:
        return None
    cond = g.operand(a.shape, "bool", exact=g.chance(0.5))
    if cond is None:
        return None
    if g.chance(0.3):
        return [cond, a.name], {"other": g.scalar(a.dtype)}
    b = g.operand(a.shape, a.dtype)
    return ([cond, a.name, b], {}) if b else None


@op("where", propose_where, weight=1.0)
def where(ctx, cond, a, b=None, other=None):
    return torch.where(cond, a, other if b is None else b)


def propose_masked_fill(g):
    a = g.pick(dtypes=ALL)
    mask = g.operand(a.shape, "bool", into=True) if a else None
    return ([a.name, mask], {"value": g.scalar(a.dtype)}) if mask else None


@op("masked_fill", propose_masked_fill, weight=0.5)
def masked_fill(ctx, a, mask, value):
    return a.masked_fill(mask, value)


def propose_cast(g):
    a = g.pick(dtypes=ALL)
    if a is None:
        return None
    return [a.name], {"dtype": g.choice([d for d in ALL if d != a.dtype])}


@op("cast", propose_cast, weight=0.6, kind="view")  # .to() of the same dtype would return its input
def cast(ctx, a, dtype):
    from tests.fuzz.spec import DTYPES

    return a.to(DTYPES[dtype])
