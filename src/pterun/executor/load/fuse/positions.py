"""Start positions kept on the device: the calls ExecuTorch's LLM export feeds a position read to the host.

The exporter reads a decoder's start position with ``aten::_local_scalar_dense``
(a one-element tensor read into a Python int: the host waits for the device)
and passes the int to the operators that take a start position. A CUDA graph
cannot hold that read, so such a method runs kernel by kernel on a GPU. This
module knows which operators consume a host position and how each runs with
the position left in its tensor (kernels/llm/positions.py):

    p = _local_scalar_dense(t)               (removed)
    e = executorch_prim::add.Scalar(p, n)    (removed; n an int computed on the host, as a shape)
    slice_copy.Tensor_out(x, d, p, e, 1)   -> pterun::slice_at.out(x, d, t, n)        rows t .. t+n
    llama::update_cache.out(v, c, p)       -> pterun::update_cache_at.out(v, c, t)    index_copy_ at t+arange
    llama::custom_sdpa.out(q, k, v, p, ..) -> pterun::custom_sdpa_at.out(q, k, v, t, ..)  whole cache, masked

A read is rewritten only when every use of its int is one of these (directly,
or through one ``add.Scalar`` with an int that no position feeds, used as a
slice's end whose start is the position itself, with step 1); the int is no
method output, list item, delegate's argument or move's source; ``t`` is one
integer element; and no step writes ``t``'s memory (or bytes the plan lays
over it) from the read to its last consumer. Anything else, and any method
with jumps, keeps the read as it is. Load runs this on the method's own code
only (on CUDA by default, ``load_program(..., device_positions=...)``); the
functional form for ``torch.compile`` keeps the reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pterun.core.device import DeviceType
from pterun.core.dtype import to_torch
from pterun.executor.load.effects import MethodEffects
from pterun.executor.load.fold import overlaps
from pterun.executor.load.steps import KernelStep
from pterun.format import JumpFalseCall, Kind, ListValue, Plan, Scalar, TensorSpec
from pterun.kernels import KernelRegistry

READS = frozenset({"aten::_local_scalar_dense", "aten::_local_scalar_dense.default"})
ADD = "executorch_prim::add.Scalar"
SLICE = "aten::slice_copy.Tensor_out"
SLICE_AT = "pterun::slice_at.out"
# A consumer of a host start position -> the kernel taking it in a tensor, and the argument it is.
CONSUMERS = {
    "llama::update_cache.out": ("pterun::update_cache_at.out", 2),
    "llama::custom_sdpa.out": ("pterun::custom_sdpa_at.out", 3),
}
_INTEGERS = (torch.int64, torch.int32)


@dataclass(frozen=True)
class _Group:
    removed: tuple[int, ...]  # the read and the additions folded into their consumers
    consumers: dict[int, KernelStep]  # step -> what replaces it


def keep_positions_on_device(plan: Plan, steps: list, effects: MethodEffects, kernels: KernelRegistry,
                             device_type: DeviceType) -> list:
    """``steps`` with every host read of a start position that only the operators above consume replaced by
    device-position calls (``effects``: those of ``steps``)."""
    if (not any(isinstance(s, KernelStep) and s.name in READS for s in steps)
            or any(isinstance(s, JumpFalseCall) for s in steps)):
        return steps
    uses: dict[int, list[tuple[int, int]]] = {}
    escaped = set(plan.outputs)  # ints read other than as a kernel's argument
    for n, step in enumerate(steps):
        if isinstance(step, KernelStep):
            for pos, vi in enumerate(step.args):
                uses.setdefault(vi, []).append((n, pos))
                value = plan.values[vi]
                if isinstance(value, ListValue) and value.kind == Kind.INT_LIST:
                    escaped.update(value.items)
        else:
            escaped.update(effects.effects[n].reads)  # a delegate's argument, a move's source
    tainted = _from_positions(steps)
    result = list(steps)
    for n, step in enumerate(steps):
        if isinstance(step, KernelStep) and step.name in READS:
            group = _group(plan, steps, effects, kernels, device_type, n, uses, escaped, tainted)
            if group is None:
                continue
            for k in group.removed:
                result[k] = None
            for k, replacement in group.consumers.items():
                result[k] = replacement
    return result


def _from_positions(steps: list) -> set[int]:
    """Values computed, through any step, from a value read to the host."""
    tainted: set[int] = set()
    for step in steps:
        if not isinstance(step, KernelStep):
            continue
        b = step.binding
        if step.name in READS or any(step.args[p] in tainted for p in (*b.positional, *(i for _, i in b.keywords))):
            if b.result is not None:
                tainted.add(step.args[b.result])
    return tainted


def _group(plan: Plan, steps: list, effects: MethodEffects, kernels: KernelRegistry, device_type: DeviceType,
           n: int, uses: dict, escaped: set[int], tainted: set[int]) -> _Group | None:
    read = steps[n]
    source, position = read.args[0], read.args[read.binding.result]
    spec = plan.values[source]
    if (not isinstance(spec, TensorSpec) or spec.numel != 1 or to_torch(spec.scalar_type) not in _INTEGERS
            or position in escaped):
        return None
    ends: dict[int, tuple[int, int]] = {}  # add.Scalar's result -> (its step, the host int added)
    consumers: dict[int, KernelStep] = {}
    slices: list[int] = []
    for k, pos in uses.get(position, ()):
        step = steps[k]
        if k == n:
            continue
        if step.name == ADD:
            other = step.args[1 - pos]
            made = step.args[-1]
            value = plan.values[other]
            if (pos > 1 or other in tainted or not isinstance(value, Scalar) or value.kind != Kind.INT
                    or made in escaped):
                return None
            ends[made] = (k, other)
        elif step.name == SLICE and pos == 2:
            slices.append(k)
        elif step.name in CONSUMERS and pos == CONSUMERS[step.name][1] and step.args.count(position) == 1:
            name, _ = CONSUMERS[step.name]
            args = tuple(source if a == position else a for a in step.args)
            consumers[k] = _step(kernels, device_type, name, args, step.name)
        else:
            return None
    for made, (k, _host) in ends.items():
        # Every use of position + host is the end of a slice starting at the position.
        if any(j != k and (pos != 3 or steps[j].name != SLICE or j not in slices) for j, pos in uses.get(made, ())):
            return None
    for k in slices:
        x, dim, start, end, stride, out = steps[k].args[:6]
        if end not in ends or start != position or plan.values[stride] != Scalar(Kind.INT, 1):
            return None
        consumers[k] = _step(kernels, device_type, SLICE_AT, (x, dim, source, ends[end][1], out, steps[k].args[-1]),
                             SLICE, ADD)
    if not consumers or not _unwritten(plan, effects, source, n, max(consumers)):
        return None
    return _Group((n, *(k for k, _ in ends.values())), consumers)


def _step(kernels: KernelRegistry, device_type: DeviceType, name: str, args: tuple[int, ...],
          *replaced: str) -> KernelStep:
    binding = kernels.lookup(name, device_type)(len(args))
    return KernelStep(name, binding, args, replaces=(*replaced, "aten::_local_scalar_dense"))


def _unwritten(plan: Plan, effects: MethodEffects, source: int, first: int, last: int) -> bool:
    """Whether no step from ``first`` up to ``last`` writes ``source``'s memory or bytes planned over it (the
    last consumer may: each device-position kernel reads its position before it writes anything)."""
    memory = effects.memory(source)
    # A value some step binds (a view of an input, say) is not in the bytes the plan gave it.
    specs = [s for s in (plan.values[m] for m in memory - effects.bound)
             if isinstance(s, TensorSpec) and s.memory_id is not None]
    for k in range(first, last):
        for m in effects.written[k]:
            other = plan.values[m]
            if m in memory or (isinstance(other, TensorSpec) and other.memory_id is not None
                               and any(overlaps(s, other) for s in specs)):
                return False
    return True
