"""A functional form of a method, for ``torch.compile``.

The executor's own code (generate.py) writes every result into the memory
the exporter planned for it. That is what makes it exact and allocation-free,
and also what keeps a compiler from fusing anything: every intermediate is a
write to memory the caller can observe. This module writes the same method as
a pure function instead: each call becomes its kernel's functional form
(``Binding.functional``: an out-variant becomes the operator it is the
out-variant of, ``aten::add.out`` -> ``aten::add.Tensor``),
results are values, not memory, and only state the method keeps between calls
(mutable buffers, read before they are written) stays in planned memory,
updated in place. TorchInductor can then fuse elementwise chains and choose
its own kernels. Calls of one kernel that share their first argument and take
constants for the rest become one call where the kernel says how
(``Functional.together``: a decoder layer's query, key and value products),
placed at the first of them; their results are noted as in their memory at
their own places, where later views of those bytes read them.

A delegate call is one call of ``pterun::delegate`` (delegate_op.py: traced, the delegate's own
operators or one opaque call), where its backend says its outputs' sizes ahead. Methods with other
delegates, control flow, or kernels that have no functional form (quantized and LLM custom operators)
are not rewritten; :class:`Unsupported` says why, and the method runs as generate.py wrote it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, NoReturn

import torch

from pterun.core.dtype import storage_dtype
from pterun.core.layout import CHANNELS_LAST_4D, CHANNELS_LAST_5D
from pterun.executor.codegen.delegate_op import DelegateOp
from pterun.executor.codegen.source import bind, comment, kernel_name, literal, make_function
from pterun.executor.load.effects import MethodEffects
from pterun.executor.load.fuse.common import ET_VIEW
from pterun.executor.load.steps import DelegateStep, KernelStep
from pterun.format import Kind, ListValue, Plan, TensorSpec


class Unsupported(Exception):
    """The method cannot be written functionally; the message says which instruction and why."""


def _region(spec: TensorSpec) -> tuple:
    return spec.memory_id, spec.memory_offset, spec.nbytes


def _returns_one(fn) -> bool:
    # A functional form returns one value unless its schema says several, or a list.
    schema = getattr(fn, "_schema", None)
    return schema is None or (len(schema.returns) == 1 and not str(schema.returns[0].type).startswith("List"))


def _memory_format(spec: TensorSpec) -> torch.memory_format:
    if spec.dim_order == CHANNELS_LAST_4D:
        return torch.channels_last
    if spec.dim_order == CHANNELS_LAST_5D:
        return torch.channels_last_3d
    return torch.contiguous_format


class _Writer:
    def __init__(self, plan: Plan, steps: Sequence, effects: MethodEffects, objects: list, device: torch.device,
                 constants: frozenset[int]) -> None:
        self.plan, self.steps, self.objects, self.name, self.device = plan, steps, objects, plan.name, device
        self.constants = constants
        self.effects = effects.effects
        self.delegates: list[DelegateOp] = []
        self.writes: dict[int, int] = {}  # how many steps write or bind each value
        self.writer: dict[int, int] = {}  # the last step that does
        self.parts: dict[int, tuple[int, int, int]] = {}  # of the calls made together: first, second, out
        for n, e in enumerate(effects.effects):
            for v in (*e.writes, *e.binds):
                for t in self.targets(v):
                    self.writes[t] = self.writes.get(t, 0) + 1
                    self.writer[t] = n
        self.env: dict[str, object] = {}
        self.lines: list[str] = []
        self.inputs = {vi: f"p{vi}" for vi in plan.inputs if isinstance(plan.values[vi], TensorSpec)}
        self.defined: set[int] = set(self.inputs)
        self.locals: set[int] = set()
        self.state: set[int] = set()
        for vi, value in enumerate(plan.values):
            if not isinstance(value, TensorSpec) or value.memory_id is None or vi in self.inputs or vi in constants:
                self.defined.add(vi)  # constants, scalars, lists: fixed at load
        # Every value some step writes: out arguments, results, in-place updates.
        self.written = {t for e in effects.effects for v in (*e.writes, *e.binds) for t in self.targets(v)}
        # The last value written to each planned region: the exporter removes a view by planning it
        # on its base's bytes, and the view is then read without ever being written.
        self.region: dict[tuple, int] = {}
        for vi in self.inputs:
            self.note_region(vi)

    def fail(self, n: int, why: str) -> NoReturn:
        raise Unsupported(f"method {self.name!r} instruction {n}: {why}")

    def ref(self, vi: int, n: int) -> str:
        value = self.plan.values[vi]
        if vi in self.inputs:
            return self.inputs[vi]
        if vi in self.locals:
            return f"v{vi}"
        if isinstance(value, ListValue) and value.kind in (Kind.INT_LIST, Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST):
            items = ["None" if i == -1 else self.ref(i, n) for i in value.items]
            return f"[{', '.join(items)}]"
        if isinstance(value, TensorSpec) and value.memory_id is not None and vi not in self.defined:
            if vi in self.written or value.fqn or value.data_buffer_idx:
                # Read before any instruction writes it: state the method keeps between calls.
                self.state.add(vi)
                self.defined.add(vi)
            else:
                base = self.region.get(_region(value))
                if base is None:
                    self.fail(n, f"value {vi} is read from planned memory nothing wrote")
                self.locals.add(vi)
                self.defined.add(vi)
                self.lines.append(f"        v{vi} = {self.ref(base, n)}.reshape({list(value.sizes)!r})")
                return f"v{vi}"
        name = f"c{vi}"
        self.env.setdefault(name, self.objects[vi])
        return name

    def note_region(self, vi: int) -> None:
        value = self.plan.values[vi]
        if isinstance(value, TensorSpec) and value.memory_id is not None:
            self.region[_region(value)] = vi

    def assign(self, vi: int, expr: str, note: bool = True) -> None:
        if vi in self.state:
            self.lines.append(f"        c{vi}.copy_({expr})")
        else:
            self.locals.add(vi)
            self.defined.add(vi)
            self.lines.append(f"        v{vi} = {expr}")
        if note:
            self.note_region(vi)

    def call_args(self, n: int, step: KernelStep, skip: set[int]) -> str:
        b = step.binding
        converters = dict(b.convert)
        parts = []
        for pos in b.positional:
            if pos not in skip:
                parts.append(self.arg(n, step, pos, converters))
        for key, pos in b.keywords:
            if pos not in skip:
                parts.append(f"{key}={self.arg(n, step, pos, converters)}")
        return ", ".join(parts)

    def arg(self, n: int, step: KernelStep, pos: int, converters) -> str:
        vi = step.args[pos]
        if pos not in converters:
            return self.ref(vi, n)
        if vi in self.locals or vi in self.inputs:
            self.fail(n, "a dtype or memory format computed at run time")
        name = f"x{n}_{pos}"
        self.env[name] = converters[pos](self.objects[vi])
        return name

    def targets(self, vi: int) -> list[int]:
        value = self.plan.values[vi]
        if isinstance(value, ListValue):
            return [i for i in value.items if i >= 0]
        return [vi]

    def kernel(self, n: int, step: KernelStep) -> None:
        b = step.binding
        form = b.functional
        if form is None:
            self.fail(n, f"{step.name} has no functional form")
        fn = bind(self.env, kernel_name(step.name), form.fn, n)
        if not form.outputs:
            # The kernel's own traceable form: in-place updates stay in place (state), results are assigned.
            call = f"{fn}({self.call_args(n, step, set())})"
            for pos in b.mutates:
                self.ref(step.args[pos], n)
            if b.result is not None:
                self.assign(step.args[b.result], call)
            else:
                self.lines.append(f"        {call}")
            return
        args = self.call_args(n, step, set(form.outputs))
        outs = [t for pos in form.outputs for t in self.targets(step.args[pos])]
        if form.options:
            options = ", ".join(f"{k}={self.option(n, k, outs[0])}" for k in form.options)
            args = f"{args}, {options}" if args else options
        call = f"{fn}({args})"
        if len(outs) == 1 and _returns_one(form.fn):
            self.assign(outs[0], call)
        else:
            self.lines.append(f"        _r = {call}")
            for k, target in enumerate(outs):
                self.assign(target, f"_r[{k}]")

    def delegate(self, n: int, step: DelegateStep) -> None:
        """A delegate call as one operator call (delegate_op.py): its inputs in, its outputs new tensors out."""
        if isinstance(step.functional, str):
            self.fail(n, f"a delegate of {step.name} runs outside compiled code: {step.functional}")
        writes = set(self.effects[n].writes)
        inputs, outputs = [], []
        for k, vi in enumerate(step.args):
            spec = self.plan.values[vi]
            if not isinstance(spec, TensorSpec):
                self.fail(n, f"delegate argument {k} is no tensor")
            if tuple(spec.dim_order) != tuple(range(len(spec.sizes))):
                self.fail(n, f"delegate argument {k} is laid out in dim order {list(spec.dim_order)}")
            if vi not in writes:
                inputs.append((k, vi))
            elif vi in self.inputs:
                self.fail(n, f"the delegate writes value {vi}, an input of the method")
            else:
                outputs.append((k, vi, storage_dtype(spec.scalar_type)))
        op = DelegateOp(step.fn, step.functional, len(step.args), [k for k, _ in inputs],
                        [(k, dtype) for k, _, dtype in outputs], self.device)
        self.delegates.append(op)
        self.env["_delegate"] = torch.ops.pterun.delegate
        # The token as a literal: Dynamo then guards on no object of the delegate's.
        refs = ", ".join(self.ref(vi, n) for _, vi in inputs)
        self.lines.append(f"        _r = _delegate({literal(op.token)}, [{refs}])")
        for j, (_, vi, _) in enumerate(outputs):
            self.assign(vi, f"_r[{j}]")

    def option(self, n: int, key: str, out: int) -> str:
        """A keyword describing the output ``out`` (its dtype, device or memory format), fixed at load."""
        if key == "device":
            self.env["_device"] = self.device
            return "_device"
        spec = self.plan.values[out]
        if not isinstance(spec, TensorSpec):
            self.fail(n, f"the {key} of value {out}, which is no tensor")
        name = f"x{n}_{key}"
        self.env[name] = storage_dtype(spec.scalar_type) if key == "dtype" else _memory_format(spec)
        return name

    def together(self) -> dict[int, list[int]]:
        """The calls computed as one: the first step of each group -> the group's steps, in order. A group's
        steps call one kernel that has a ``together`` form, on the same first argument (written by one step,
        before them), constants for the rest, each with one output no other step writes and no state."""
        groups: dict[tuple, list[int]] = {}
        for n, step in enumerate(self.steps):
            parts = _together_parts(step) if isinstance(step, KernelStep) else None
            if parts is None:
                continue
            first, second, out = parts
            spec = self.plan.values[out]
            if (second not in self.constants or self.writes.get(out, 0) != 1
                    or not isinstance(spec, TensorSpec) or spec.fqn or spec.data_buffer_idx):
                continue
            source, views = self.viewed(first)
            if source in self.inputs or (self.writes.get(source) == 1 and self.writer[source] < n):
                groups.setdefault((step.name, source, views), []).append(n)
                self.parts[n] = parts
        return {steps[0]: steps for steps in groups.values() if len(steps) > 1}

    def viewed(self, vi: int) -> tuple[int, tuple]:
        """The value ``vi`` views through ``et_view`` steps, and their sizes: each call of a layer's products
        views the same normalized row for itself, and views of one value at equal sizes are equal."""
        views: list[tuple] = []
        while self.writes.get(vi) == 1:
            step = self.steps[self.writer[vi]]
            if not isinstance(step, KernelStep) or step.name != ET_VIEW:
                break
            sizes = self.plan.values[step.args[1]]
            if not isinstance(sizes, ListValue):
                break
            views.append(tuple(("value", i) if self.writes.get(i) else ("int", self.objects[i]) for i in sizes.items))
            vi = step.args[0]
        return vi, tuple(views)

    def kernels_together(self, steps: list[int]) -> None:
        first = self.steps[steps[0]]
        parts = [self.parts[n] for n in steps]
        fn = bind(self.env, kernel_name(first.name) + "_together", first.binding.functional.together, steps[0])
        seconds = ", ".join(self.ref(p[1], n) for p, n in zip(parts, steps))
        self.lines.append(f"        _r = {fn}({self.ref(parts[0][0], steps[0])}, [{seconds}])")
        for k, p in enumerate(parts):
            self.assign(p[2], f"_r[{k}]", note=False)

    def write(self) -> Functional:
        groups = self.together()
        later = {n: steps[0] for steps in groups.values() for n in steps[1:]}
        for n, step in enumerate(self.steps):
            if step is None:
                continue
            if isinstance(step, DelegateStep):
                first = len(self.lines)
                self.delegate(n, step)
                for k in range(first, len(self.lines)):
                    self.lines[k] += f"  # delegate {comment(step.name)}"
                continue
            if not isinstance(step, KernelStep):
                self.fail(n, f"{type(step).__name__} (control flow) is not supported")
            first = len(self.lines)
            if n in later or n in groups:
                if n in groups:
                    self.kernels_together(groups[n])
                self.note_region(self.parts[n][2])
            else:
                self.kernel(n, step)
            for k in range(first, len(self.lines)):
                self.lines[k] += f"  # {comment(step.name)}"
        outputs = "".join(f"{self.ref(o, -1)}, " for o in self.plan.outputs)
        params = ", ".join(self.inputs.values())
        body = [f"    def run({params}):", *self.lines, f"        return ({outputs})"]
        run, source, _ = make_function("functional", self.name, body, self.env)
        # The operator finds a delegate call by its token while the call lives: as long as the function.
        run.delegate_ops = tuple(self.delegates)  # type: ignore[attr-defined]
        return Functional(run, source, tuple(self.delegates), bool(self.state))


def _together_parts(step: KernelStep) -> tuple[int, int, int] | None:
    """(first argument, second argument, output) of a call whose functional form can be made together with
    others: two positional arguments and one output."""
    b = step.binding
    form = b.functional
    if form is None or form.together is None or len(form.outputs) != 1 or len(b.positional) != 2:
        return None
    if any(pos not in form.outputs for _, pos in b.keywords):
        return None
    return step.args[b.positional[0]], step.args[b.positional[1]], step.args[form.outputs[0]]


class Functional(NamedTuple):
    run: Callable  # takes the method's tensor inputs in order and returns its outputs
    source: str
    delegates: tuple[DelegateOp, ...]  # its delegate calls: its compiled code is for this process alone
    keeps_state: bool  # it reads planned memory an earlier call wrote (mutable buffers, a KV cache)


def functional_method(plan: Plan, steps: Sequence, effects: MethodEffects, objects: list, device: torch.device,
                      constants: frozenset[int]) -> Functional:
    """The method as a pure function.

    ``effects`` are the steps' effects; ``constants`` the values fixed at load, planned ones included
    (copies folded into views)."""
    return _Writer(plan, steps, effects, objects, device, constants).write()
