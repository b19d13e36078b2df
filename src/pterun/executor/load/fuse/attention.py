"""Attention as the exporter decomposes it, run as PyTorch's fused ``scaled_dot_product_attention``.

Where keys and values are a grouped cache repeated for the queries' heads (transformers' ``repeat_kv``:
unsqueeze, expand, clone, a view; then a cast where the cache is kept in half precision and attention runs in
float32), ``match_grouped`` makes those steps part of the chain: ``grouped_attention`` reads the cache itself.
That holds only where the repeated tensor's bytes stay untouched until the attention reads them (a cache, a
mutable buffer: find_chains checks); elsewhere the exporter's plan may reuse them once the repeat has read
them, and ``match`` fuses the chain from the repeated tensors on.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from pterun.executor.load.fuse.common import Chain, Graph, contiguous, hidden_rows, last_dim, plain_cast, scalar
from pterun.format import Dynamism, ListValue
from pterun.kernels import Binding, Functional
from pterun.kernels import fused as kernels

ENDS = "aten::bmm.out"  # the operator of the step a chain ends at, which becomes its fused call


def _noop_expand(g: Graph, n: int) -> bool:
    """An ``expand_copy`` to its source's own sizes. Of a dynamic source, a size computed at run time stands for
    the source's size there: the exporter broadcasts from a dimension only where it is a static 1, so a dynamic
    dimension is only ever expanded to itself."""
    if not g.runs(n, "aten::expand_copy.out"):
        return False
    source, sizes = g.tensor(g.arg(n, 0)), g.value(g.arg(n, 1))
    if source is None or len(sizes) != len(source.sizes):
        return False
    if source.dynamism == Dynamism.STATIC:
        return list(sizes) == list(source.sizes)
    listed = g.plan.values[g.arg(n, 1)]
    if not isinstance(listed, ListValue):
        return False
    return all(g.is_dynamic_int(item) or size == bound
               for item, size, bound in zip(listed.items, sizes, source.sizes))


def match(g: Graph, n2: int) -> Chain | None:
    """softmax(q*a @ (k^T*b) [+ mask]) @ v ending at the ``bmm`` at step ``n2``."""
    return _match(g, n2, grouped=False)


def match_grouped(g: Graph, n2: int) -> Chain | None:
    """``match``'s chain with the repeat of grouped keys and values for the queries' heads, where both are."""
    return _match(g, n2, grouped=True)


def _match(g: Graph, n2: int, grouped: bool) -> Chain | None:
    if not g.runs(n2, ENDS):
        return None
    (pe, pviews), (ve, vviews) = g.maker_through_views(n2, 0), g.maker_through_views(n2, 1)
    if pe is None or ve is None or not (_noop_expand(g, pe) and _noop_expand(g, ve)):
        return None
    chain = [n2, pe, ve, *pviews, *vviews]
    p = g.maker_of(pe, 0)
    if g.runs(p, "aten::where.self_out"):
        sm, zeros, cond = g.maker_of(p, 2), g.maker_of(p, 1), g.maker_of(p, 0)
        if (not g.runs(zeros, "aten::full_like.out") or g.maker_of(zeros, 0) != sm or scalar(g, g.arg(zeros, 1)) != 0
                or not g.runs(sm, "aten::_softmax.out")):
            return None
        safe = hidden_rows(g, cond)
        if safe is None or g.maker_of(safe[-1], 0) != g.maker_of(sm, 0):
            return None
        chain += [p, zeros, *safe]
    elif g.runs(p, "aten::_softmax.out"):
        sm = p
    else:
        return None
    if not last_dim(g, g.arg(sm, 0), g.value(g.arg(sm, 1))) or g.value(g.arg(sm, 2)) is not False:
        return None
    chain.append(sm)
    scores, mask = g.maker_of(sm, 0), None
    if g.runs(scores, "aten::add.out"):
        if scalar(g, g.arg(scores, 2)) != 1:
            return None
        chain.append(scores)
        mask, (scores, views) = g.arg(scores, 1), g.maker_through_views(scores, 0)
        chain += views
    if mask is not None and p == sm:
        return None  # a plain softmax of a row the mask hides entirely is NaN; fused attention's is zeros
    if not g.runs(scores, "aten::bmm.out"):
        return None
    (qe, qviews), (ke, kviews) = g.maker_through_views(scores, 0), g.maker_through_views(scores, 1)
    chain += [*qviews, *kviews]
    if qe is None or ke is None or not (_noop_expand(g, qe) and _noop_expand(g, ke)):
        return None
    qs, ks = g.maker_of(qe, 0), g.maker_of(ke, 0)
    if not g.runs(qs, "aten::mul.Scalar_out") or not g.runs(ks, "aten::mul.Scalar_out"):
        return None
    kt = g.maker_of(ks, 0)
    if not g.runs(kt, "aten::permute_copy.out"):
        return None
    q, k, v, out = g.arg(qs, 0), g.arg(kt, 0), g.arg(ve, 0), g.arg(n2, 2)
    # Sizes of dynamic tensors are their bounds: the checks below hold for every run's sizes as they hold for
    # the bounds, the exporter having given related dimensions one size.
    qspec, kspec, vspec, ospec = (g.tensor(i) for i in (q, k, v, out))
    mspec = g.tensor(mask) if mask is not None else None
    if qspec is None or kspec is None or vspec is None or ospec is None or (mask is not None and mspec is None):
        return None
    specs = (qspec, kspec, vspec)
    rank = len(qspec.sizes)
    swap = [*range(rank - 2), rank - 1, rank - 2]
    if (list(g.value(g.arg(kt, 1))) != swap or rank < 3 or not all(len(s.sizes) == rank for s in specs)
            or scalar(g, g.arg(qs, 1)) is None or scalar(g, g.arg(ks, 1)) is None):
        return None
    *batch, length, e = qspec.sizes
    *kbatch, source, ke_ = kspec.sizes
    *vbatch, vsource, ev = vspec.sizes
    dtype = qspec.scalar_type
    if (kbatch != batch or vbatch != batch or ke_ != e or vsource != source
            or any(s.scalar_type != dtype for s in (*specs, ospec))
            or tuple(ospec.sizes) != (math.prod(batch), length, ev)):
        return None
    if mspec is not None:
        target = (*batch, length, source)
        msizes = tuple(mspec.sizes)
        if (mspec.scalar_type != dtype or len(msizes) > rank
                or any(m not in (1, t) for m, t in zip(msizes[::-1], target[::-1]))):
            return None
    chain += [scores, qe, ke, qs, ks, kt]
    name, kernel, functional = "pterun::attention", kernels.attention_out, kernels.attention
    if grouped:
        kr, vr = _repeated(g, kt), _repeated(g, ve)
        if kr is None or vr is None or kr.groups != vr.groups or not kr.steps.isdisjoint(vr.steps):
            return None
        name, kernel, functional = ("pterun::grouped_attention", kernels.grouped_attention_out,
                                    kernels.grouped_attention_traced)
        k, v = kr.source, vr.source
        chain += [*kr.steps, *vr.steps]
    args = (q, k, v, g.arg(qs, 1), g.arg(ks, 1)) + ((mask,) if mask is not None else ()) + (out,)
    last = len(args) - 1
    keywords = ((("mask", last - 1),) if mask is not None else ()) + (("out", last),)
    binding = Binding(kernel, (0, 1, 2, 3, 4), keywords, writes=(last,), strided=True,
                      functional=Functional(functional, outputs=(last,)), sizes_outs=True)
    return Chain(name, frozenset(chain), binding, args, (q, k, v) + ((mask,) if mask is not None else ()))


class _Repeat(NamedTuple):
    source: int  # the grouped tensor [..., heads, length, e]
    groups: int  # query heads per head of the source
    steps: frozenset[int]


_CLONE, _CAST = "dim_order_ops::_clone_dim_order.out", "dim_order_ops::_to_dim_order_copy.out"


def _repeated(g: Graph, n: int) -> _Repeat | None:
    """The tensor step ``n`` reads (argument 0) as the exporter repeats a grouped one for the queries' heads:
    ``x[..., :, None].expand(..., h, groups, s, e)`` cloned and viewed as ``[..., h * groups, s, e]``, then
    perhaps cast (contiguous to contiguous, only the dtype changes)."""
    steps: list[int] = []
    made, views = g.maker_through_views(n, 0)
    steps += views
    if g.runs(made, _CAST) and plain_cast(g, made):
        steps.append(made)
        made, views = g.maker_through_views(made, 0)
        steps += views
    if not g.runs(made, _CLONE) or g.value(g.arg(made, 1)) is not False:
        return None
    clone = made
    expand = g.maker_of(clone, 0)
    if not g.runs(expand, "aten::expand_copy.out"):
        return None
    unsqueeze = g.maker_of(expand, 0)
    if not g.runs(unsqueeze, "aten::unsqueeze_copy.out"):
        return None
    source = g.arg(unsqueeze, 0)
    src, cloned, read = g.tensor(source), g.tensor(g.made_value(clone)), g.tensor(g.arg(n, 0))
    if src is None or cloned is None or read is None or len(src.sizes) < 3 or not contiguous(cloned):
        return None
    *batch, heads, length, e = src.sizes
    rank = len(src.sizes)
    if g.value(g.arg(unsqueeze, 1)) not in (rank - 2, -3):
        return None
    sizes = list(g.value(g.arg(expand, 1)))
    if len(sizes) != rank + 1 or not isinstance(sizes[rank - 2], int) or sizes[rank - 2] < 1:
        return None
    groups = sizes[rank - 2]
    listed = g.plan.values[g.arg(expand, 1)]
    kept = [*batch, heads, length, e]
    # A size computed at run time stands for the source's own there, as in a no-op expand (see _noop_expand).
    items = list(listed.items) if isinstance(listed, ListValue) else [None] * (rank + 1)
    del sizes[rank - 2], items[rank - 2]
    if any(size != bound and (item is None or not g.is_dynamic_int(item))
           for size, bound, item in zip(sizes, kept, items)):
        return None
    if (list(cloned.sizes) != [*batch, heads, groups, length, e]
            or list(read.sizes) != [*batch, heads * groups, length, e]):
        return None
    return _Repeat(source, groups, frozenset([*steps, clone, expand, unsqueeze]))
