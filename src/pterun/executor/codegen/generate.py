"""Generates one Python function from a method's instruction chain.

Every value the method uses becomes a name the function reads directly:

* ``c<i>``: a value fixed at load (a planned or constant tensor, a list),
  bound as a closure variable; scalars are written inline;
* ``p<i>``: a tensor the caller supplies on each call (unplanned inputs and
  output buffers), a parameter;
* ``v<i>``: a value an instruction computes (symbolic sizes, views, moved
  values), a local variable.

Each kernel call becomes one call expression, named after its operator and
with its arguments in the places its :class:`~pterun.kernels.Binding` gives,
so executing a method is one Python call with no interpretation loop, no
lookups and no argument lists built per instruction. Every line of a step
ends with a comment naming its operator (``# aten::addmm.out``), so the
source (``pterun inspect --code``) reads without the program beside it.
Chains with jumps (control flow) become a small state machine over their
basic blocks.

A program loaded with profiling on (ETDump) gets a second form of the same
function instead, generated with a :class:`~pterun.executor.etdump.MethodTrace`:
each instruction's lines are bracketed by timestamps and followed by a call
that records its events (and logs the values it wrote); the plain form has
none of this.

The generated source is kept (``GeneratedMethod.source``) and every line maps
back to its instruction, so an error raised inside names the instruction and
operator that failed. Names from the file reach the source only as
identifiers made of letters, digits and underscores, and in comments only
escaped (``ascii``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import torch

from pterun.core.layout import strides_for
from pterun.errors import PteError
from pterun.executor.cache import LoadCache
from pterun.executor.codegen.replay import Replay
from pterun.executor.codegen.runs import Runs
from pterun.executor.codegen.source import bind, comment, inline, kernel_name, literal, make_function
from pterun.executor.codegen.torch_functions import python_binding
from pterun.executor.etdump import MethodTrace
from pterun.executor.load.steps import DelegateStep, KernelStep, Step, describe
from pterun.format import FreeCall, JumpFalseCall, MoveCall, Plan


@dataclass
class MethodValues:
    """What the generator needs to know of each value."""

    objects: list  # the load-time object of every value (None for parameters)
    params: list[int]  # value indices passed in on each call, in order
    locals: AbstractSet[int]  # value indices instructions assign
    dynamic: set[int]  # tensors whose shape changes from call to call (emptied before torch writes them)
    list_items: dict[int, tuple[int, ...]] = field(default_factory=dict)  # list value -> item value indices (-1: None)
    # Dynamic tensors planned with a dim order other than contiguous (channels-last): kept in it after writes.
    dim_orders: dict[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class GeneratedMethod:
    run: Callable
    source: str
    lines: dict[int, int]  # source line -> instruction index
    filename: str
    replays: dict[int, Replay] = field(default_factory=dict)  # by the first step of the run each wraps
    whole: Replay | None = None  # the replay that is the whole method, where one is


def _keep_dim_order(tensor: torch.Tensor, dim_order: tuple[int, ...]) -> None:
    # Torch's out= kernels give an emptied out tensor the strides of the result they compute: contiguous,
    # or those of an input (a permuted view an elementwise kernel reads). ExecuTorch re-strides a
    # resized tensor by its planned dim order, so a dynamic tensor keeps its planned layout (outputs come
    # back laid out as ExecuTorch lays them out, and views of it see the planned layout). Move the values
    # into the planned layout when the kernel left another one.
    strides = strides_for(tensor.shape, dim_order)
    if tensor.stride() != strides:
        values = tensor.clone()
        tensor.as_strided_(tensor.shape, strides)
        tensor.copy_(values)


def _keep_contiguous(tensor: torch.Tensor) -> None:
    # _keep_dim_order for the contiguous dim order, with torch's own check first (the common case).
    if not tensor.is_contiguous():
        values = tensor.contiguous()
        tensor.as_strided_(tensor.shape, strides_for(tensor.shape, range(tensor.dim())))
        tensor.copy_(values)


def _truth(cond) -> bool:
    # A JumpFalse condition is a bool or a bool tensor, true when all its elements are.
    if isinstance(cond, torch.Tensor):
        return bool(cond.all())
    return bool(cond)


class _Generator:
    def __init__(self, values: MethodValues, steps: Sequence[Step], plan: Plan, cache: LoadCache | None,
                 trace: MethodTrace | None = None, originals: Sequence[Step] = (), replays: bool = False) -> None:
        self.values = values
        self.trace = trace
        self.replays = replays and trace is None
        self.hoisted: set[int] = set()  # lists updated ahead of the replayed run being written
        self.originals = originals
        self.cache = cache
        self.steps = steps
        self.plan = plan
        self.outputs = plan.outputs
        self.name = plan.name
        self.env: dict[str, object] = {}
        self.lines: list[str] = []
        self.assigned: set[int] = set()  # locals a step has assigned, so far in the chain
        self.early: set[int] = set()  # locals read before any step assigns them
        self.line_step: dict[int, int] = {}
        self.params = set(values.params)
        self.runs = Runs(steps, values.objects, values.locals | self.params, values.list_items, values.dynamic,
                         plan.outputs)
        # One method per kind of step writes its lines.
        self._emitters: dict[type, Callable[[int, Any, int], None]] = {
            KernelStep: self._timed(self.kernel), DelegateStep: self._timed(self.delegate),
            MoveCall: self._timed(self.move), FreeCall: self._timed(self.nothing),
            type(None): self._timed(self.nothing), JumpFalseCall: self.jump,
        }
        # Lists whose items change per call are updated in place before each use.
        self.dynamic_items: dict[int, list[tuple[int, int]]] = {}
        for li, items in values.list_items.items():
            moving = [(j, item) for j, item in enumerate(items) if item in values.locals or item in self.params]
            if moving:
                self.dynamic_items[li] = moving

    def ref(self, index: int) -> str:
        """The name of a value the code reads."""
        if index in self.values.locals:
            if index not in self.assigned:
                self.early.add(index)  # read before any step assigns it: starts as its load-time object
            return f"v{index}"
        if index in self.params:
            return f"p{index}"
        return self.constant(index)

    def target(self, index: int) -> str:
        """The name of a value a step assigns."""
        if index in self.values.locals:
            self.assigned.add(index)
            return f"v{index}"
        return self.ref(index)

    def constant(self, index: int) -> str:
        value = self.values.objects[index]
        if inline(value):
            return literal(value)
        name = f"c{index}"
        self.env.setdefault(name, value)
        return name

    def bind(self, name: str, value, step: int, *, own: bool = False) -> str:
        return bind(self.env, name, value, step, own=own)

    def converted(self, value, n: int, pos: int) -> str:
        """A converted constant argument: inline, a dtype (memory format, layout) by its name, or x<n>_<pos>."""
        if inline(value):
            return literal(value)
        if isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
            return self.bind(str(value).removeprefix("torch."), value, n)
        return self.bind(f"x{n}_{pos}", value, n, own=True)

    def helper(self, name: str, fn) -> str:
        self.env[name] = fn  # only helpers the code uses are bound
        return name

    def emit(self, indent: int, text: str, step: int | None = None) -> None:
        if step is not None:
            what = describe(self.steps[step])
            if self.steps[step] is None and self.originals:
                what = f"{describe(self.originals[step])}, a view made at load"
            text = f"{text}  # {comment(what)}"
        self.lines.append("    " * indent + text)
        if step is not None:
            self.line_step[len(self.lines)] = step

    def list_updates(self, index: int, indent: int, step: int) -> None:
        if index in self.hoisted:
            return
        for j, item in self.dynamic_items.get(index, ()):
            self.emit(indent, f"{self.ref(index)}[{j}] = {self.ref(item)}", step)

    def kernel(self, n: int, step: KernelStep, indent: int) -> None:
        b = step.binding
        args = step.args
        converters = dict(b.convert)
        exprs: dict[int, str] = {}
        constant: dict[int, object] = {}  # converted at load, by position
        per_call = False  # a converter runs on every call
        for pos in (*b.positional, *(i for _, i in b.keywords)):
            vi = args[pos]
            self.list_updates(vi, indent, n)
            if pos in converters:
                if vi in self.values.locals or vi in self.params:
                    conv = f"f{n}_{pos}"
                    self.env[conv] = converters[pos]
                    exprs[pos] = f"{conv}({self.ref(vi)})"
                    per_call = True
                else:
                    try:
                        converted = converters[pos](self.values.objects[vi])
                    except PteError as exc:
                        raise type(exc)(f"method {self.name!r} instruction {n} ({step.name}) argument {pos}: "
                                        f"{exc.message}") from None
                    exprs[pos] = self.converted(converted, n, pos)
                    constant[pos] = converted
            else:
                exprs[pos] = self.ref(vi)
        # ATen out-variants called through torch's Python bindings where they reach the same overload (callforms.py).
        fast = None if per_call else python_binding(step, self.plan, self.values.objects, constant)
        fn_name = self.bind(kernel_name(step.name), fast or b.fn, n)
        # Outs of a kernel that sizes them itself, contiguous, need neither (a dim order other than contiguous does).
        sized = {t for pos in b.writes for t in self.values.list_items.get(args[pos], (args[pos],))
                 if b.sizes_outs and t not in self.values.dim_orders}
        for pos in b.writes:
            vi = args[pos]
            for target in self.values.list_items.get(vi, (vi,)):
                if target in self.values.dynamic and target not in sized:
                    self.emit(indent, f"{self.ref(target)}.resize_(0)", n)
        call_args = [exprs[p] for p in b.positional] + [f"{k}={exprs[p]}" for k, p in b.keywords]
        call = f"{fn_name}({', '.join(call_args)})"
        if b.result is not None:
            self.emit(indent, f"{self.target(args[b.result])} = {call}", n)
        else:
            self.emit(indent, call, n)
        for pos in b.writes:
            for target in self.values.list_items.get(args[pos], (args[pos],)):
                if target not in self.values.dynamic or target in sized:
                    continue
                order = self.values.dim_orders.get(target)
                if order is not None:
                    keep = self.helper("_keep_dim_order", _keep_dim_order)
                    self.emit(indent, f"{keep}({self.ref(target)}, {order!r})", n)
                else:
                    self.emit(indent, f"{self.helper('_keep_contiguous', _keep_contiguous)}({self.ref(target)})", n)

    def delegate(self, n: int, step: DelegateStep, indent: int) -> None:
        fn_name, list_name = self.bind(kernel_name(f"delegate::{step.name}"), step.fn, n), f"a{n}"
        self.env[list_name] = [None if (a in self.values.locals or a in self.params) else self.values.objects[a]
                               for a in step.args]
        for j, a in enumerate(step.args):
            if a in self.values.locals or a in self.params:
                self.emit(indent, f"{list_name}[{j}] = {self.ref(a)}", n)
        for a in step.args:
            self.list_updates(a, indent, n)
        self.emit(indent, f"{fn_name}({list_name})", n)
        for j, a in enumerate(step.args):
            if a in self.values.locals and not isinstance(self.values.objects[a], torch.Tensor):
                self.emit(indent, f"{self.target(a)} = {list_name}[{j}]", n)

    def move(self, n: int, step: MoveCall, indent: int) -> None:
        source = self.ref(step.source)
        self.emit(indent, f"{self.target(step.target)} = {source}", n)

    def jump(self, n: int, step: JumpFalseCall, indent: int) -> None:
        # Only in a block of a state machine (_state_machine), which it may leave: with profiling on, its events
        # are recorded before it does.
        if (trace := self.trace) is not None:
            self.emit(indent, "_s = _now()", n)
            self.traced(trace, n, indent)
        self.emit(indent, f"if not {self.helper('_truth', _truth)}({self.ref(step.condition)}):", n)
        self.emit(indent + 1, f"pc = {step.destination}")
        self.emit(indent + 1, "continue")

    def nothing(self, n: int, step: FreeCall | None, indent: int) -> None:
        pass  # a free (memory is released when nothing refers to it any more), or a step folded away at load

    def step(self, n: int, indent: int) -> None:
        """Instruction ``n``'s lines, as its kind writes them."""
        step = self.steps[n]
        self._emitters[type(step)](n, step, indent)

    def _timed(self, emit: Callable[[int, Any, int], None]) -> Callable[[int, Any, int], None]:
        """``emit``; with profiling on, its lines timed and followed by the call that records them."""
        trace = self.trace
        if trace is None:
            return emit

        def timed(n: int, step: Step, indent: int) -> None:
            self.emit(indent, "_s = _now()", n)
            emit(n, step, indent)
            self.traced(trace, n, indent)

        return timed

    def traced(self, trace: MethodTrace, n: int, indent: int) -> None:
        """The call recording instruction ``n``'s events, with the values it logs."""
        original = self.originals[n]
        recorder = self.bind(f"_r{n}", trace.recorder(n, self.steps[n], original), n)
        values = "".join(f", {self.ref(vi)}" for vi in trace.logged_values(original))
        self.emit(indent, f"{recorder}(_ev, _s, _now(){values})", n)

    def generate(self) -> GeneratedMethod:
        params = ", ".join(f"p{i}" for i in self.values.params)
        self.emit(1, f"def run({params}):")
        if self.trace is not None:
            self.env.update(_now=self.trace.now, _begin=self.trace.begin, _end=self.trace.end)
            self.emit(2, "_ev, _t0 = _begin()")
        jumps = [(n, s) for n, s in enumerate(self.steps) if isinstance(s, JumpFalseCall)]
        runs = []
        if not jumps:
            n = 0
            while n < len(self.steps):
                run = self.runs.at(n) if self.replays else []
                if run:
                    self._replay(run, 2)
                    runs.append(run)
                    n = run[-1] + 1
                else:
                    self.step(n, 2)
                    n += 1
        else:
            self.early.update(self.values.locals)  # blocks run in any order: every local starts defined
            self._state_machine(jumps)
        outputs = "".join(f"{self.ref(o)}, " for o in self.outputs)
        if self.trace is not None:
            self.emit(2, f"_end(_ev, _t0, ({outputs}))")
        self.emit(2, f"return ({outputs})")
        # Locals read before a step assigns them (a delegate's scalar outputs, passed in before it writes
        # them) start as their load-time object; these lines go right after the header.
        initial = [f"        v{index} = {self.constant(index)}" for index in sorted(self.early)]
        at = 2 if self.trace is not None else 1  # after the header (and the trace's start)
        self.lines[at:at] = initial
        self.line_step = {line + len(initial): step for line, step in self.line_step.items()}
        whole = len(runs) == 1 and not initial and all(
            step is None for n, step in enumerate(self.steps) if not runs[0][0] <= n <= runs[0][-1])
        return self._build(self.env[f"_replay{runs[0][0]}"] if whole else None)  # type: ignore[arg-type]

    def _replay(self, run: list[int], indent: int) -> None:
        """The steps of ``run`` in a Replay (replay.py): made again as one native call where they can be."""
        values = self.values
        made = {self.runs.view_made(k) for k in run} - {None}
        read: dict[int, None] = {}  # every value the steps read, in order
        positions: list[int] = []  # the values a native call takes anew each call, in the order it takes them
        checks: list[Callable[[], object]] = []
        for k in run:
            step = self.steps[k]
            per_call: tuple[int, ...] = ()
            if isinstance(step, KernelStep) and self.runs.native_step(k):
                replayed = step.binding.fn.replayed  # type: ignore[attr-defined]
                per_call = tuple(step.args[step.binding.positional[i]] for i in replayed)
                positions += per_call
            read.update((vi, None) for vi in self.runs.reads(k) if vi not in per_call)
        moving = [vi for vi in read if (vi in values.locals or vi in self.params) and vi not in made]
        # Planned and constant tensors keep their bytes, and their strides follow their sizes (the executor keeps a
        # resized one in its dim order), which change only for a dynamic one.
        fixed = {id(t): t for vi in read if vi in values.dynamic and vi not in moving and vi not in made
                 and isinstance(t := values.objects[vi], torch.Tensor)}
        lists: dict[int, int] = {}  # updated before the replay, which takes their items as its state
        for k in run:
            lists.update((vi, k) for vi in self.runs.reads(k) if vi in self.dynamic_items and vi not in lists)
        for vi, k in lists.items():
            self.list_updates(vi, indent, k)
        self.hoisted.update(lists)
        name = f"_replay{run[0]}"
        passed = ", ".join(self.ref(vi) for vi in moving)
        taken = ", ".join(self.ref(vi) for vi in positions)
        taken = f"({taken}{',' if len(positions) == 1 else ''})"
        self.emit(indent, f"if not {name}({taken}{', ' if passed else ''}{passed}):", run[0])
        self.emit(indent + 1, "try:", run[0])
        for n in range(run[0], run[-1] + 1):
            self.step(n, indent + 2)
        self.emit(indent + 2, f"{name}.keep({passed})", run[-1])
        self.emit(indent + 1, "finally:", run[-1])
        self.emit(indent + 2, f"{name}.stop()", run[-1])
        self.hoisted.difference_update(lists)
        for n in run:
            step = self.steps[n]
            if isinstance(step, KernelStep) and self.runs.native_step(n):
                checks.append(step.binding.fn.ran_natively)  # type: ignore[attr-defined]
            elif isinstance(step, DelegateStep):  # the arguments its list holds for the call
                checks.append(functools.partial(step.fn.ran_natively, self.env[f"a{n}"]))  # type: ignore[attr-defined]
        self.env[name] = Replay(tuple(fixed.values()), tuple(checks))

    def _state_machine(self, jumps: list[tuple[int, JumpFalseCall]]) -> None:
        end = len(self.steps)
        starts = {0}
        for n, jump in jumps:
            starts.add(jump.destination)
            starts.add(n + 1)
        starts = sorted(s for s in starts if s < end)
        self.emit(2, "pc = 0")
        self.emit(2, f"while pc != {end}:")
        for bi, start in enumerate(starts):
            stop = starts[bi + 1] if bi + 1 < len(starts) else end
            self.emit(3, f"{'if' if bi == 0 else 'elif'} pc == {start}:")
            for n in range(start, stop):
                self.step(n, 4)
            self.emit(4, f"pc = {stop}")
        self.emit(3, "else:")
        self.emit(4, "raise RuntimeError(f'jumped to instruction {pc}, which starts no block')")

    def _build(self, whole: Replay | None = None) -> GeneratedMethod:
        run, source, filename = make_function("method", self.name, self.lines, self.env, self.cache)
        lines = {line + 1: step for line, step in self.line_step.items()}  # +1: the header line
        replays = {int(name.removeprefix("_replay")): r for name, r in self.env.items() if isinstance(r, Replay)}
        return GeneratedMethod(run, source, lines, filename, replays, whole)


def generate_method(values: MethodValues, steps: Sequence[Step], plan: Plan, cache: LoadCache | None = None,
                   trace: MethodTrace | None = None, originals: Sequence[Step] = (),
                   replays: bool = False) -> GeneratedMethod:
    """The method's function; with ``trace``, its profiled form (``originals``: the steps before copies were
    folded into views, which say what each instruction logs). With ``replays`` (a CPU method, pterun's native
    kernels built), runs of steps that make native calls alone are made again as one call (replay.py)."""
    return _Generator(values, steps, plan, cache, trace, originals, replays).generate()
