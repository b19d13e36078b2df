"""Reductions, normalizing reductions (softmax), scans and top-k: over one or several dims, kept or not."""

from __future__ import annotations

import torch

from tests.fuzz.ops.registry import op
from tests.fuzz.spec import ALL, FLOATS, INTS, REALS


def _dims(g, v, *, many=True):
    count = g.randint(1, min(2, v.rank)) if many else 1
    dims = sorted(g.rng.sample(range(v.rank), count))
    return [d - v.rank if g.chance(0.3) else d for d in dims]


def reduction(dtypes, *, many=True, keepdim=True, whole=False):
    def propose(g):
        v = g.pick(dtypes=dtypes, min_rank=0 if whole else 1)
        if v is None:
            return None
        if v.rank == 0 or (whole and g.chance(0.15)):
            return [v.name], {"dim": None, "keepdim": False}
        dims = _dims(g, v, many=many)
        return [v.name], {"dim": dims if many else dims[0], "keepdim": keepdim and g.chance(0.4)}

    return propose


@op("sum", reduction(ALL, whole=True), weight=1.0)
def sum_(ctx, x, dim, keepdim):
    return x.sum() if dim is None else x.sum(dim, keepdim=keepdim)


@op("mean", reduction(FLOATS, whole=True), weight=1.0)
def mean(ctx, x, dim, keepdim):
    return x.mean() if dim is None else x.mean(dim, keepdim=keepdim)


@op("amax", reduction(REALS), weight=0.5)
def amax(ctx, x, dim, keepdim):
    return x.amax(dim, keepdim=keepdim)


@op("amin", reduction(REALS), weight=0.3)
def amin(ctx, x, dim, keepdim):
    return x.amin(dim, keepdim=keepdim)


@op("max_dim", reduction(REALS, many=False), weight=0.4)
def max_dim(ctx, x, dim, keepdim):
    return tuple(torch.max(x, dim, keepdim=keepdim))


@op("min_dim", reduction(REALS, many=False), weight=0.2)
def min_dim(ctx, x, dim, keepdim):
    return tuple(torch.min(x, dim, keepdim=keepdim))


@op("argmax", reduction(REALS, many=False), weight=0.4)
def argmax(ctx, x, dim, keepdim):
    return torch.argmax(x, dim, keepdim=keepdim)


@op("argmin", reduction(REALS, many=False), weight=0.2)
def argmin(ctx, x, dim, keepdim):
    return torch.argmin(x, dim, keepdim=keepdim)


@op("prod", reduction(FLOATS + INTS, many=False), weight=0.2)
def prod(ctx, x, dim, keepdim):
    return torch.prod(x, dim, keepdim=keepdim)


def propose_var(g):
    v = g.pick(dtypes=("float32",), min_rank=1)
    if v is None:
        return None
    return [v.name], {"dim": _dims(g, v), "correction": g.choice([0, 1]), "keepdim": g.chance(0.5)}


@op("var", propose_var, weight=0.3)
def var(ctx, x, dim, correction, keepdim):
    return torch.var(x, dim, correction=correction, keepdim=keepdim)


@op("logsumexp", reduction(("float32",)), weight=0.2)
def logsumexp(ctx, x, dim, keepdim):
    return torch.logsumexp(x, dim, keepdim=keepdim)


@op("norm", reduction(("float32",)), weight=0.2)
def norm(ctx, x, dim, keepdim):
    return torch.linalg.vector_norm(x, 2, dim, keepdim=keepdim)


@op("any", reduction(ALL, many=False), weight=0.2)
def any_(ctx, x, dim, keepdim):
    return torch.any(x, dim, keepdim=keepdim)


@op("all", reduction(ALL, many=False), weight=0.2)
def all_(ctx, x, dim, keepdim):
    return torch.all(x, dim, keepdim=keepdim)


def along(dtypes):
    def propose(g):
        v = g.pick(dtypes=dtypes, min_rank=1)
        return ([v.name], {"dim": g.randint(-v.rank, v.rank - 1)}) if v else None

    return propose


@op("softmax", along(FLOATS), weight=0.7)
def softmax(ctx, x, dim):
    return torch.softmax(x, dim)


@op("log_softmax", along(FLOATS), weight=0.3)
def log_softmax(ctx, x, dim):
    return torch.log_softmax(x, dim)


@op("cumsum", along(REALS), weight=0.3)
def cumsum(ctx, x, dim):
    return torch.cumsum(x, dim)


def propose_topk(g):
    v = g.pick(dtypes=REALS, min_rank=1, where=lambda v: any(isinstance(d, int) for d in v.shape))
    if v is None:
        return None
    dim = g.choice([i for i, d in enumerate(v.shape) if isinstance(d, int)])
    return [v.name], {"k": g.randint(1, v.shape[dim]), "dim": dim, "largest": g.chance(0.7)}


@op("topk", propose_topk, weight=0.3)
def topk(ctx, x, k, dim, largest):
    return tuple(torch.topk(x, k, dim, largest=largest))
