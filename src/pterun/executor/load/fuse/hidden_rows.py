"""A softmax's rows the mask hides entirely made zeros, where the softmax ran elsewhere, as one call.

The exporter follows a masked softmax with ``where(logical_not(any(logical_not(eq(scores, -inf)), -1,
keepdim)), full_like(probs, 0), probs)``: six kernels a layer. attention.py fuses them with the attention they
belong to; where the scores and the softmax come from a delegate (an 8da4w program's XNNPACK blobs hold the
attention's products and softmax), they stay, and here become ``kernels.fused.ZeroHiddenRows``: three
calls into outs of the steps replaced, the same values.
"""

from __future__ import annotations

import torch

from pterun.enums import scalar_type_name
from pterun.executor.load.fuse.common import Chain, Graph, hidden_rows, scalar, shared
from pterun.kernels import Binding
from pterun.kernels import fused as kernels

ENDS = "aten::where.self_out"  # the operator of the step a chain ends at, which becomes its fused call

NAME = "pterun::zero_hidden_rows"


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
    steps = hidden_rows(g, cond)
    if steps is None:
        return None
    cond, found, inner, eq = steps
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
            pairs = ((hidden, scores), (hidden, probs), (hidden, row), (row, probs), (row, out))
            if any(a == b or shared(g.plan.values[a], g.plan.values[b]) for a, b in pairs):
                continue
            return hidden, row
    return None
