"""Chains the exporter decomposed, run as one kernel again, at load (``load_program(..., fuse=False)``: never).

One module per chain finds it, ending at a step (common.py: which step made
each value a step reads): attention.py (about twenty kernels, run as
PyTorch's fused attention; with a grouped cache's repeat for the query heads
where the cache is read in place), rms_norm.py (six, run as ``torch.rms_norm``, or in
float32 on the CPU as its own steps into buffers kept from call to call),
rotary.py (a rotary embedding's thirteen, as one call of the same arithmetic),
rotate_half.py (transformers' form of it, seven steps, the same way),
swiglu.py (a SwiGLU MLP's two products and SiLU-product, only where the
kernel registry holds a kernel for the method's device), cached_attention.py
(on the CPU, a layer's cache writes, rotary embeddings and attention over the
cache, ten calls, once the rotary chains are fused), add_rms_norm.py (on the
CPU, a residual add and the fused RMSNorm of its sum), silu_mul.py (on the
CPU, a SwiGLU's SiLU-product where its products run elsewhere), hidden_rows.py
(the six steps that zero a softmax's rows the mask hides entirely, where the
softmax ran elsewhere, as three calls), padded_convolution.py (on CUDA, a zero pad, the same on both sides,
and the convolution it feeds, as the convolution with more padding). Each chain found
whole is replaced by one call, placed where its last step was; the other
steps are folded away (None). The fused step's comment in the generated code
lists the operators it replaced. A fused call without a functional form is
left out of the functional form for ``torch.compile``, which keeps the steps.

A chain is replaced only when nothing outside it can tell: every value it
computes on the way (but those the fused call writes too, where and as the
steps did: ``Chain.kept``) is read by its own steps only (no method output, no
other reader, directly, through a view or through a view the exporter planned
on the same bytes), written and bound by no other step (its shape may be
dynamic: the patterns check the dimensions they rely on); and
what the fused call reads is written by no other step between the chain's
first read of it and the fused call. Methods with jumps are left as they are.

Chains are found in rounds, each over the steps with the chains found before
fused: two chains interleaved (a rotary embedding of the queries and one of the
keys) may each write, on the way, bytes the exporter's plan lets them share
with the other's inputs once those are read, so the second is safe to fuse only
once the first's steps are gone.
"""

from __future__ import annotations

from collections import Counter

from pterun.core.device import DeviceType
from pterun.executor.load.effects import MethodEffects
from pterun.executor.load.fold import PlannedViews, Rewriter
from pterun.executor.load.fuse import (
    add_rms_norm,
    attention,
    cached_attention,
    hidden_rows,
    padded_convolution,
    rms_norm,
    rotary,
    rotate_half,
    silu_mul,
    swiglu,
)
from pterun.executor.load.fuse.common import Chain, Graph, shared
from pterun.executor.load.steps import KernelStep
from pterun.format import JumpFalseCall, Plan, TensorSpec
from pterun.kernels import KernelRegistry


def patterns(kernels: KernelRegistry, device_type: DeviceType) -> dict[str, tuple]:
    """The chain patterns for a method run on ``device_type``, by the operator of the step a chain ends at (each
    module's ``ENDS``): each takes the graph and a step, and gives the chain ending there or None. A step is only
    shown the patterns that can end at it, in this order."""
    found = swiglu.matcher(kernels, device_type)
    # The grouped attention first: where find_chains refuses it, the same chain from the repeated heads on.
    chosen = [attention.match_grouped, attention.match, rms_norm.match, rotary.match, rotate_half.match,
              hidden_rows.match]
    ends = [attention.ENDS, attention.ENDS, rms_norm.ENDS, rotary.ENDS, rotate_half.ENDS, hidden_rows.ENDS]
    if found is not None:
        chosen.append(found)
        ends.append(swiglu.ENDS)
    if device_type == DeviceType.CUDA:
        chosen.append(padded_convolution.match)
        ends.append(padded_convolution.ENDS)
    if device_type == DeviceType.CPU:
        chosen += [cached_attention.match, add_rms_norm.match, silu_mul.match]
        ends += [cached_attention.ENDS, add_rms_norm.ENDS, silu_mul.ENDS]
    by_end: dict[str, tuple] = {}
    for op, match in zip(ends, chosen):
        by_end[op] = (*by_end.get(op, ()), match)
    return by_end


