"""Chains the exporter decomposed, run as one kernel again, at load (``load_program(..., fuse=False)``: never).

ExecuTorch's exporter lowers ``scaled_dot_product_attention`` to about twenty
kernels: both operands scaled, ``k`` transposed by a copy, batch and head
dimensions flattened by expand copies, two ``bmm``, the mask added, and a
"safe" softmax (a row the mask hides entirely becomes zeros: ``eq``,
``logical_not``, ``any``, ``full_like``, ``where``). RMSNorm arrives as
``pow`` (or ``mul`` of x by itself), ``mean``, ``add`` of epsilon, ``rsqrt``
and two ``mul``. Each chain
found whole is replaced by one call of a kernel in ``kernels/fused.py``
(PyTorch's fused attention, ``torch.rms_norm``), placed where its last step
was; the other steps are folded away (None). The fused step's comment in the
generated code lists the operators it replaced.

A chain is replaced only when nothing outside it can tell: every value it
computes on the way is read by its own steps only (no method output, no
other reader, directly, through a view or through a view the exporter planned
on the same bytes), written by no other step, of static shape; and what the
fused call reads is written by no other step between the chain's first read
of it and the fused call. Methods with jumps are left as they are.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch

from pterun.executor.effects import MethodEffects
from pterun.executor.fold import overlaps, Rewriter
from pterun.executor.steps import KernelStep
from pterun.format import Dynamism, JumpFalseCall, Plan, TensorSpec
from pterun.kernels import Binding, Functional
from pterun.kernels import fused as kernels


@dataclass(frozen=True)
class _Chain:
    name: str  # the fused operator, as generated code and errors name it
    steps: frozenset[int]  # every step of the chain; the last one becomes the fused call
    binding: Binding
    args: tuple[int, ...]
    inputs: tuple[int, ...]  # tensors the fused call reads


class _Graph:
    """Which step made each value a step reads, following views the exporter planned on the same bytes."""

    def __init__(self, plan: Plan, steps: list, objects: list) -> None:
        self.plan, self.steps, self.objects = plan, steps, objects
        self.maker: dict[int, int] = {}
        for n, step in enumerate(steps):
            if isinstance(step, KernelStep):
                self.maker[self.made_value(n)] = n

    def op(self, n: int | None) -> str | None:
        step = self.steps[n] if n is not None else None
        return step.name if isinstance(step, KernelStep) else None

    def arg(self, n: int, pos: int) -> int:
        return self.steps[n].args[pos]

    def made_value(self, n: int) -> int:
        # Every operator matched here is an out-variant: its out argument is last, also when fold.py made it a
        # view bound as the step's result.
        return self.steps[n].args[-1]

    def value(self, vi: int):
        return self.objects[vi]

    def maker_of(self, n: int, pos: int) -> int | None:
        """The step that made argument ``pos`` of step ``n``: directly, or a tensor on the same bytes."""
        vi = self.arg(n, pos)
        if vi in self.maker and self.maker[vi] < n:
            return self.maker[vi]
        spec = self.spec(vi)
        if spec is None or spec.memory_id is None or not _contiguous(spec):
            return None
        for k in range(n - 1, -1, -1):
            step = self.steps[k]
            if not isinstance(step, KernelStep):
                if step is not None:
                    return None  # a delegate or a move: what it writes is not followed here
                continue
            b = step.binding
            for p in (*b.writes, *b.mutates):
                made = self.plan.values[step.args[p]]
                if not isinstance(made, TensorSpec) or made.memory_id is None or not overlaps(made, spec):
                    continue
                same = (step.args[p] == self.made_value(k) and made.dynamism == Dynamism.STATIC
                        and made.memory_offset == spec.memory_offset and made.nbytes == spec.nbytes
                        and made.scalar_type == spec.scalar_type and _contiguous(made))
                return k if same else None
        return None

    def spec(self, vi: int) -> TensorSpec | None:
        value = self.plan.values[vi]
        return value if isinstance(value, TensorSpec) and value.dynamism == Dynamism.STATIC else None


def _contiguous(spec: TensorSpec) -> bool:
    return tuple(spec.dim_order) == tuple(range(len(spec.sizes)))


def _noop_expand(g: _Graph, n: int | None) -> bool:
    if g.op(n) != "aten::expand_copy.out":
        return False
    source = g.spec(g.arg(n, 0))
    return source is not None and list(g.value(g.arg(n, 1))) == list(source.sizes)


def _scalar(g: _Graph, vi: int) -> float | None:
    value = g.value(vi)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _last_dim(g: _Graph, vi: int, dim) -> bool:
    spec = g.spec(vi)
    return spec is not None and dim in (-1, len(spec.sizes) - 1)


def _attention(g: _Graph, n2: int) -> _Chain | None:
    """softmax(q*a @ (k^T*b) [+ mask]) @ v ending at the ``bmm`` at step ``n2``."""
    if g.op(n2) != "aten::bmm.out":
        return None
    pe, ve = g.maker_of(n2, 0), g.maker_of(n2, 1)
    if not (_noop_expand(g, pe) and _noop_expand(g, ve)):
        return None
    chain = [n2, pe, ve]
    p = g.maker_of(pe, 0)
    if g.op(p) == "aten::where.self_out":
        sm, zeros, cond = g.maker_of(p, 2), g.maker_of(p, 1), g.maker_of(p, 0)
        if (g.op(zeros) != "aten::full_like.out" or g.maker_of(zeros, 0) != sm or _scalar(g, g.arg(zeros, 1)) != 0
                or g.op(sm) != "aten::_softmax.out"):
            return None
        safe = _hidden_rows(g, cond, g.maker_of(sm, 0))
        if safe is None:
            return None
        chain += [p, zeros, *safe]
    elif g.op(p) == "aten::_softmax.out":
        sm = p
    else:
        return None
    if not _last_dim(g, g.arg(sm, 0), g.value(g.arg(sm, 1))) or g.value(g.arg(sm, 2)) is not False:
        return None
    chain.append(sm)
    scores, mask = g.maker_of(sm, 0), None
    if g.op(scores) == "aten::add.out":
        if _scalar(g, g.arg(scores, 2)) != 1:
            return None
        chain.append(scores)
        mask, scores = g.arg(scores, 1), g.maker_of(scores, 0)
    if mask is not None and p == sm:
        return None  # a plain softmax of a row the mask hides entirely is NaN; fused attention's is zeros
    if g.op(scores) != "aten::bmm.out":
        return None
    qe, ke = g.maker_of(scores, 0), g.maker_of(scores, 1)
    if not (_noop_expand(g, qe) and _noop_expand(g, ke)):
        return None
    qs, ks = g.maker_of(qe, 0), g.maker_of(ke, 0)
    if g.op(qs) != "aten::mul.Scalar_out" or g.op(ks) != "aten::mul.Scalar_out":
        return None
    kt = g.maker_of(ks, 0)
    if g.op(kt) != "aten::permute_copy.out":
        return None
    q, k, v, out = g.arg(qs, 0), g.arg(kt, 0), g.arg(ve, 0), g.arg(n2, 2)
    specs = [g.spec(i) for i in (q, k, v)]
    if None in specs or g.spec(out) is None or (mask is not None and g.spec(mask) is None):
        return None
    qspec, kspec, vspec = specs
    rank = len(qspec.sizes)
    swap = [*range(rank - 2), rank - 1, rank - 2]
    if (list(g.value(g.arg(kt, 1))) != swap or rank < 3 or not all(len(s.sizes) == rank for s in specs)
            or _scalar(g, g.arg(qs, 1)) is None or _scalar(g, g.arg(ks, 1)) is None):
        return None
    *batch, length, e = qspec.sizes
    *kbatch, source, ke_ = kspec.sizes
    *vbatch, vsource, ev = vspec.sizes
    dtype = qspec.scalar_type
    if (kbatch != batch or vbatch != batch or ke_ != e or vsource != source
            or any(s.scalar_type != dtype for s in (*specs, g.spec(out)))
            or tuple(g.spec(out).sizes) != (math.prod(batch), length, ev)):
        return None
    if mask is not None:
        mspec = g.spec(mask)
        target = (*batch, length, source)
        msizes = tuple(mspec.sizes)
        if (mspec.scalar_type != dtype or len(msizes) > rank
                or any(m not in (1, t) for m, t in zip(msizes[::-1], target[::-1]))):
            return None
    chain += [scores, qe, ke, qs, ks, kt]
    args = (q, k, v, g.arg(qs, 1), g.arg(ks, 1)) + ((mask,) if mask is not None else ()) + (out,)
    last = len(args) - 1
    keywords = ((("mask", last - 1),) if mask is not None else ()) + (("out", last),)
    binding = Binding(kernels.attention_out, (0, 1, 2, 3, 4), keywords, writes=(last,), strided=True,
                      functional=Functional(kernels.attention, outputs=(last,)))
    return _Chain("pterun::attention", frozenset(chain), binding, args,
                  (q, k, v) + ((mask,) if mask is not None else ()))


def _hidden_rows(g: _Graph, cond: int | None, scores: int | None) -> list[int] | None:
    """The steps of logical_not(any(logical_not(eq(scores, -inf)), -1, keepdim)): rows the mask hides entirely."""
    if g.op(cond) != "aten::logical_not.out":
        return None
    found = g.maker_of(cond, 0)
    if g.op(found) != "aten::any.out" or g.value(g.arg(found, 2)) is not True:
        return None
    if not _last_dim(g, g.arg(found, 0), g.value(g.arg(found, 1))):
        return None
    inner = g.maker_of(found, 0)
    if g.op(inner) != "aten::logical_not.out":
        return None
    eq = g.maker_of(inner, 0)
    if g.op(eq) != "aten::eq.Scalar_out" or g.maker_of(eq, 0) != scores or _scalar(g, g.arg(eq, 1)) != -math.inf:
        return None
    return [cond, found, inner, eq]


def _rms_norm(g: _Graph, n: int) -> _Chain | None:
    """weight * (x * rsqrt(mean(x^2, -1, keepdim) + eps)) ending at the ``mul`` at step ``n`` (x^2: pow or x * x)."""
    if g.op(n) != "aten::mul.out":
        return None
    y, weight = _operand(g, n, "aten::mul.out")
    if y is None:
        return None
    r, x = _operand(g, y, "aten::rsqrt.out")
    if r is None:
        return None
    a = g.maker_of(r, 0)
    if g.op(a) != "aten::add.out" or _scalar(g, g.arg(a, 2)) != 1:
        return None
    eps = g.value(g.arg(a, 1))
    m = g.maker_of(a, 0)
    if not isinstance(eps, torch.Tensor) or eps.numel() != 1 or g.op(m) != "aten::mean.out":
        return None
    sq = g.maker_of(m, 0)
    squares = ((g.op(sq) == "aten::pow.Tensor_Scalar_out" and _scalar(g, g.arg(sq, 1)) == 2)
               or (g.op(sq) == "aten::mul.out" and g.arg(sq, 1) == x))
    if not squares or g.arg(sq, 0) != x or g.value(g.arg(m, 2)) is not True or g.value(g.arg(m, 3)) is not None:
        return None
    dims = g.value(g.arg(m, 1))
    xspec, wspec, ospec = g.spec(x), g.spec(weight), g.spec(g.arg(n, 2))
    if None in (xspec, wspec, ospec) or not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return None
    espec = g.spec(g.arg(a, 1))
    if (espec is None or not xspec.sizes or not _last_dim(g, x, dims[0])
            or tuple(wspec.sizes) != tuple(xspec.sizes[-1:]) or ospec.sizes != xspec.sizes
            or len({xspec.scalar_type, wspec.scalar_type, ospec.scalar_type, espec.scalar_type}) != 1):
        return None
    binding = Binding(kernels.rms_norm_out, (0, 1, 2), (("out", 3),), convert=((2, _eps),), writes=(3,),
                      strided=True, functional=Functional(kernels.rms_norm, outputs=(3,)))
    return _Chain("pterun::rms_norm", frozenset((n, y, r, a, m, sq)), binding,
                  (x, weight, g.arg(a, 1), g.arg(n, 2)), (x, weight))


def _operand(g: _Graph, n: int, op: str) -> tuple[int | None, int | None]:
    """Of a product at step ``n``: the step that made one factor with ``op``, and the other factor's value."""
    for pos in (0, 1):
        made = g.maker_of(n, pos)
        if g.op(made) == op:
            return made, g.arg(n, 1 - pos)
    return None, None


