"""Views and movement: reshape, permute, transpose, slice, select, expand, squeeze/unsqueeze, flatten,
concatenation and stacking, splits (several outputs), repeat, flip, index_select, indexing, padding.

Dynamic dims are never sliced, split, concatenated along or folded into another
dim (that would make a derived dim); ops move them around as they are.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tests.fuzz.ops.registry import Invalid, Param, op
from tests.fuzz.spec import ALL


def static(v) -> list[int]:
    return [i for i, d in enumerate(v.shape) if isinstance(d, int)]


def _factor(g, n: int, parts: int) -> list[int]:
    """``n`` as a product of ``parts`` factors in a random order."""
    out = []
    for _ in range(parts - 1):
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        d = g.choice(divisors)
        out.append(d)
        n //= d
    out.append(n)
    g.rng.shuffle(out)
    return out


def propose_reshape(g):
    v = g.pick(dtypes=ALL, min_rank=1)
    if v is None:
        return None
    symbols = [d for d in v.shape if isinstance(d, str)]
    n = math.prod(d for d in v.shape if isinstance(d, int))
    parts = g.randint(1, 4 - len(symbols)) if len(symbols) < 4 else 0
    shape = _factor(g, n, parts) + symbols if parts else list(symbols)
    g.rng.shuffle(shape)
    if not shape:
        shape = [1]
    if all(isinstance(d, int) for d in shape) and len(shape) > 1 and g.chance(0.3):
        shape[g.randint(0, len(shape) - 1)] = -1
    return [v.name], {"shape": shape}


@op("reshape", propose_reshape, kind="view", weight=1.0)
def reshape(ctx, x, shape):
    return x.reshape(ctx.shape(shape))


def propose_permute(g):
    v = g.pick(dtypes=ALL, min_rank=2)
    if v is None:
        return None
    perm = list(range(v.rank))
    while perm == list(range(v.rank)):
        g.rng.shuffle(perm)
    return [v.name], {"dims": perm}


@op("permute", propose_permute, kind="view", weight=1.0)
def permute(ctx, x, dims):
    return x.permute(dims)


def propose_transpose(g):
    v = g.pick(dtypes=ALL, min_rank=2)
    if v is None:
        return None
    a, b = g.rng.sample(range(v.rank), 2)
    return [v.name], {"dim0": a - v.rank if g.chance(0.3) else a, "dim1": b}


@op("transpose", propose_transpose, kind="view", weight=0.8)
def transpose(ctx, x, dim0, dim1):
    return x.transpose(dim0, dim1)


def propose_unsqueeze(g):
    v = g.pick(dtypes=ALL, max_rank=4)
    return ([v.name], {"dim": g.randint(-v.rank - 1, v.rank)}) if v else None


@op("unsqueeze", propose_unsqueeze, kind="view", weight=0.5)
def unsqueeze(ctx, x, dim):
    return x.unsqueeze(dim)


def propose_squeeze(g):
    v = g.pick(dtypes=ALL, where=lambda v: 1 in v.shape)
    return ([v.name], {"dim": g.choice([i for i, d in enumerate(v.shape) if d == 1])}) if v else None


@op("squeeze", propose_squeeze, kind="view", weight=0.5)
def squeeze(ctx, x, dim):
    return x.squeeze(dim)


def propose_flatten(g):
    v = g.pick(dtypes=ALL, min_rank=2)
    if v is None:
        return None
    start = g.randint(0, v.rank - 2)
    end = g.randint(start + 1, v.rank - 1)
    return [v.name], {"start": start, "end": end}


@op("flatten", propose_flatten, kind="view", weight=0.5)
def flatten(ctx, x, start, end):
    return x.flatten(start, end)


def _sliceable(g, v, at_least=2):
    dims = [i for i in static(v) if v.shape[i] >= at_least]
    return g.choice(dims) if dims else None


def propose_slice(g):
    v = g.pick(dtypes=ALL, min_rank=1, where=lambda v: any(isinstance(d, int) and d >= 2 for d in v.shape))
    if v is None:
        return None
    dim = _sliceable(g, v)
    size = v.shape[dim]
    start = g.randint(0, size - 1)
    end = g.randint(start + 1, size) if g.chance(0.8) else size + 3  # past the end is clamped
    step = g.choice([1, 1, 1, 2, 3])
    if g.chance(0.2):
        start -= size  # negative start
    return [v.name], {"dim": dim - v.rank if g.chance(0.2) else dim, "start": start, "end": end, "step": step}


@op("slice", propose_slice, kind="view", weight=1.0)
def slice_(ctx, x, dim, start, end, step):
    index = [slice(None)] * x.dim()
    index[dim] = slice(start, end, step)
    return x[tuple(index)]


def propose_select(g):
    v = g.pick(dtypes=ALL, min_rank=1, where=lambda v: bool(static(v)))
    if v is None:
        return None
    dim = g.choice(static(v))
    index = g.randint(-v.shape[dim], v.shape[dim] - 1)
    return [v.name], {"dim": dim, "index": index}


@op("select", propose_select, kind="view", weight=0.7)
def select(ctx, x, dim, index):
    return x.select(dim, index)


def propose_narrow(g):
    v = g.pick(dtypes=ALL, min_rank=1, where=lambda v: any(isinstance(d, int) and d >= 2 for d in v.shape))
    if v is None:
        return None
    dim = _sliceable(g, v)
    start = g.randint(0, v.shape[dim] - 1)
    return [v.name], {"dim": dim, "start": start, "length": g.randint(1, v.shape[dim] - start)}


@op("narrow", propose_narrow, kind="view", weight=0.3)
def narrow(ctx, x, dim, start, length):
    return x.narrow(dim, start, length)


def propose_expand(g):
    v = g.pick(dtypes=ALL, max_rank=4, where=lambda v: 1 in v.shape or v.rank < 3)
    if v is None:
        return None
    shape = [g.choice([2, 3, 4]) if d == 1 and g.chance(0.7) else d for d in v.shape]
    if g.chance(0.4) or shape == list(v.shape):
        shape = [g.randint(2, 3)] + shape
    lead = len(shape) - v.rank
    if g.chance(0.3):  # -1 keeps a dim as it is
        shape = [-1 if i >= lead and d == v.shape[i - lead] else d for i, d in enumerate(shape)]
    return [v.name], {"shape": shape}


@op("expand", propose_expand, kind="view", broadcasts=True, weight=0.6)
def expand(ctx, x, shape):
    return x.expand(ctx.shape(shape))


def propose_clone(g):
    v = g.pick(dtypes=ALL)
    return ([v.name], {"contiguous": g.chance(0.5)}) if v else None


@op("clone", propose_clone, weight=0.3)
def clone(ctx, x, contiguous):
    # contiguous() returns its input when already contiguous; clone() always copies.
    return x.contiguous().clone() if contiguous else x.clone(memory_format=torch.preserve_format)


def _same_but(g, v, dim, count):
    """Names of ``count`` values shaped like ``v`` except (maybe) along ``dim``, with v's dtype."""
    names = [v.name]
    for _ in range(count - 1):
        shape = list(v.shape)
        if dim is not None and g.chance(0.5):
            shape[dim] = g.randint(1, 5)
        other = g.operand(tuple(shape), v.dtype, exact=True)
        if other is None:
            return None
        names.append(other)
    return names


