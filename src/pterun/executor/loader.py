"""Loading a method, in ExecuTorch's order; each phase returns what it made.

0. its delegates checked (load/delegates.py): registered, trusted when they load native code, their blobs
   accepted by their backends, available here; before anything is allocated;
1. memory and values (load/values.py): arenas, planned tensors, constants;
2. delegates, initialized (load/delegates.py), then every operator resolved to a kernel (load/steps.py);
3. checks: every call's arguments are of the kinds its kernel takes (load/arguments.py), and no step writes
   a constant (load/effects.py);
4. the passes (load/passes.py), chosen per form: copies become views (every form), then for the method's
   own code decomposed chains one fused call each and start positions kept on the device, for the
   functional form only the chains with a functional kernel, for the traced form nothing more;
5. code generation (codegen/): the own code's steps as one Python function (generate.py), and with
   ``compile=True`` the functional form's as a pure function for ``torch.compile`` (functional.py,
   torch_compile.py);
6. what a call needs (call/): a binder per input, a slot per unplanned output, and on CUDA a graph runner.

Everything is built in locals and returned only once all of it succeeded, so
a failed load leaves nothing behind (its delegates are destroyed) and other
methods are untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pterun import native
from pterun.core.device import DeviceType
from pterun.core.layout import is_contiguous_order
from pterun.executor.call.binders import Binder, scalar_binder, tensor_binder
from pterun.executor.call.graphs import CudaGraphRunner
from pterun.executor.call.outputs import OutputSlot
from pterun.executor.call.precision import Precision, Unpinned
from pterun.executor.codegen.functional import Unsupported, functional_method
from pterun.executor.codegen.generate import GeneratedMethod, MethodValues, generate_method
from pterun.executor.codegen.torch_compile import CompiledFunction
from pterun.executor.context import LoadContext
from pterun.executor.etdump import MethodTrace
from pterun.executor.load import passes
from pterun.executor.load.arguments import check_arguments
from pterun.executor.load.delegates import Delegates, check_delegates
from pterun.executor.load.effects import MethodEffects, check_writes, delegate_writes, written_inputs
from pterun.executor.load.passes import Form, Load, Stage
from pterun.executor.load.steps import build_steps
from pterun.executor.load.values import Values, make_values
from pterun.format import Dynamism, Kind, ListValue, Plan, TensorSpec, Value


@dataclass
class LoadedMethod:
    values: Values
    objects: list  # every value's object, copies folded into views
    delegates: Delegates
    steps: list  # the own code's steps
    generated: GeneratedMethod  # the method's own code, which errors are mapped back to
    run: Callable  # what a call runs: the generated code, or the functional form compiled by torch.compile
    compiled_function: CompiledFunction | None  # compile=True and the method has a functional form
    compile_status: str  # "off", or why the method has no functional form
    functional_source: str | None
    arguments: int  # how many arguments ``run`` takes
    binders: list[Binder]  # per input
    outputs: list[OutputSlot]  # per unplanned output the method gives a buffer
    slot_of: dict[int, OutputSlot]  # output position -> its slot
    written_inputs: frozenset[int]  # inputs the method updates in place
    graph: CudaGraphRunner | None
    owned: frozenset[int]  # output positions the method does not plan: the caller's once handed out
    precision: Precision  # the switches a call runs under
    trace: MethodTrace | None = None  # profiling on: what the traced function records (etdump.py)


def load_method(context: LoadContext, plan: Plan) -> LoadedMethod:
    check_delegates(context, plan)
    values = make_values(context, plan)
    delegates = Delegates(context, plan)
    try:
        return _load(context, plan, values, delegates)
    except BaseException:
        delegates.destroy()
        raise


def _load(context: LoadContext, plan: Plan, values: Values, delegates: Delegates) -> LoadedMethod:
    steps, assigned = build_steps(plan, context.registries.kernels, context.run_device.type, delegates.functions(plan))
    # Profiling (ETDump): every instruction of the file runs (no fused chains), each delegate reports its nodes
    # where its backend can, and the method runs its traced function, never a graph or a compiled form.
    trace = context.options.trace.method(plan.name, context.run_device) if context.options.trace is not None else None
    if trace is not None:
        steps = delegates.profiled(plan, steps, trace)
    check_arguments(plan, steps)
    effects = MethodEffects(plan, steps, delegate_writes(plan, delegates.handles, values.objects))
    check_writes(plan, steps, effects)

    constants = frozenset(i for i, v in enumerate(plan.values) if isinstance(v, TensorSpec) and v.is_constant)
    params_in = [vi for vi in values.unplanned if vi in plan.inputs]
    load = Load(context, plan, effects, params_in)
    checked = Stage(steps, values.objects, constants, assigned, effects)
    folded = passes.run(passes.FOLDS, load, checked)
    own = passes.run(passes.passes(Form.TRACED if trace is not None else Form.OWN_CODE, context), load, folded)
    objects, computed = folded.objects, own.computed  # passes after the folds assign values, never replace objects

    # Unplanned inputs alias the caller's tensors; unplanned outputs get buffers, unless an instruction
    # computes them (a view of another tensor).
    outputs_unplanned = [vi for vi in values.unplanned if vi not in plan.inputs and vi not in computed]
    bounded = {i: v for i, v in enumerate(plan.values)
               if isinstance(v, TensorSpec) and v.dynamism == Dynamism.DYNAMIC_BOUND}
    dynamic = set(bounded)
    code = MethodValues(
        objects, params_in + outputs_unplanned, computed - set(params_in), dynamic,
        {i: v.items for i, v in enumerate(plan.values) if isinstance(v, ListValue)
         and v.kind in (Kind.INT_LIST, Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST)},
        {i: v.dim_order for i, v in bounded.items() if not is_contiguous_order(v.dim_order)},
    )
    replays = context.run_device.type == DeviceType.CPU and native.kernels is not None
    generated = generate_method(code, own.steps, plan, context.options.cache, trace, checked.steps, replays)
    run, compiled_function, status, functional_source = generated.run, None, "off", None
    written = written_inputs(plan, effects)
    raced = False  # compile=True: its graphs are captured both ways and the faster kept (call/graphs.py)
    if context.options.compile and trace is not None:
        status = "not compiled: profiling (ETDump) is on, which times every instruction"
    elif context.options.compile and not plan.instructions:
        # A language model's metadata methods: tracing one cost a runner's load with compile=True a second apiece.
        status = "not compiled: the method has no instruction, only values it returns"
    elif context.options.compile:
        pure = passes.run(passes.passes(Form.FUNCTIONAL, context), load, folded)
        try:
            form = functional_method(plan, pure.steps, pure.effects, objects, context.run_device.torch,
                                     pure.constants)
        except Unsupported as reason:
            status = f"not compiled: {reason}"
        else:
            # Every tensor input is passed in; nothing is copied into planned memory and the function
            # returns its results, so no output needs a buffer.
            tensor_inputs = [vi for vi in plan.inputs if isinstance(plan.values[vi], TensorSpec)]
            plain = None  # uncompiled calls run the generated code, unless it writes outputs the caller provides
            if not outputs_unplanned:
                plain = _plain_call(plan, generated.run, tensor_inputs, params_in, objects)
            params_in, outputs_unplanned = tensor_inputs, []
            functional_source = form.source
            # Compiled code calling delegates names them by tokens of this process: the load cache keeps none.
            run = compiled_function = CompiledFunction(form.run, dynamic=any(vi in dynamic for vi in params_in),
                                                       plain=plain, source=form.source,
                                                       cache=None if form.delegates else context.options.cache)
            # Timing a graph replays it: only where a replay changes nothing a later call reads. A delegate's
            # backend may keep state of its own.
            raced = plain is not None and not form.keeps_state and not form.delegates and not written

    where = f"method {plan.name!r}"
    binders = [_binder(context, plan, i, vi, objects, params_in) for i, vi in enumerate(plan.inputs)]
    output_position: dict[int, int] = {}
    for pos, vi in enumerate(plan.outputs):
        output_position.setdefault(vi, pos)
    slots = [_output_slot(context, plan.values[vi], len(params_in) + k, f"{where} output {output_position[vi]}")
             for k, vi in enumerate(outputs_unplanned)]
    dynamic_inputs = [vi for vi in plan.inputs if isinstance(plan.values[vi], TensorSpec) and vi in dynamic]
    return LoadedMethod(
        values, objects, delegates, own.steps, generated, run, compiled_function, status, functional_source,
        arguments=len(params_in) + len(outputs_unplanned),
        binders=binders,
        outputs=slots,
        slot_of={pos: slots[outputs_unplanned.index(vi)] for pos, vi in enumerate(plan.outputs)
                 if vi in outputs_unplanned},
        written_inputs=written,
        # The graph is keyed by the input shapes; a method whose inputs cannot change shape needs no key.
        graph=(_graph_runner(context, own, effects, run, [objects[vi] for vi in dynamic_inputs if vi not in params_in],
                             bool(dynamic_inputs), compiled_function, raced)
               if trace is None else None),
        owned=frozenset(pos for pos, vi in enumerate(plan.outputs)
                        if isinstance(value := plan.values[vi], TensorSpec) and not value.is_memory_planned),
        precision=_precision(context, delegates, generated, run),
        trace=trace,
    )


def _precision(context: LoadContext, delegates: Delegates, generated: GeneratedMethod, run: Callable) -> Precision:
    """The precision a call pins around the method's code; nothing where that code is one replay, which pins it
    around its steps alone (a replayed call makes native calls only, which no switch changes)."""
    precision = Precision(tf32=context.options.allow_tf32, host=context.run_device.type == DeviceType.CPU
                          and all(backend.cpu_kernels_only for backend, _ in delegates.handles))
    if generated.whole is None or run is not generated.run:
        return precision
    generated.whole.around = precision
    return Unpinned(tf32=precision.tf32, host=precision.host)


def _plain_call(plan: Plan, run: Callable, tensor_inputs: list[int], params_in: list[int], objects: list) -> Callable:
    """The generated code ``run`` called as the functional form is: with every tensor input as an argument (planned
    ones copied into their memory, as a call without compile=True binds them), returning the outputs."""
    steps: list[tuple[int, int | Binder]] = []  # per input: the generated code's argument, or what copies it
    for k, vi in enumerate(tensor_inputs):
        spec = plan.values[vi]
        assert isinstance(spec, TensorSpec), "tensor inputs only"
        where = f"method {plan.name!r} input {plan.inputs.index(vi)}"
        steps.append((k, params_in.index(vi) if vi in params_in else tensor_binder(spec, where, target=objects[vi])))
    arguments: list = [None] * len(params_in)

    def call(*args):
        for k, step in steps:
            if type(step) is int:
                arguments[step] = args[k]
            else:
                step(args[k], False, arguments)
        return run(*arguments)

    return call


def _output_slot(context: LoadContext, spec: Value, argument: int, where: str) -> OutputSlot:
    # Unplanned values were made for tensors only (load/values.py).
    assert isinstance(spec, TensorSpec), f"{where}: an unplanned output is a tensor"
    return OutputSlot(spec, argument, context.device_for(spec.device_type, spec.device_index), where)


def _binder(context: LoadContext, plan: Plan, index: int, vi: int, objects: list, params_in: list[int]) -> Binder:
    value = plan.values[vi]
    where = f"method {plan.name!r} input {index}"
    if not isinstance(value, TensorSpec):
        return scalar_binder(value, where)
    if vi in params_in:
        device = context.device_for(value.device_type, value.device_index)
        return tensor_binder(value, where, argument=params_in.index(vi), device=device)
    return tensor_binder(value, where, target=objects[vi])


def _graph_runner(context: LoadContext, own: Stage, checked: MethodEffects, run: Callable, shape_tensors: list,
                  keyed: bool, compiled: CompiledFunction | None, raced: bool) -> CudaGraphRunner | None:
    """``checked``: the effects of the steps as built, which decide for a compiled method. ``raced``: the compiled
    code's graphs are timed against the plain code's."""
    device = context.options.device
    if device is None or device.type != DeviceType.CUDA or not context.options.cuda_graphs:
        return None
    # Host synchronization cannot be captured: control flow reads conditions, and some kernels read
    # tensor values into Python numbers.
    if (own.effects if compiled is None else checked).syncs:
        return None
    if compiled is None:
        return CudaGraphRunner(run, device.torch, shape_tensors, keyed)
    rival = (compiled.uncompiled, compiled.keep_plain) if raced else (None, None)
    return CudaGraphRunner(run, device.torch, shape_tensors, keyed, compiled.compiles, compiled.replayed, *rival)
