"""A softmax's rows the mask hides entirely made zeros, where the softmax ran elsewhere, as one call.

The exporter follows a masked softmax with ``where(logical_not(any(logical_not(eq(scores, -inf)), -1,
keepdim)), full_like(probs, 0), probs)``: six kernels a layer. attention.py fuses them with the attention they
belong to; where the scores and the softmax come from a delegate (an 8da4w program's XNNPACK blobs hold the
attention's products and softmax), they stay, and here become ``kernels.fused.ZeroHiddenRows``: three
calls into outs of the steps replaced, the same values.
"""

from __future__ import annotations

import math

import torch

from pterun.enums import scalar_type_name
from pterun.executor.load.fold import overlaps
from pterun.executor.load.fuse.common import Chain, Graph, last_dim, scalar
from pterun.format import TensorSpec
from pterun.kernels import Binding
from pterun.kernels import fused as kernels

ENDS = "aten::where.self_out"  # the operator of the step a chain ends at, which becomes its fused call

NAME = "pterun::zero_hidden_rows"
_NOT = "aten::logical_not.out"


def match(g: Graph, n: int) -> Chain | None:
    """The steps of ``where(hidden rows, full_like(probs, 0), probs)`` ending at the ``where`` at step ``n``."""
    if not g.runs(n, ENDS):
        return None
    probs = g.arg(n, 2)
    if g.runs(g.maker_of(n, 2), "aten::_softmax.out"):
        return None  # a softmax of the method's own: attention.py's, with the attention it belongs to
    zeros, cond = g.maker_of(n, 1), g.maker_of(n, 0)
    if not g.runs(zeros, "aten::full_like.out") or g.arg(zeros, 0) != probs or scalar(g, g.arg(zeros, 1)) != 0:
        return None
    if not g.runs(cond, _NOT):
        return None
    found = g.maker_of(cond, 0)
    if (not g.runs(found, "aten::any.out") or g.value(g.arg(found, 2)) is not True
            or not last_dim(g, g.arg(found, 0), g.value(g.arg(found, 1)))):
        return None
    inner = g.maker_of(found, 0)
    if not g.runs(inner, _NOT):
        return None
    eq = g.maker_of(inner, 0)
    if not g.runs(eq, "aten::eq.Scalar_out") or scalar(g, g.arg(eq, 1)) != -math.inf:
        return None
    scores, out = g.arg(eq, 0), g.made_value(n)
    sspec, pspec, ospec, zspec = (g.tensor(v) for v in (scores, probs, out, g.made_value(zeros)))
    if sspec is None or pspec is None or ospec is None or zspec is None:
        return None
    if (list(sspec.sizes) != list(pspec.sizes) or list(ospec.sizes) != list(pspec.sizes)
            or ospec.scalar_type != pspec.scalar_type or zspec.scalar_type != pspec.scalar_type):
        return None
    scratch = _scratch(g, scores, probs, out, (g.made_value(eq), g.made_value(inner)),
                       (g.made_value(found), g.made_value(cond)))
    if scratch is None:
        return None
    hidden, rows = scratch
    planned = g.value(probs)
    if not isinstance(planned, torch.Tensor):
        return None
    zero = torch.zeros((), dtype=planned.dtype, device=planned.device)
    binding = Binding(kernels.ZeroHiddenRows(zero), (0, 1), (("hidden", 2), ("rows", 3), ("out", 4)),
                      writes=(2, 3, 4), strided=True, sizes_outs=True)
    return Chain(NAME, frozenset((eq, inner, found, cond, zeros, n)), binding, (scores, probs, hidden, rows, out),
                 (scores, probs))


def _scratch(g: Graph, scores: int, probs: int, out: int, flags: tuple[int, ...],
             rows: tuple[int, ...]) -> tuple[int, int] | None:
    """Which of the chain's boolean values hold the fused call's flags (one per score, as ``eq``'s) and row flags
    (one per row, as ``any``'s): a pair whose bytes the three calls cannot write while another reads them. The
    plan kept each apart from what the step making it read; the fused call reads and writes them in another
    order."""
    for hidden in flags:
        for row in rows:
            specs = (g.tensor(hidden), g.tensor(row))
            if any(s is None or scalar_type_name(s.scalar_type) != "Bool" for s in specs):
                continue
            if any(_shared(g, a, b) for a, b in ((hidden, scores), (hidden, probs), (hidden, row), (row, probs),
                                                 (row, out))):
                continue
            return hidden, row
    return None


def _shared(g: Graph, a: int, b: int) -> bool:
    """Whether two values' planned bytes may overlap (values the plan gives no bytes to: only when the same)."""
    x, y = g.plan.values[a], g.plan.values[b]
    if a == b:
        return True
    return (isinstance(x, TensorSpec) and isinstance(y, TensorSpec) and x.memory_id is not None
            and y.memory_id is not None and overlaps(x, y))