def propose_cat(g):
    v = g.pick(dtypes=ALL, min_rank=1, where=lambda v: bool(static(v)))
    if v is None:
        return None
    dim = g.choice(static(v))
    names = _same_but(g, v, dim, g.randint(2, 3))
    return (names, {"dim": dim - v.rank if g.chance(0.3) else dim}) if names else None


@op("cat", propose_cat, weight=1.0)
def cat(ctx, *xs, dim):
    return torch.cat(xs, dim)


def propose_stack(g):
    v = g.pick(dtypes=ALL, max_rank=4)
    if v is None:
        return None
    names = _same_but(g, v, None, g.randint(2, 3))
    return (names, {"dim": g.randint(0, v.rank)}) if names else None


@op("stack", propose_stack, weight=0.5)
def stack(ctx, *xs, dim):
    return torch.stack(xs, dim)


def propose_split(g):
    v = g.pick(dtypes=ALL, min_rank=1, where=lambda v: any(isinstance(d, int) and d >= 2 for d in v.shape))
    if v is None:
        return None
    dim = _sliceable(g, v)
    size = v.shape[dim]
    if g.chance(0.5):
        return [v.name], {"dim": dim, "sizes": g.randint(1, size - 1)}
    first = g.randint(1, size - 1)
    rest = size - first
    sizes = [first, rest] if rest < 2 or g.chance(0.5) else [first, 1, rest - 1]
    return [v.name], {"dim": dim, "sizes": sizes}


