"""In-place updates of intermediate values and of mutable buffers (or views of either): arithmetic, clamp,
fill, copy (with a cast), slice and index assignment, masked fill.

The first argument is written; the checker makes sure it is not (a view of) a
graph input or an expanded tensor, and that no source views it.
"""

from __future__ import annotations

from tests.fuzz.ops.registry import Invalid, Param, op
from tests.fuzz.spec import ALL, FLOATS, INTS, REALS


def target(g, dtypes=ALL, **kwargs):
    return g.pick(dtypes=dtypes, writable=True, **kwargs)


def propose_arith(dtypes):
    def propose(g):
        t = target(g, dtypes)
        if t is None:
            return None
        if g.chance(0.3):
            return [t.name], {"scalar": g.scalar(t.dtype)}
        src = g.operand(t.shape, t.dtype, into=True, avoid=t.root)
        return ([t.name, src], {}) if src else None

    return propose


def _arith(method):
    def run(ctx, t, src=None, scalar=None):
        getattr(t, method)(scalar if src is None else src)

    return run


for _name, _method, _dtypes in (("iadd", "add_", REALS), ("isub", "sub_", REALS), ("imul", "mul_", REALS)):
    op(_name, propose_arith(_dtypes), kind="inplace", weight=0.6)(_arith(_method))


def propose_iclamp(g):
    t = target(g, FLOATS + INTS)
    return (
        ([t.name], {"min": g.scalar(t.dtype, low=-1, high=0), "max": g.scalar(t.dtype, low=0, high=1)})
        if t
        else None
    )


@op("iclamp", propose_iclamp, kind="inplace", weight=0.3)
def iclamp(ctx, t, min, max):
    t.clamp_(min, max)


def propose_irelu(g):
    t = target(g, FLOATS)
    return ([t.name], {}) if t else None


@op("irelu", propose_irelu, kind="inplace", weight=0.2)
def irelu(ctx, t):
    t.relu_()


def propose_fill(g):
    t = target(g)
    return ([t.name], {"value": g.scalar(t.dtype)}) if t else None


@op("fill", propose_fill, kind="inplace", weight=0.2)
def fill(ctx, t, value):
    t.fill_(value)


def propose_copy(g):
    t = target(g)
    if t is None:
        return None
    dtype = t.dtype if g.chance(0.8) else g.choice(ALL)
    src = g.operand(t.shape, dtype, into=True, avoid=t.root)
    return ([t.name, src], {}) if src else None


@op("copy", propose_copy, kind="inplace", weight=0.5)
def copy(ctx, t, src):
    t.copy_(src)


def _region(shape, dim, start, end, step):
    shape = list(shape)
    if step is None:
        del shape[dim]
    else:
        shape[dim] = len(range(*slice(start, end, step).indices(shape[dim])))
    return tuple(shape)


def propose_setitem(g):
    t = target(g, min_rank=1, where=lambda v: any(isinstance(d, int) and d >= 2 for d in v.shape))
    if t is None:
        return None
    dim = g.choice([i for i, d in enumerate(t.shape) if isinstance(d, int) and d >= 2])
    size = t.shape[dim]
    if g.chance(0.3):
        start, end, step = g.randint(0, size - 1), None, None  # t[..., i] = src
    else:
        start = g.randint(0, size - 1)
        end, step = g.randint(start + 1, size), g.choice([1, 1, 2])
    attrs = {"dim": dim, "start": start, "end": end, "step": step}
    if g.chance(0.3):
        return [t.name], {**attrs, "value": g.scalar(t.dtype)}
    src = g.operand(_region(t.shape, dim, start, end, step), t.dtype, into=True, avoid=t.root)
    return ([t.name, src], {**attrs, "value": None}) if src else None


@op("setitem", propose_setitem, kind="inplace", weight=0.8)
def setitem(ctx, t, src=None, *, dim, start, end, step, value):
    index = [slice(None)] * dim + [start if step is None else slice(start, end, step)]
    t[tuple(index)] = value if src is None else src


def propose_index_put(g):
    t = target(g, min_rank=1, where=lambda v: isinstance(v.shape[0], int) and v.shape[0] >= 2)
    if t is None:
        return None
    count = g.randint(1, t.shape[0])
    src = g.operand((count,) + tuple(t.shape[1:]), t.dtype, into=True, avoid=t.root)
    return ([t.name, src], {"count": count}) if src else None


def index_put_params(types, attrs):
    rows = types[0].shape[0]
    if not isinstance(rows, int) or attrs["count"] > rows:
        raise Invalid("index_put rows")
    # Distinct rows: with repeated indices which write wins is unspecified.
    return {"rows": Param((attrs["count"],), "int64", "permutation", rows)}


@op("index_put", propose_index_put, params=index_put_params, kind="inplace", weight=0.4)
def index_put(ctx, t, src, count):
    t.index_put_((ctx.param("rows"),), src)


def propose_imasked_fill(g):
    t = target(g)
    mask = g.operand(t.shape, "bool", into=True) if t else None
    return ([t.name, mask], {"value": g.scalar(t.dtype)}) if mask else None


@op("imasked_fill", propose_imasked_fill, kind="inplace", weight=0.3)
def imasked_fill(ctx, t, mask, value):
    t.masked_fill_(mask, value)


def propose_buffer_step(g):
    """The update a stateful model makes: ``buffer = buffer * decay + x`` (an EMA) or a running count."""
    t = g.pick(dtypes=FLOATS, writable=True, where=lambda v: v.kind == "buffer")
    if t is None:
        return None
    src = g.operand(t.shape, t.dtype, into=True, avoid=t.root)
    return ([t.name, src], {"decay": g.choice([0.5, 0.75])}) if src else None


@op("buffer_step", propose_buffer_step, kind="inplace", weight=0.5)
def buffer_step(ctx, t, src, decay):
    t.mul_(decay).add_(src)
