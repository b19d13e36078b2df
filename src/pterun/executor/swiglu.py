"""A SwiGLU MLP's gate and up products and SiLU-product as one step, at load, where the device has a kernel.

For one token these products are bound by reading the two weights, and the
exporter writes them as seven steps, SiLU in half precision as casts around
a float32 sigmoid and product:

    g = mm(x, Wg^T)    u = mm(x, Wu^T)
    a = _to_dim_order_copy(g, float32)    s = sigmoid(a)    t = mul(a, s)
    h = mul(_to_dim_order_copy(t, dtype of g), u)

Where the kernel registry holds ``pterun::swiglu.out`` for the method's
device (on CUDA with Triton, kernels/triton/gated.py: both weights read in one
pass), the seven steps become one call ``swiglu(x, Wg^T, Wu^T, out=h)`` at the
last one's place. The kernel rounds as the steps do, so the result is theirs.

Only when the chain's intermediates are read by nothing else (through any
value that may refer to their memory, and no view the exporter planned on
their bytes), are no method outputs, nothing between the first product and
the last step writes what the call reads, and ``h`` shares no memory with
its inputs (the kernel reads ``x`` while it writes ``h``). Methods with
jumps are left as they are: their order is not the order they run in.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pterun.core.device import DeviceType
from pterun.core.dtype import to_torch
from pterun.executor.effects import MethodEffects
from pterun.executor.steps import DelegateStep, KernelStep
from pterun.format import JumpFalseCall, Plan, TensorSpec
from pterun.kernels import KernelRegistry

FUSED = "pterun::swiglu.out"
_MM, _MUL, _SIGMOID = "aten::mm.out", "aten::mul.out", "aten::sigmoid.out"
_CAST = "dim_order_ops::_to_dim_order_copy.out"
# Where each operator's call holds its out argument, and how many inputs come first (self, other / mat2).
_OUT = {_MM: 2, _MUL: 2, _SIGMOID: 1, _CAST: 3}
_INPUTS = {_MM: 2, _MUL: 2, _SIGMOID: 1, _CAST: 1}


@dataclass(frozen=True)
class Chain:
    steps: tuple[int, ...]  # the seven steps; the last one's place runs the fused call
    args: tuple[int, int, int, int]  # x, Wg^T, Wu^T, h


def fuse_swiglu(plan: Plan, steps: list, effects: MethodEffects, kernels: KernelRegistry,
                device_type: DeviceType) -> list:
    """``steps`` with every SwiGLU chain as one call of the registry's fused kernel, if it has one.

    ``effects`` are those of the method's steps before any were folded."""
    if not kernels.holds(FUSED, device_type) or not any(_is(s, _SIGMOID) for s in steps):
        return steps
    chains = find_chains(plan, steps, effects.after(steps), effects)
    if not chains:
        return steps
    binding = kernels.lookup(FUSED, device_type)(4)
    result = list(steps)
    for chain in chains:
        for n in chain.steps:
            result[n] = None
        result[chain.steps[-1]] = KernelStep(FUSED, binding, chain.args)
    return result


def find_chains(plan: Plan, steps: list, effects: MethodEffects, unfolded: MethodEffects) -> list[Chain]:
    """The chains in ``steps`` (``effects`` theirs, ``unfolded`` those of the steps before copies were folded)."""
    if any(isinstance(s, JumpFalseCall) for s in steps):
        return []
    finder = _Finder(plan, steps, effects, unfolded)
    return [c for n, s in enumerate(steps) if _is(s, _SIGMOID) and (c := finder.match(n)) is not None]


def _is(step, name: str) -> bool:
    return isinstance(step, KernelStep) and step.name == name


def _overlaps(a: TensorSpec, b: TensorSpec) -> bool:
    return (a.memory_id is not None and a.memory_id == b.memory_id and a.memory_offset < b.memory_offset + b.nbytes
            and b.memory_offset < a.memory_offset + a.nbytes)