@op("split", propose_split, kind="view", weight=0.8)
def split(ctx, x, dim, sizes):
    return tuple(torch.split(x, sizes, dim))


def propose_chunk(g):
    v = g.pick(dtypes=ALL, min_rank=1, where=lambda v: any(isinstance(d, int) and d >= 2 for d in v.shape))
    if v is None:
        return None
    dim = _sliceable(g, v)
    return [v.name], {"dim": dim, "chunks": g.randint(2, min(4, v.shape[dim]))}


@op("chunk", propose_chunk, kind="view", weight=0.4)
def chunk(ctx, x, dim, chunks):
    return tuple(torch.chunk(x, chunks, dim))


def propose_unbind(g):
    v = g.pick(
        dtypes=ALL, min_rank=1, where=lambda v: any(isinstance(d, int) and 2 <= d <= 4 for d in v.shape)
    )
    if v is None:
        return None
    return [v.name], {"dim": g.choice([i for i in static(v) if 2 <= v.shape[i] <= 4])}


@op("unbind", propose_unbind, kind="view", weight=0.3)
def unbind(ctx, x, dim):
    return tuple(torch.unbind(x, dim))


def propose_repeat(g):
    v = g.pick(dtypes=ALL, max_rank=3, where=lambda v: not any(isinstance(d, str) for d in v.shape))
    if v is None:
        return None
    reps = [g.choice([1, 1, 2, 3]) for _ in range(v.rank + g.randint(0, 1))]
    return [v.name], {"repeats": reps or [2]}


@op("repeat", propose_repeat, weight=0.4)
def repeat(ctx, x, repeats):
    return x.repeat(repeats)


def propose_flip(g):
    v = g.pick(dtypes=ALL, min_rank=1)
    if v is None:
        return None
    return [v.name], {"dims": sorted(g.rng.sample(range(v.rank), g.randint(1, v.rank)))}


@op("flip", propose_flip, weight=0.3)
def flip(ctx, x, dims):
    return torch.flip(x, dims)


def _index_params(types, attrs):
    v = types[0]
    size = v.shape[attrs["dim"]]
    if not isinstance(size, int):
        raise Invalid("indexing along a dynamic dim")
    return {"index": Param((attrs["count"],), "int64", "index", size)}


def propose_index_select(g):
    v = g.pick(dtypes=ALL, min_rank=1, where=lambda v: bool(static(v)))
    if v is None:
        return None
    return [v.name], {"dim": g.choice(static(v)), "count": g.randint(1, 5)}


@op("index_select", propose_index_select, params=_index_params, weight=0.4)
def index_select(ctx, x, dim, count):
    return torch.index_select(x, dim, ctx.param("index"))


@op("index", propose_index_select, params=_index_params, weight=0.4)
def index(ctx, x, dim, count):
    # x[:, :, idx]: advanced indexing (aten.index.Tensor).
    return x[(slice(None),) * dim + (ctx.param("index"),)]


def propose_pad(g):
    v = g.pick(dtypes=ALL, min_rank=1, max_rank=4)
    if v is None:
        return None
    pads = [g.randint(0, 2) for _ in range(2 * g.randint(1, min(2, v.rank)))]
    # Negative pads crop, but only where the dim is static and large enough.
    for i in range(len(pads)):
        d = v.shape[v.rank - 1 - i // 2]
        if isinstance(d, int) and d > 2 and g.chance(0.15):
            pads[i] = -1
    return [v.name], {"pads": pads, "value": g.scalar(v.dtype)}


@op("pad", propose_pad, weight=0.4)
def pad(ctx, x, pads, value):
    return F.pad(x, pads, value=value)


def propose_tril(g):
    v = g.pick(dtypes=ALL, min_rank=2)
    return ([v.name], {"diagonal": g.randint(-1, 1), "upper": g.chance(0.5)}) if v else None


@op("tril", propose_tril, weight=0.2)
def tril(ctx, x, diagonal, upper):
    return torch.triu(x, diagonal) if upper else torch.tril(x, diagonal)