def find_chains(plan: Plan, steps: list, objects: list, effects: MethodEffects, views: PlannedViews,
                matchers: dict[str, tuple]) -> tuple[list[Chain], MethodEffects]:
    """Every chain of ``steps`` that can be replaced by one fused call, and the effects of the steps with them all
    fused. ``effects`` are those of ``steps``, ``views`` the method's planned views.

    Found in rounds (see the module's docstring)."""
    if any(isinstance(s, JumpFalseCall) for s in steps):
        return [], effects
    chains: list[Chain] = []
    while found := _round(plan, effects, objects, views, matchers):
        chains += found
        effects = effects.after(fused(steps, chains))
    return chains, effects


def _round(plan: Plan, current: MethodEffects, objects: list, views: PlannedViews,
           matchers: dict[str, tuple]) -> list[Chain]:
    steps = list(current.steps)
    g = Graph(plan, steps, objects)
    rw = Rewriter(plan, steps, objects, set(), current, views)
    binders: dict[int, set[int]] = {}
    for n, e in enumerate(current.effects):
        for vi in e.binds:
            binders.setdefault(vi, set()).add(n)
    chains: list[Chain] = []
    taken: set[int] = set()
    for n, step in enumerate(steps):
        if not isinstance(step, KernelStep):
            continue  # every chain ends at a kernel's step, which becomes its fused call
        for match in matchers.get(step.name, ()):
            chain = match(g, n)
            if chain is None or taken & chain.steps or not _unobserved(plan, rw, current, binders, chain):
                continue
            chains.append(chain)
            taken |= chain.steps
            break
    return chains


def fused(steps: list, chains: list[Chain]) -> list:
    """``steps`` with each chain replaced by its fused call at the chain's last step (the others None)."""
    result = list(steps)
    for chain in chains:
        last = max(chain.steps)
        # A chain found in a later round names the fused calls of earlier rounds it takes in.
        replaced = Counter(result[k].name for k in sorted(chain.steps))
        for k in chain.steps:
            result[k] = None
        result[last] = KernelStep(chain.name, chain.binding, chain.args, replaces=tuple(
            name if count == 1 else f"{name} x{count}" for name, count in replaced.items()))
    return result


def _unobserved(plan: Plan, rw: Rewriter, effects: MethodEffects, binders: dict[int, set[int]], chain: Chain) -> bool:
    """Whether nothing outside ``chain`` reads what its steps compute on the way, and what the fused call reads
    is not written in between (nor, for a kernel that reads it while writing, shares bytes with its out)."""
    last = max(chain.steps)
    outputs, inputs = set(plan.outputs), set(plan.inputs)
    for k in chain.steps - {last}:
        step = rw.steps[k]
        made = step.args[-1]
        if made in chain.kept:
            continue
        spec = plan.values[made]
        if not isinstance(spec, TensorSpec) or made in outputs or made in inputs:
            return False
        # A mutable buffer or a constant, or memory other steps write too (a step that declares no writes, as a
        # cast, is taken to write everything it is passed) or bind.
        if (spec.fqn or spec.data_buffer_idx or not set(effects.writers.get(made, ())) <= chain.steps
                or not binders.get(made, set()) <= chain.steps):
            return False
        if not set(effects.readers.get(made, ())) <= chain.steps:
            return False
        if any(not set(effects.readers.get(a, ())) <= chain.steps for a in rw.reading_after(spec, k)):
            return False
    for vi in chain.inputs:
        first = min(k for k in chain.steps if vi in rw.steps[k].args)
        memory = effects.memory(vi)
        spec = plan.values[vi]
        for k in range(first + 1, last):
            if k in chain.steps:
                continue
            for m in effects.written[k]:
                if m in memory or shared(spec, plan.values[m]):
                    return False
    if chain.apart:
        out, memory = chain.args[-1], effects.memory(*chain.inputs)
        if effects.memory(out) & memory or any(shared(plan.values[out], plan.values[m]) for m in memory):
            return False
    return True