class _Finder:
    def __init__(self, plan: Plan, steps: list, effects: MethodEffects, unfolded: MethodEffects) -> None:
        self.plan, self.steps, self.effects = plan, steps, effects
        # Views the exporter planned on other values' bytes: read, never written (fold.py's aliases), in the
        # steps as exported (a copy folded into a view of a constant no longer writes its planned bytes).
        written = set(unfolded.writers) | unfolded.bound | set(plan.inputs)
        self.aliases = [plan.values[vi] for vi in unfolded.readers if vi not in written
                        and isinstance(plan.values[vi], TensorSpec) and plan.values[vi].memory_id is not None]

    def spec(self, vi: int) -> TensorSpec | None:
        value = self.plan.values[vi]
        return value if isinstance(value, TensorSpec) else None

    def made_by(self, vi: int, name: str) -> int | None:
        """The one step of operator ``name`` whose out argument is ``vi``."""
        found = [n for n in self.effects.writers.get(vi, []) if _is(self.steps[n], name)
                 and self.steps[n].args[_OUT[name]] == vi]
        return found[0] if len(found) == 1 else None

    def used_by(self, vi: int, name: str, maker: int) -> int | None:
        """The one step reading ``vi`` other than its ``maker``, if it is of operator ``name`` and reads it as
        an input (a cast declares no writes, so it is taken to read its out argument too)."""
        found = [n for n in self.effects.readers.get(vi, []) if n != maker]
        return (found[0] if len(found) == 1 and _is(self.steps[found[0]], name)
                and vi in self.steps[found[0]].args[:_INPUTS[name]] else None)

    def match(self, sigmoid: int) -> Chain | None:
        a, s = self.steps[sigmoid].args[:2]
        cast_up, mul_silu = self.made_by(a, _CAST), self.used_by(s, _MUL, sigmoid)
        if cast_up is None or mul_silu is None or set(self.steps[mul_silu].args[:2]) != {a, s}:
            return None
        g, t = self.steps[cast_up].args[0], self.steps[mul_silu].args[2]
        gate, cast_down = self.made_by(g, _MM), self.used_by(t, _CAST, mul_silu)
        if gate is None or cast_down is None:
            return None
        t16 = self.steps[cast_down].args[3]
        final = self.used_by(t16, _MUL, cast_down)
        if final is None:
            return None
        first, second, h = self.steps[final].args[:3]
        u = second if first == t16 else first
        up = self.made_by(u, _MM)
        if up is None or u == t16:
            return None
        x, wg = self.steps[gate].args[:2]
        x_up, wu = self.steps[up].args[:2]
        chain = (gate, up, cast_up, sigmoid, mul_silu, cast_down, final)
        if x_up != x or not set(self.effects.readers.get(a, [])) <= {cast_up, sigmoid, mul_silu}:
            return None
        if not (self._types(x, g, u, t16, h, a, s, t) and self._private(chain, (g, u, a, s, t, t16))
                and self._untouched(chain, (x, wg, wu), h)):
            return None
        return Chain(tuple(sorted(chain[:-1])) + (final,), (x, wg, wu, h))

    def _types(self, x: int, *values: int) -> bool:
        specs = [self.spec(v) for v in (x, *values)]
        if any(s is None for s in specs):
            return False
        half, wide = specs[:5], specs[5:]
        dtype = half[0].scalar_type
        return (to_torch(dtype) in (torch.bfloat16, torch.float16) and all(s.scalar_type == dtype for s in half)
                and all(to_torch(s.scalar_type) == torch.float32 for s in wide)
                and all(s.sizes == specs[1].sizes for s in specs[1:])
                and all(s.dim_order == tuple(range(len(s.sizes))) for s in specs))

    def _private(self, chain: tuple[int, ...], intermediates: tuple[int, ...]) -> bool:
        """Each intermediate is written and read by the chain only (a cast declares no writes: it is taken
        to write its input too)."""
        outputs = set(self.plan.outputs)
        for vi in intermediates:
            spec = self.spec(vi)
            if (vi in outputs or vi in self.effects.bound or not set(self.effects.writers.get(vi, [])) <= set(chain)
                    or not set(self.effects.readers.get(vi, [])) <= set(chain)
                    or any(_overlaps(spec, alias) for alias in self.aliases)):
                return False
        return True

    def _untouched(self, chain: tuple[int, ...], reads: tuple[int, ...], out: int) -> bool:
        """Nothing from the first product to the last step writes what the call reads, nor is it ``out``."""
        memory = self.effects.memory(*reads)
        out_spec = self.spec(out)
        if out in memory or self.effects.memory(out) & memory:
            return False
        specs = [s for s in (self.spec(m) for m in memory) if s is not None]
        if any(_overlaps(out_spec, s) for s in specs):
            return False
        for k in range(min(chain), max(chain)):
            if k in chain:
                continue
            if isinstance(self.steps[k], DelegateStep) or self.effects.written[k] & memory:
                return False
            for m in self.effects.written[k]:
                written = self.spec(m)
                if written is not None and any(_overlaps(written, s) for s in specs):
                    return False
        return True
