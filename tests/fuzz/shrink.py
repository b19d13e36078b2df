"""Shrinks a failing spec while the failure stays the same (``Outcome.key``).

Candidates, largest cuts first: keep one output, drop an output, make a value a
new graph input (cutting off everything above it), drop an in-place write, route
a node's input past it, drop dynamic dims, buffers' stored values and calls, and
halve input dims. After each step dead nodes and unused inputs go. A candidate
the checker refuses is skipped without running it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator

from tests.fuzz.check import check
from tests.fuzz.ops import OPS, Invalid
from tests.fuzz.spec import Spec, TensorDecl


def cost(spec: Spec) -> float:
    numel = sum(math.prod(d if isinstance(d, int) else 4 for d in t.shape) for t in spec.inputs)
    return (
        10 * len(spec.nodes)
        + 2 * len(spec.inputs)
        + len(spec.outputs)
        + 3 * len(spec.symbols)
        + 3 * len(spec.buffers)
        + sum(b.init == "values" for b in spec.buffers)
        + spec.calls
        + numel / 64
    )


def tidy(spec: Spec) -> Spec:
    """Drops what no output depends on: dead nodes, unused inputs and buffers, dynamic dims no input has."""
    spec = spec.copy()
    state = check(spec, retype=True)
    root = {name: v.root for name, v in state.values.items()}
    needed = set(spec.outputs)
    needed_roots = {root[n] for n in spec.outputs}
    buffers = {b.name for b in spec.buffers}
    live = []
    for node in reversed(spec.nodes):
        if OPS[node.op].kind == "inplace":
            keep = root[node.args[0]] in needed_roots or root[node.args[0]] in buffers
        else:
            keep = any(o.name in needed for o in node.outs)
        if keep:
            live.append(node)
            needed.update(node.args)
            needed_roots.update(root[a] for a in node.args)
    spec.nodes = live[::-1]
    spec.inputs = [t for t in spec.inputs if t.name in needed]
    spec.buffers = [b for b in spec.buffers if b.name in needed]
    bound = {d for t in spec.inputs for d in t.shape if isinstance(d, str)}
    for s in [s for s in spec.symbols if s.name not in bound]:
        spec = _concretize(spec, s.name)
    check(spec, retype=True)
    return spec


def _replace_strings(obj, name: str, value):
    if isinstance(obj, str):
        return value if obj == name else obj
    if isinstance(obj, list):
        return [_replace_strings(x, name, value) for x in obj]
    if isinstance(obj, dict):
        return {k: _replace_strings(v, name, value) for k, v in obj.items()}
    return obj


def _concretize(spec: Spec, symbol: str) -> Spec:
    spec = spec.copy()
    example = spec.symbol(symbol).example
    spec.symbols = [s for s in spec.symbols if s.name != symbol]
    for t in spec.inputs:
        t.shape = _replace_strings(t.shape, symbol, example)
    for n in spec.nodes:
        n.attrs = _replace_strings(n.attrs, symbol, example)
    return spec


def _rename_uses(spec: Spec, old: str, new: str, after: int) -> None:
    for n in spec.nodes[after + 1 :]:
        n.args = [new if a == old else a for a in n.args]
    spec.outputs = [new if o == old else o for o in spec.outputs]


def _fresh_input(spec: Spec) -> str:
    used = {t.name for t in spec.inputs}
    return next(f"x{i}" for i in range(len(used) + 1) if f"x{i}" not in used)


def candidates(spec: Spec) -> Iterator[Spec]:
    if len(spec.outputs) > 1:
        for o in spec.outputs:
            c = spec.copy()
            c.outputs = [o]
            yield c
        for i in range(len(spec.outputs)):
            c = spec.copy()
            del c.outputs[i]
            yield c
    # Cut: a node's outputs become graph inputs, from the first node on (largest cuts first).
    for i, node in enumerate(spec.nodes):
        if not node.outs:
            continue
        c = spec.copy()
        del c.nodes[i]
        for out in node.outs:
            name = _fresh_input(c)
            c.inputs.append(TensorDecl(name, list(out.shape), out.dtype))
            _rename_uses(c, out.name, name, i - 1)
        yield c
    for i, node in enumerate(spec.nodes):
        if not node.outs:  # an in-place write
            c = spec.copy()
            del c.nodes[i]
            yield c
            continue
        # Bypass: an argument of the output's type takes its place.
        for arg in dict.fromkeys(node.args):
            if len(node.outs) == 1:
                c = spec.copy()
                del c.nodes[i]
                _rename_uses(c, node.outs[0].name, arg, i - 1)
                yield c
    for s in spec.symbols:
        yield _concretize(spec, s.name)
    for b in spec.buffers:
        if b.init == "values":
            c = spec.copy()
            next(x for x in c.buffers if x.name == b.name).init = "zeros"
            yield c
    for calls in range(1, spec.calls):
        c = spec.copy()
        c.calls = calls
        yield c
    sizes = sorted({d for t in spec.inputs for d in t.shape if isinstance(d, int) and d > 1}, reverse=True)
    for size in sizes:
        for new in dict.fromkeys((size // 2, 1)):
            c = spec.copy()
            for t in c.inputs:
                t.shape = [new if d == size else d for d in t.shape]
            yield c
    for t_index, t in enumerate(spec.inputs):
        for d_index, d in enumerate(t.shape):
            if isinstance(d, int) and d > 1:
                c = spec.copy()
                c.inputs[t_index].shape[d_index] = d // 2
                yield c
    for i, node in enumerate(spec.nodes):
        for k, v in node.attrs.items():
            if v is True:
                c = spec.copy()
                c.nodes[i].attrs[k] = False
                yield c


def shrink(
    spec: Spec,
    key: str,
    evaluate: Callable[[Spec], str],
    *,
    seconds: float = 600,
    log: Callable[[str], None] = lambda _: None,
) -> Spec:
    """The smallest spec found within ``seconds`` that ``evaluate`` (spec -> Outcome.key) maps to ``key``."""
    deadline = time.monotonic() + seconds
    seen: dict[str, str] = {}

    def same(c: Spec) -> bool:
        text = c.dumps()
        if text not in seen:
            seen[text] = evaluate(c)
        return seen[text] == key

    best = spec
    try:
        tidied = tidy(spec)
        if cost(tidied) < cost(best) and same(tidied):
            best = tidied
    except Invalid:
        pass
    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for candidate in candidates(best):
            if time.monotonic() >= deadline:
                break
            try:
                candidate = tidy(candidate)
            except Invalid:
                continue
            if cost(candidate) >= cost(best) or candidate.dumps() in seen:
                continue
            if same(candidate):
                best = candidate
                log(f"shrunk to {len(best.nodes)} nodes, cost {cost(best):.1f}")
                progress = True
                break
    return best


def dumps(spec: Spec) -> str:
    return json.dumps(spec.to_json(), indent=1)