def _eps(tensor: torch.Tensor) -> float:
    return float(tensor.item())


_MATCHERS = (_attention, _rms_norm)


def fuse_chains(plan: Plan, steps: list, objects: list, effects: MethodEffects) -> list:
    """``steps`` with every chain found replaced by one fused call; ``effects`` those of the method's steps
    before any were folded."""
    if any(isinstance(s, JumpFalseCall) for s in steps):
        return steps
    g = _Graph(plan, steps, objects)
    current = effects.after(steps)
    rw = Rewriter(plan, steps, objects, set(), current, effects)
    result = list(steps)
    taken: set[int] = set()
    for n in range(len(steps)):
        for match in _MATCHERS:
            chain = match(g, n)
            if chain is None or taken & chain.steps or not _unobserved(plan, rw, current, chain):
                continue
            last = max(chain.steps)
            replaced = Counter(steps[k].name for k in sorted(chain.steps))
            for k in chain.steps:
                result[k] = None
            result[last] = KernelStep(chain.name, chain.binding, chain.args, replaces=tuple(
                name if count == 1 else f"{name} x{count}" for name, count in replaced.items()))
            taken |= chain.steps
            break
    return result


def _unobserved(plan: Plan, rw: Rewriter, effects: MethodEffects, chain: _Chain) -> bool:
    """Whether nothing outside ``chain`` reads what its steps compute on the way, and what the fused call reads
    is not written in between."""
    last = max(chain.steps)
    outputs, inputs = set(plan.outputs), set(plan.inputs)
    for k in chain.steps - {last}:
        step = rw.steps[k]
        made = step.args[-1]
        spec = plan.values[made]
        if not isinstance(spec, TensorSpec) or spec.dynamism != Dynamism.STATIC or made in outputs or made in inputs:
            return False
        if spec.fqn or spec.data_buffer_idx or effects.writers.get(made, [k]) != [k]:
            return False  # a mutable buffer or a constant, or memory other steps write too
        if not set(effects.readers.get(made, ())) <= chain.steps:
            return False
        if (spec.memory_id is not None
                and any(rw.reads_through(a, spec, k) and not set(effects.readers.get(a, ())) <= chain.steps
                        for a in rw.aliases)):
            return False
    for vi in chain.inputs:
        first = min(k for k in chain.steps if vi in rw.steps[k].args)
        memory = effects.memory(vi)
        spec = plan.values[vi]
        for k in range(first + 1, last):
            if k in chain.steps:
                continue
            for m in effects.written[k]:
                written = plan.values[m]
                if m in memory or (spec.memory_id is not None and isinstance(written, TensorSpec)
                                   and written.memory_id is not None and overlaps(spec, written)):
                    return False
    return True
