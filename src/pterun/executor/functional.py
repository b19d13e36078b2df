"""A functional form of a method, for ``torch.compile``.

The executor's own code (codegen.py) writes every result into the memory
the exporter planned for it. That is what makes it exact and allocation-free,
and also what keeps a compiler from fusing anything: every intermediate is a
write to memory the caller can observe. This module writes the same method as
a pure function instead: each out-variant call becomes the functional
operator it is the out-variant of (``aten::add.out`` -> ``aten::add.Tensor``),
results are values, not memory, and only state the method keeps between calls
(mutable buffers, read before they are written) stays in planned memory,
updated in place. TorchInductor can then fuse elementwise chains and choose
its own kernels.

Methods with delegates, control flow, or kernels that have no functional form
(quantized and LLM custom operators) are not rewritten; :class:`Unsupported`
says why, and the method runs as compiled by codegen.py.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from pterun.core.dtype import storage_dtype
from pterun.core.layout import CHANNELS_LAST_4D, CHANNELS_LAST_5D
from pterun.executor.codegen import DelegateStep, KernelStep
from pterun.executor.source import make_function
from pterun.format import Kind, ListValue, Plan, TensorSpec
from pterun.kernels.aten import overload_of, overloads_of


class Unsupported(Exception):
    """The method cannot be written functionally; the message says which instruction and why."""


# Factory functions (arange, full, ...) take the result's dtype and device where their out-variant
# takes the out tensor.
_TENSOR_OPTIONS = ("dtype", "layout", "device", "pin_memory")


@functools.lru_cache(maxsize=None)
def functional_of(name: str):
    """(functional overload, whether it takes tensor options) for an ATen out-variant, or None."""
    out = overload_of(name)
    if out is None:
        return None
    schema = out._schema
    inputs = [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]
    n_out = sum(1 for a in schema.arguments if a.is_out)
    for candidate in overloads_of(schema.name):
        s = candidate._schema
        if any(a.is_out or (a.alias_info is not None and a.alias_info.is_write) for a in s.arguments):
            continue
        if len(s.returns) != n_out:
            continue
        arguments = [(a.name, str(a.type)) for a in s.arguments]
        if arguments == inputs:
            return candidate, False
        if [a for a in arguments if a[0] not in _TENSOR_OPTIONS] == inputs and all(
            a.name in inputs_names(inputs) or a.name in _TENSOR_OPTIONS for a in s.arguments
        ):
            return candidate, True
    return None


def inputs_names(inputs) -> set[str]:
    return {name for name, _ in inputs}


def _region(spec: TensorSpec) -> tuple:
    return spec.memory_id, spec.memory_offset, spec.nbytes


def _dim_order_copy(tensor: torch.Tensor, dtype: torch.dtype, channels_last: int) -> torch.Tensor:
    # Always a copy, as the out-variant it stands for: a clone of a mutable buffer taken before the buffer
    # is updated in place must keep the old values (``to``/``contiguous`` hand back their input when
    # nothing changes).
    fmt = (torch.contiguous_format, torch.channels_last, torch.channels_last_3d)[channels_last]
    return tensor.to(dtype, memory_format=fmt, copy=True)


class _Writer:
    def __init__(self, plan: Plan, steps: Sequence, objects: list, name: str, device: torch.device,
                 constants: set[int]) -> None:
        self.plan, self.steps, self.objects, self.name, self.device = plan, steps, objects, name, device
        self.env: dict[str, object] = {"_dim_order_copy": _dim_order_copy}
        self.lines: list[str] = []
        self.inputs = {vi: f"p{vi}" for vi in plan.inputs if isinstance(plan.values[vi], TensorSpec)}
        self.defined: set[int] = set(self.inputs)
        self.locals: set[int] = set()
        self.state: set[int] = set()
        for vi, value in enumerate(plan.values):
            if not isinstance(value, TensorSpec) or value.memory_id is None or vi in self.inputs or vi in constants:
                self.defined.add(vi)  # constants, scalars, lists: fixed at load
        self.written = self.all_written()
        # The last value written to each planned region: the exporter removes a view by planning it
        # on its base's bytes, and the view is then read without ever being written.
        self.region: dict[tuple, int] = {}
        for vi in self.inputs:
            self.note_region(vi)

    def fail(self, n: int, why: str):
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

    def all_written(self) -> set[int]:
        """Every value some instruction writes: out arguments, results, in-place updates."""
        written: set[int] = set()
        for step in self.steps:
            if not isinstance(step, KernelStep):
                continue
            b = step.binding
            positions = set(b.writes) | set(b.mutates)
            if b.result is not None:
                positions.add(b.result)
            for p in positions:
                written.update(self.targets(step.args[p]))
        return written

    def note_region(self, vi: int) -> None:
        value = self.plan.values[vi]
        if isinstance(value, TensorSpec) and value.memory_id is not None:
            self.region[_region(value)] = vi

    def assign(self, vi: int, expr: str) -> None:
        if vi in self.state:
            self.lines.append(f"        c{vi}.copy_({expr})")
        else:
            self.locals.add(vi)
            self.defined.add(vi)
            self.lines.append(f"        v{vi} = {expr}")
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
        name = step.name
        if name.startswith("dim_order_ops::"):
            out = step.args[-2]
            spec = self.plan.values[out]
            if name.startswith("dim_order_ops::_empty_dim_order"):
                self.fail(n, "_empty_dim_order has no functional form here")
            layout = 1 if spec.dim_order == CHANNELS_LAST_4D else 2 if spec.dim_order == CHANNELS_LAST_5D else 0
            dtype = f"x{n}_dtype"
            self.env[dtype] = storage_dtype(spec.scalar_type)
            self.assign(out, f"_dim_order_copy({self.ref(step.args[0], n)}, {dtype}, {layout})")
            return
        if name.startswith("et_copy::"):
            self.assign(step.args[1], f"{self.ref(step.args[0], n)}.clone()")
            return
        if b.writes:
            found = functional_of(name) if name.startswith("aten::") else None
            if found is None:
                self.fail(n, f"{name} has no functional form")
            functional, options = found
            fn = f"k{n}"
            self.env[fn] = functional
            args = self.call_args(n, step, set(b.writes))
            outs = [t for pos in b.writes for t in self.targets(step.args[pos])]
            if options:
                spec = self.plan.values[outs[0]]
                dtype = f"x{n}_dtype"
                self.env[dtype] = storage_dtype(spec.scalar_type)
                self.env["_device"] = self.device
                args = f"{args}, dtype={dtype}, device=_device" if args else f"dtype={dtype}, device=_device"
            call = f"{fn}({args})"
            if len(outs) == 1 and len(functional._schema.returns) == 1 and not str(
                functional._schema.returns[0].type
            ).startswith("List"):
                self.assign(outs[0], call)
            else:
                self.lines.append(f"        _r = {call}")
                for k, target in enumerate(outs):
                    self.assign(target, f"_r[{k}]")
            return
        # Results and in-place updates: the kernel's own callable, traceable when it is torch's overload.
        fn = f"k{n}"
        if isinstance(b.fn, torch._ops.OpOverload) or not name.startswith("aten::"):
            self.env[fn] = b.fn  # a view made in place of a copy, or a Python kernel
        else:
            self.env[fn] = overload_of(name)  # the schema binder calls the overload's C++ entry point
        call = f"{fn}({self.call_args(n, step, set())})"
        for pos in b.mutates:
            self.ref(step.args[pos], n)
        if b.result is not None:
            self.assign(step.args[b.result], call)
        else:
            self.lines.append(f"        {call}")

    def write(self) -> tuple:
        for n, step in enumerate(self.steps):
            if step is None:
                continue
            if isinstance(step, DelegateStep):
                self.fail(n, "delegates run outside the compiled function")
            if not isinstance(step, KernelStep):
                self.fail(n, f"{type(step).__name__} (control flow) is not supported")
            if not (step.name.startswith(("aten::", "executorch_prim::", "dim_order_ops::", "et_copy::"))):
                self.fail(n, f"{step.name} is not an operator torch.compile can trace")
            if step.name == "executorch_prim::et_copy_index.tensor":
                self.fail(n, "et_copy_index grows a tensor in place")
            self.kernel(n, step)
        outputs = "".join(f"{self.ref(o, -1)}, " for o in self.plan.outputs)
        params = ", ".join(self.inputs.values())
        body = [f"    def run({params}):", *self.lines, f"        return ({outputs})"]
        run, source, _ = make_function("functional", self.name, body, self.env)
        return run, source


def functional_method(plan: Plan, steps: Sequence, objects: list, device: torch.device, constants: set[int]) -> tuple:
    """(run, source): ``run`` takes the method's tensor inputs in order and returns its outputs.

    ``constants`` are the values fixed at load, planned ones included (copies folded into views)."""
    return _Writer(plan, steps, objects, plan.name, device, constants).write()
