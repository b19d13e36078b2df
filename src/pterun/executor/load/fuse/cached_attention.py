"""A layer's attention over a KV cache as ExecuTorch's Llama export writes it, once its rotary embeddings are
fused (rotary.py), run as one call on the CPU (``kernels.llm.cached_attention.CachedAttention``).

The steps, consecutive: the value rows viewed and written into their cache (``et_view``, ``update_cache``), the
queries and the keys viewed as pairs and rotated (two ``et_view``, two ``pterun::rotary``), the rotated keys
viewed and written into theirs, the rotated queries viewed and attended over both caches (``custom_sdpa``): ten
calls of Python around a few microseconds of arithmetic each decode step. The fused call runs the same kernels
in the same order on the same bytes, so it may write what the plan shares between them (the rotated queries over
the queries, the result over the rotated keys) as the steps do; it only needs the views it no longer makes to be
read by nothing else, which the chain's checks (fuse/__init__.py) see to.
"""

from __future__ import annotations

from pterun.executor.load.fuse import rotary
from pterun.executor.load.fuse.common import ET_VIEW, Chain, Graph
from pterun.kernels import Binding
from pterun.kernels.llm.cached_attention import CachedAttention

ENDS = "llama::custom_sdpa.out"  # the operator of the step a chain ends at, which becomes its fused call

NAME = "pterun::cached_attention"
_SDPA = "llama::custom_sdpa.out"
_UPDATE = "llama::update_cache.out"


def match(g: Graph, n: int) -> Chain | None:
    """The chain ending at the ``custom_sdpa`` at step ``n``."""
    if not g.runs(n, ENDS):
        return None
    q_view = _made_by(g, g.arg(n, 0), n, ET_VIEW)
    q_rotary = _made_by(g, g.arg(q_view, 0), n, rotary.NAME) if q_view is not None else None
    queries = _made_by(g, g.arg(q_rotary, 0), n, ET_VIEW) if q_rotary is not None else None
    k_update, v_update = _update_of(g, n, g.arg(n, 1)), _update_of(g, n, g.arg(n, 2))
    k_view = _made_by(g, g.arg(k_update, 0), n, ET_VIEW) if k_update is not None else None
    k_rotary = _made_by(g, g.arg(k_view, 0), n, rotary.NAME) if k_view is not None else None
    keys = _made_by(g, g.arg(k_rotary, 0), n, ET_VIEW) if k_rotary is not None else None
    values = _made_by(g, g.arg(v_update, 0), n, ET_VIEW) if v_update is not None else None
    if (queries is None or keys is None or values is None or q_rotary is None or k_rotary is None
            or k_update is None or v_update is None or q_view is None or k_view is None):
        return None
    if g.arg(q_rotary, 1) != g.arg(k_rotary, 1) or g.arg(q_rotary, 2) != g.arg(k_rotary, 2):
        return None  # one pair of tables
    steps = frozenset((n, q_view, q_rotary, queries, k_update, k_view, k_rotary, keys, v_update, values))
    # Consecutive, so that running them all at the last one changes nothing any other step sees.
    if len(steps) != 10 or any(k not in steps and g.steps[k] is not None for k in range(min(steps), n)):
        return None
    a = g.arg
    args = (a(values, 0), a(queries, 0), a(keys, 0), a(q_rotary, 1), a(q_rotary, 2), a(n, 1), a(n, 2),
            a(v_update, 2), a(k_update, 2), a(n, 3), a(values, 1), a(queries, 1), a(keys, 1), a(q_view, 1),
            a(k_view, 1), a(n, 4), a(n, 5), a(n, 6), a(n, 7),
            a(v_update, 3), a(k_update, 3), a(q_rotary, 3), a(k_rotary, 3), a(n, 8))
    binding = Binding(CachedAttention(), tuple(range(19)),
                      (("v_out", 19), ("k_out", 20), ("q_rot", 21), ("k_rot", 22), ("out", 23)),
                      writes=(21, 22, 23), mutates=(5, 6, 19, 20), sizes_outs=True)
    return Chain(NAME, steps, binding, args, inputs=args[:5])


def _made_by(g: Graph, vi: int, before: int, op: str) -> int | None:
    """The step before ``before`` whose result (its last argument) is ``vi``, where it calls ``op``."""
    made = g.maker.get(vi)
    return made if made is not None and made < before and g.runs(made, op) else None


def _update_of(g: Graph, n: int, cache: int) -> int | None:
    """The last ``update_cache`` before step ``n`` that writes ``cache``."""
    for k in range(n - 1, -1, -1):
        if g.runs(k, _UPDATE) and g.arg(k, 1) == cache:
            return k
    return None
