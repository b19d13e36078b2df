"""Method: load resolves everything once; execute is one call of a compiled function.

Load (``Method.__init__``), in ExecuTorch's order:

1. allocate the method's arenas, each from the allocator registered for the
   device the plan tags it with (or the device the program was loaded for);
2. make every value: planned tensors view their arena at the planned offset
   (so aliasing and in-place updates behave as planned), constants view the
   file's bytes, initial values of mutable buffers are copied in;
3. initialize delegates, then resolve every operator to a kernel;
4. check every call's arguments (arguments.py) and that no step writes a
   constant (effects.py), then turn copies into views (fold.py);
5. compile the instruction chain into one Python function (codegen.py).

Everything is built in locals and only kept once all of it succeeded, so a
failed load leaves nothing behind and other methods are untouched.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from pterun.backends import BackendInitContext, CompileSpec
from pterun.core.device import Device, DeviceType
from pterun.core.dtype import name as dtype_name
from pterun.core.dtype import storage_dtype
from pterun.core.layout import is_contiguous_order, strides_for
from pterun.errors import (
    Internal, InvalidArgument, InvalidExternalData, InvalidState, NotFound, NotSupported, PteError,
)
from pterun.executor.arguments import check_arguments
from pterun.executor.codegen import DelegateStep, KernelStep, MethodValues, compile_method, failing_step
from pterun.executor.compiled import CompiledFunction
from pterun.executor.effects import MethodEffects, check_writes, delegate_writes, written_inputs
from pterun.executor.fold import elide_view_copies, fold_constant_views
from pterun.executor.functional import Unsupported as FunctionalUnsupported
from pterun.executor.functional import functional_method
from pterun.executor.graphs import CudaGraphRunner
from pterun.executor.inputs import input_sequence
from pterun.executor.meta import MethodMeta, value_kind
from pterun.executor.precision import Precision
from pterun.executor.tensors import check_external_layout, from_bytes, shaped
from pterun.format import (
    DelegateCall, Dynamism, JumpFalseCall, Kind, KernelCall, ListValue, MoveCall, Plan, Scalar, TensorSpec,
)
from pterun.memory.pointer import device_memory_kind

if TYPE_CHECKING:
    from pterun.executor.program import Program

# Operators whose kernels read tensor values on the host (so a CUDA graph cannot hold them).
_HOST_SYNCING = frozenset({
    "aten::_local_scalar_dense", "aten::_local_scalar_dense.default", "aten::nonzero.out", "aten::masked_select.out",
    "aten::unique_consecutive.out", "aten::_unique2.out", "aten::unique_dim.out",
})


class Method:
    """A loaded method of a program."""

    def __init__(self, program: "Program", plan: Plan) -> None:
        self._program = program
        self._plan = plan
        self.name = plan.name
        self._meta = MethodMeta(plan)
        where = f"method {plan.name!r}"

        arenas = [None] + [self._arena(plan, memory_id) for memory_id in range(1, len(plan.buffer_sizes))]
        objects, params, scratch = self._values(plan, arenas)
        handles, delegate_fns = self._delegates(plan)
        try:
            steps, locals_ = self._steps(plan, delegate_fns)
            # Every call gets values of the kinds it takes (arguments.py); what every step writes and
            # reads, and nothing may write a constant (effects.py).
            check_arguments(plan, steps)
            effects = MethodEffects(plan, steps, delegate_writes(plan, handles, objects))
            check_writes(plan, steps, effects)
            constants = {i for i, v in enumerate(plan.values) if isinstance(v, TensorSpec) and v.is_constant}
            steps = fold_constant_views(plan, steps, objects, constants, locals_, effects)
            steps, views = elide_view_copies(plan, steps, objects, locals_, {vi for vi in params if vi in plan.inputs},
                                             effects)
            locals_ |= views
        except BaseException:
            self._destroy_delegates(handles)
            raise

        # Unplanned inputs alias the caller's tensors; unplanned outputs get buffers, unless an
        # instruction computes them (a view of another tensor).
        params_in = [vi for vi in params if vi in plan.inputs]
        outputs_unplanned = [vi for vi in params if vi not in plan.inputs and vi not in locals_]
        list_items = {
            i: v.items for i, v in enumerate(plan.values)
            if isinstance(v, ListValue) and v.kind in (Kind.INT_LIST, Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST)
        }
        dynamic = {i for i, v in enumerate(plan.values)
                   if isinstance(v, TensorSpec) and v.dynamism == Dynamism.DYNAMIC_BOUND}
        dim_orders = {i: plan.values[i].dim_order for i in dynamic
                      if not is_contiguous_order(plan.values[i].dim_order)}
        values = MethodValues(objects, params_in + outputs_unplanned, locals_ - set(params_in), dynamic, list_items,
                              dim_orders)
        try:
            self._compiled = compile_method(values, steps, plan.outputs, plan.name)
        except BaseException:
            self._destroy_delegates(handles)
            raise
        run = self._compiled.run
        self._compile_status = "off"
        self._compiled_function: CompiledFunction | None = None
        if program.compile:
            try:
                device = (program.device or Device()).torch
                functional, self.functional_source = functional_method(plan, steps, objects, device, constants)
            except FunctionalUnsupported as reason:
                self._compile_status = f"not compiled: {reason}"
            else:
                # Every tensor input is passed in; nothing is copied into planned memory and the
                # function returns its results, so no output needs a buffer.
                params_in = [vi for vi in plan.inputs if isinstance(plan.values[vi], TensorSpec)]
                outputs_unplanned = []
                values.params = params_in
                self._functional = functional
                run = self._compiled_function = CompiledFunction(
                    functional, dynamic=any(vi in dynamic for vi in params_in))

        # Everything succeeded: keep it.
        self.written_inputs = written_inputs(plan, effects)  # inputs the method updates in place
        self._arenas = arenas
        self._scratch = scratch
        self._objects = objects
        self._handles = handles
        self._binders = [self._input_binder(i, vi, objects, params_in) for i, vi in enumerate(plan.inputs)]
        self._args: list[Any] = [None] * len(values.params)
        self._input_set = [False] * len(plan.inputs)
        self._out_specs = [(k + len(params_in), plan.values[vi]) for k, vi in enumerate(outputs_unplanned)]
        self._out_buffers: list[torch.Tensor | None] = [None] * len(outputs_unplanned)
        self._handed_out = [False] * len(outputs_unplanned)
        self._caller_bound = [False] * len(outputs_unplanned)
        self._out_slot = {pos: outputs_unplanned.index(vi) for pos, vi in enumerate(plan.outputs)
                          if vi in outputs_unplanned}
        self._outputs: tuple | None = None
        self._run = run
        # Outputs the method does not plan belong to the caller once handed out (see get_outputs).
        self._owned = {pos for pos, vi in enumerate(plan.outputs)
                       if isinstance(plan.values[vi], TensorSpec) and not plan.values[vi].is_memory_planned}
        self._where = where
        self._precision = Precision(tf32=program.allow_tf32)
        self._graph = self._graph_runner(plan, steps)
        dynamic_inputs = [vi for vi in plan.inputs
                          if isinstance(plan.values[vi], TensorSpec) and vi in dynamic]
        # The graph is keyed by the input shapes; a method whose inputs cannot change shape needs no key.
        self._shape_tensors = [objects[vi] for vi in dynamic_inputs if vi not in params_in]
        self._shape_args = bool(dynamic_inputs)
        self._init_calls()

    # -- load ------------------------------------------------------------------

    def _device_for(self, device_type: int, device_index: int) -> Device:
        override = self._program.device
        if override is not None:
            return override
        return Device(DeviceType(device_type), device_index)

    def _arena(self, plan: Plan, memory_id: int):
        device = self._device_for(*plan.arena_device(memory_id))
        size = plan.buffer_sizes[memory_id]
        allocators = self._program.registries.allocators
        try:
            return allocators.allocate(size, device)
        except PteError as exc:
            raise type(exc)(
                f"method {plan.name!r}: cannot allocate planned buffer {memory_id - 1} "
                f"({size} bytes) on device {device}: {exc.message}"
            ) from None

    def _values(self, plan: Plan, arenas) -> tuple[list, list[int], list]:
        program = self._program
        objects: list[Any] = [None] * len(plan.values)
        params: list[int] = []
        scratch: list = []
        inputs, outputs = set(plan.inputs), set(plan.outputs)
        for i, value in enumerate(plan.values):
            where = f"method {plan.name!r} value {i}"
            if isinstance(value, TensorSpec):
                device = self._device_for(value.device_type, value.device_index)
                if value.memory_id is not None:
                    arena = arenas[value.memory_id]
                    tensor = shaped(arena.view(value.memory_offset, value.nbytes), value)
                    if value.external:
                        entry = program.external_entry(value.fqn, where, planned=True)
                        check_external_layout(value.fqn, entry.layout, value)
                        if len(entry.data) < value.nbytes:
                            raise InvalidExternalData(
                                f"{where}: tensor {value.fqn!r} needs {value.nbytes} bytes; "
                                f"the data file holds {len(entry.data)}"
                            )
                        tensor.view(-1).copy_(from_bytes(entry.data[: value.nbytes], value).view(-1))
                    elif value.data_buffer_idx > 0:
                        data = program.file.mutable_initial_value(value.data_buffer_idx, value.nbytes)
                        tensor.view(-1).copy_(from_bytes(data, value).view(-1))
                    objects[i] = tensor
                elif value.external:
                    objects[i] = program.constant(value, where, device)
                elif value.data_buffer_idx > 0:
                    objects[i] = program.constant(value, where, device)
                elif i in inputs or i in outputs:
                    params.append(i)
                else:
                    # Unplanned and no input or output: something (a view, a delegate) fills it
                    # in at run time; give it memory of its own in case a writer needs it.
                    buffer = program.registries.allocators.allocate(value.nbytes, device)
                    scratch.append(buffer)
                    objects[i] = shaped(buffer.view(0, value.nbytes), value)
            elif isinstance(value, Scalar):
                objects[i] = value.value
            elif value.kind in (Kind.DOUBLE_LIST, Kind.BOOL_LIST):
                objects[i] = list(value.items)
        for i, value in enumerate(plan.values):
            if isinstance(value, ListValue) and value.kind in (Kind.INT_LIST, Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST):
                objects[i] = [None if item == -1 else objects[item] for item in value.items]
        return objects, params, scratch

    def _delegates(self, plan: Plan) -> tuple[list, list]:
        program = self._program
        handles, fns = [], []
        try:
            for d in plan.delegates:
                where = f"method {plan.name!r} delegate {d.backend_id!r}"
                backend = program.registries.backends.get(d.backend_id)
                if not backend.is_available():
                    raise NotFound(f"{where}: backend {d.backend_id!r} is not available on this machine")
                blob = program.file.delegate_data(d.inline, d.index)
                context = BackendInitContext(
                    method_name=plan.name,
                    named_data=program.named_data,
                    runtime_specs=program.backend_options.get(d.backend_id, {}),
                    device=(program.device or Device()).torch,
                    load_program=program.load_nested,
                )
                specs = tuple(CompileSpec(k, v) for k, v in d.compile_specs)
                handle = backend.init(context, blob, specs)
                handles.append((backend, handle))
                fns.append(functools.partial(backend.execute, handle))
        except NotFound as exc:
            self._destroy_delegates(handles)
            if "is not registered" in exc.message:
                raise NotFound(f"method {plan.name!r}: {exc.message}") from None
            raise
        except BaseException:
            self._destroy_delegates(handles)
            raise
        return handles, fns

    @staticmethod
    def _destroy_delegates(handles) -> None:
        for backend, handle in handles:
            try:
                backend.destroy(handle)
            except Exception:  # noqa: BLE001 - destroy must not mask the error being raised
                pass

    def _steps(self, plan: Plan, delegate_fns) -> tuple[list, set[int]]:
        kernels = self._program.registries.kernels
        device_type = (self._program.device or Device()).type
        factories = {}
        missing = []
        for op_name, overload in plan.operators:
            full = f"{op_name}.{overload}" if overload else op_name
            try:
                factories[(op_name, overload)] = (full, kernels.lookup(full, device_type))
            except PteError:
                missing.append(full)
        if missing:
            from pterun.errors import OperatorMissing

            detail = kernels._missing_message(missing[0]) if len(missing) == 1 else ", ".join(missing)
            raise OperatorMissing(
                f"method {plan.name!r} needs {len(missing)} operator(s) with no kernel: {detail}"
            )
        steps: list = []
        locals_: set[int] = set()
        for ins in plan.instructions:
            if isinstance(ins, KernelCall):
                full, factory = factories[plan.operators[ins.op_index]]
                binding = factory(len(ins.args))
                if binding.result is not None:
                    locals_.add(ins.args[binding.result])
                steps.append(KernelStep(full, binding, ins.args))
            elif isinstance(ins, DelegateCall):
                d = plan.delegates[ins.delegate_index]
                # A delegate returns scalars (symbolic sizes) by replacing them in its argument list;
                # they are read back after the call.
                locals_.update(a for a in ins.args if isinstance(plan.values[a], Scalar)
                               and plan.values[a].kind in (Kind.INT, Kind.DOUBLE, Kind.BOOL))
                steps.append(DelegateStep(d.backend_id, delegate_fns[ins.delegate_index], ins.args))
            else:
                if isinstance(ins, MoveCall):
                    locals_.add(ins.target)
                steps.append(ins)
        return steps, locals_

    # -- inputs ------------------------------------------------------------------

    def _input_binder(self, index: int, vi: int, objects: list, params_in: list[int]):
        value = self._plan.values[vi]
        where = f"method {self._plan.name!r} input {index}"
        if isinstance(value, TensorSpec):
            expected_dtype = storage_dtype(value.scalar_type)
            rank = len(value.sizes)
            bound = value.numel
            static = value.dynamism == Dynamism.STATIC
            dim_order = value.dim_order
            if vi in params_in:
                slot = params_in.index(vi)
                tagged = self._device_for(value.device_type, value.device_index)
                expected_device = tagged.torch
                check_memory = value.device_type == DeviceType.CUDA
                target = None
            else:
                slot = None
                target = objects[vi]
                expected_device = target.device
                tagged, check_memory = None, False

            def bind(x, copy_inputs: bool, args: list) -> None:
                if not isinstance(x, torch.Tensor):
                    raise InvalidArgument(f"{where}: expected a Tensor, got {type(x).__name__}")
                if x.dtype != expected_dtype:
                    raise InvalidArgument(
                        f"{where}: expected a {dtype_name(value.scalar_type)} tensor, got {x.dtype}"
                    )
                if x.device != expected_device and not (
                    expected_device.type == x.device.type and expected_device.index is None
                ):
                    if not copy_inputs:
                        raise InvalidArgument(
                            f"{where}: expected a tensor on {expected_device}, got one on {x.device} "
                            f"(pass copy_inputs=True to have it copied)"
                        )
                    if x.is_meta:
                        raise InvalidArgument(f"{where}: got a tensor on the meta device, which has no data to copy")
                    x = x.to(expected_device)
                if x.layout is not _STRIDED:
                    raise InvalidArgument(
                        f"{where}: expected a dense (strided) tensor, got a {str(x.layout).removeprefix('torch.')} one"
                    )
                if x.requires_grad:
                    # Inputs are data, as in ExecuTorch. Copying a tensor that requires grad into a
                    # planned input would record autograd history on the arena view for good (outputs
                    # aliasing it would come back requiring grad, and the method would keep the
                    # caller's graph alive); an unplanned input would hand that history to outputs.
                    x = x.detach()
                try:
                    shape = tuple(x.shape)
                except RuntimeError:
                    # A nested tensor of strided layout has no single shape (torch refuses to say one).
                    if x.is_nested:
                        raise InvalidArgument(f"{where}: expected a dense tensor, got a nested tensor") from None
                    raise
                if shape != value.sizes:
                    if len(shape) != rank:
                        raise NotSupported(f"{where}: expected {rank} dimensions, got shape {list(shape)}")
                    if static:
                        raise NotSupported(
                            f"{where}: expected shape {list(value.sizes)} (static), got {list(shape)}"
                        )
                    numel = 1
                    for s in shape:
                        numel *= s
                    if numel > bound:
                        raise NotSupported(
                            f"{where}: shape {list(shape)} has {numel} elements, more than the "
                            f"{bound} of its upper bound {list(value.sizes)}"
                        )
                if slot is not None:
                    if check_memory:
                        self._check_memory(x, tagged, where)
                    args[slot] = x
                else:
                    if tuple(target.shape) != shape:
                        target.as_strided_(shape, strides_for(shape, dim_order))
                    target.copy_(x)

            return bind

        kind = value_kind(value)

        def bind_scalar(x, copy_inputs: bool, args: list) -> None:
            expected = value.value if isinstance(value, Scalar) else None
            if kind == Kind.NULL:
                if x is not None:
                    raise InvalidArgument(f"{where}: expected None, got {type(x).__name__}")
            elif kind == Kind.BOOL:
                if not isinstance(x, bool) or x != expected:
                    raise InvalidArgument(f"{where}: the program was exported with {expected!r}; got {x!r}")
            elif kind == Kind.INT:
                if isinstance(x, bool) or not isinstance(x, int) or x != expected:
                    raise InvalidArgument(f"{where}: the program was exported with {expected!r}; got {x!r}")
            elif kind == Kind.DOUBLE:
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not _close(float(x), expected):
                    raise InvalidArgument(f"{where}: the program was exported with {expected!r}; got {x!r}")
            elif kind == Kind.STRING:
                if x != expected:
                    raise InvalidArgument(f"{where}: the program was exported with {expected!r}; got {x!r}")
            else:
                raise InvalidArgument(f"{where}: inputs of kind {kind.name} cannot be set")

        return bind_scalar

    def set_inputs(self, inputs: Sequence, *, copy_inputs: bool = False) -> None:
        """Sets every input (a step of a call; see :meth:`execute` and docs/threads.md)."""
        if type(inputs) is not list and type(inputs) is not tuple:
            inputs = input_sequence(inputs, f"{self._where}: set_inputs", one_tensor=False)
        with self._locked("set inputs"):
            self._claim("set inputs")
            self._bind_inputs(inputs, copy_inputs)

    def _bind_inputs(self, inputs: Sequence, copy_inputs: bool) -> None:
        n = len(self._binders)
        if len(inputs) != n:
            raise InvalidArgument(f"{self._where}: takes {n} inputs, got {len(inputs)}")
        args = self._args
        for i, (bind, x) in enumerate(zip(self._binders, inputs)):
            self._input_set[i] = False
            bind(x, copy_inputs, args)
            self._input_set[i] = True

    def set_input(self, value, index: int, *, copy_inputs: bool = False) -> None:
        with self._locked("set an input"):
            self._claim("set an input")
            if not 0 <= index < len(self._binders):
                raise InvalidArgument(
                    f"{self._where}: input {index} does not exist; it has {len(self._binders)} inputs"
                )
            self._input_set[index] = False
            self._binders[index](value, copy_inputs, self._args)
            self._input_set[index] = True

    # -- outputs -----------------------------------------------------------------

    def _prepare_outputs(self) -> None:
        """Gives every unplanned output a buffer, replacing those handed to a caller. All or nothing:
        if one allocation fails, no buffer changes and the next call starts over."""
        fresh = {}
        for k, (_, spec) in enumerate(self._out_specs):
            if not self._caller_bound[k] and (self._out_buffers[k] is None or self._handed_out[k]):
                fresh[k] = self._output_buffer(spec, k)
        for k, tensor in fresh.items():
            self._out_buffers[k] = tensor
            self._handed_out[k] = False
            self._args[self._out_specs[k][0]] = tensor

    def set_output(self, index: int, tensor: torch.Tensor) -> None:
        """Makes ``tensor`` the memory of unplanned output ``index`` (ExecuTorch's set_output_data_ptr).

        The method writes that output there, resizing it within its upper bound, until another
        tensor is set. Planned outputs have memory already: setting one is ``InvalidState``.
        """
        with self._locked("set an output"):
            self._check_free("set an output")
            self._set_output(index, tensor)

    def _set_output(self, index: int, tensor: torch.Tensor) -> None:
        k = self._out_slot.get(index)
        if k is None:
            if not 0 <= index < len(self._plan.outputs):
                raise InvalidArgument(f"{self._where}: output {index} does not exist")
            raise InvalidState(f"{self._where}: output {index} is memory-planned or not a tensor; it needs no memory")
        spec = self._out_specs[k][1]
        where = f"{self._where} output {index}"
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != storage_dtype(spec.scalar_type):
            raise InvalidArgument(f"{where}: expected a {dtype_name(spec.scalar_type)} tensor, got {tensor!r:.60}")
        capacity = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
        if capacity < spec.nbytes:
            raise InvalidArgument(f"{where}: needs {spec.nbytes} bytes; the tensor given has {capacity}")
        device = self._device_for(spec.device_type, spec.device_index)
        self._check_memory(tensor, device, where)
        self._out_buffers[k] = tensor
        self._caller_bound[k] = True
        self._handed_out[k] = False
        self._args[self._out_specs[k][0]] = tensor

    def _check_memory(self, tensor: torch.Tensor, device: Device, where: str) -> None:
        # A tensor torch calls a CUDA tensor may still sit on host memory (a lying wrapper, a
        # third-party allocator); ask the driver once, when the memory is bound.
        if device.type == DeviceType.CUDA and tensor.is_cuda and tensor.numel():
            kind = device_memory_kind(tensor.data_ptr())
            if kind not in ("device", "managed"):
                raise InvalidArgument(
                    f"{where}: the program places it on {device}, but its memory at 0x{tensor.data_ptr():x} "
                    f"is {kind} memory, not device memory"
                )

    def _output_buffer(self, spec: TensorSpec, k: int) -> torch.Tensor:
        device = self._device_for(spec.device_type, spec.device_index)
        if spec.nbytes == 0:
            # Zero bytes need no memory on any device, and no allocator is asked.
            on = device.torch if device.is_cpu or torch.cuda.is_available() else torch.device("cpu")
            return shaped(torch.empty(0, dtype=torch.uint8, device=on), spec)
        buffer = self._program.registries.allocators.allocate(spec.nbytes, device)
        tensor = shaped(buffer.view(0, spec.nbytes), spec)
        position = next(pos for pos, slot in self._out_slot.items() if slot == k)
        self._check_memory(tensor, device, f"{self._where} output {position}")
        return tensor

    # -- execute -----------------------------------------------------------------

    def _graph_runner(self, plan: Plan, steps) -> CudaGraphRunner | None:
        device = self._program.device
        if device is None or device.type != DeviceType.CUDA or not self._program.cuda_graphs:
            return None
        # Host synchronization cannot be captured: control flow reads conditions, and these
        # operators read tensor values into Python numbers.
        if any(isinstance(s, JumpFalseCall) for s in steps):
            return None
        if any(isinstance(s, KernelStep) and s.name in _HOST_SYNCING for s in steps):
            return None
        return CudaGraphRunner(self._run, device.torch)

    def run(self) -> None:
        """Executes the method with the inputs set; outputs are read with :meth:`get_outputs`."""
        with self._locked("run"):
            self._check_free("run")
            self._stepper = None
            self._execute_plan()

    def _execute_plan(self) -> None:
        if False in self._input_set:
            raise InvalidArgument(f"{self._where}: input {self._input_set.index(False)} has not been set")
        if self._out_specs:
            self._prepare_outputs()
        self._ran_by = _get_ident()
        self._busy = True
        try:
            with self._precision, torch.inference_mode():
                if self._graph is None:
                    self._outputs = self._run(*self._args)
                else:
                    key = None
                    if self._shape_args:
                        key = (tuple(a.shape for a in self._args if isinstance(a, torch.Tensor)),
                               tuple(t.shape for t in self._shape_tensors))
                    self._outputs = self._graph(self._args, key)
        except Exception as exc:  # noqa: BLE001 - translated into a PteError naming the instruction
            self._outputs = None
            raise self._translate(exc) from exc
        finally:
            self._busy = False

    def get_outputs(self, clone_outputs: bool = True) -> list:
        """The outputs of this thread's last run (copies unless ``clone_outputs=False``)."""
        with self._locked("get its outputs"):
            if self._outputs is not None and self._ran_by != _get_ident():
                raise self._not_yours()
            return self._collect_outputs(clone_outputs)

    def _collect_outputs(self, clone_outputs: bool) -> list:
        if self._outputs is None:
            raise InvalidState(f"{self._where}: has not been executed")
        if clone_outputs:
            return [o.clone() if isinstance(o, torch.Tensor) else _plain(o) for o in self._outputs]
        if self._graph is not None and self._graph.replaying and self._owned:
            # A captured graph writes the same buffers on every replay: the caller gets copies.
            return [o.clone() if i in self._owned else (o if isinstance(o, torch.Tensor) else _plain(o))
                    for i, o in enumerate(self._outputs)]
        if self._out_specs:
            # The caller now owns these buffers; the next call gets new ones.
            for k in range(len(self._out_buffers)):
                self._handed_out[k] = True
        return [o if isinstance(o, torch.Tensor) else _plain(o) for o in self._outputs]

    def execute(self, inputs: Sequence = (), *, clone_outputs: bool = True, copy_inputs: bool = False) -> list:
        """Sets the inputs, runs, and returns the outputs (copies unless ``clone_outputs=False``).

        ``inputs`` is a list (any sequence) of values, or one tensor for a method of one input. The
        whole call holds the method's lock, so threads sharing a method take turns (docs/threads.md).
        """
        if type(inputs) is not list and type(inputs) is not tuple:
            inputs = input_sequence(inputs, f"{self._where}: execute", one_tensor=True)
        if self._busy and self._ran_by == _get_ident():
            raise self._reentered("execute")
        with self._lock:
            if self._stepper is not None:
                self._check_free("execute")
                self._stepper = None
            self._bind_inputs(inputs, copy_inputs)
            self._execute_plan()
            return self._collect_outputs(clone_outputs)

    __call__ = execute

    # -- calls from several threads ------------------------------------------------
    #
    # A method has one set of planned memory, so one call at a time can use it. execute() holds the
    # method's lock for the whole call (inputs, run, outputs): threads sharing a method take turns and
    # never see each other's values. The step-by-step calls each hold the lock too, but a sequence of
    # them cannot be made atomic, so the method remembers which thread is half-way through one and
    # refuses calls that would mix into it (InvalidState naming both threads), rather than wait for a
    # sequence that may never end:
    # - from a thread's first set_input(s) to its run(), other threads cannot set inputs, set an output,
    #   run or execute;
    # - get_outputs() returns the outputs of the calling thread's own last run or execute; when another
    #   thread has run the method since, those are gone, and it is refused.
    # A call from inside the method's own execution (a kernel or delegate calling back) is refused too:
    # it would overwrite the memory the running call uses.

    def _init_calls(self) -> None:
        self._lock = threading.Lock()
        self._busy = False  # inside the compiled function, run by thread self._ran_by
        self._stepper: threading.Thread | None = None  # the thread between its set_input(s) and run
        self._ran_by: int | None = None  # the ident of the thread whose run produced the outputs

    def _locked(self, what: str) -> threading.Lock:
        # Checked before waiting for the lock: the thread running the method holds it.
        if self._busy and self._ran_by == _get_ident():
            raise self._reentered(what)
        return self._lock

    def _claim(self, what: str) -> None:
        """Under the lock: the calling thread begins or continues setting inputs."""
        stepper = self._stepper
        if stepper is None or stepper.ident != _get_ident():
            if stepper is not None and stepper.is_alive():
                raise self._interleaved(stepper, what)
            self._stepper = threading.current_thread()

    def _check_free(self, what: str) -> None:
        """Under the lock: no other thread is half-way through setting inputs."""
        stepper = self._stepper
        if stepper is not None and stepper.ident != _get_ident():
            if stepper.is_alive():
                raise self._interleaved(stepper, what)
            self._stepper = None  # a thread that ended half-way: what it set is abandoned

    def _interleaved(self, stepper: threading.Thread, what: str) -> InvalidState:
        return InvalidState(
            f"{self._where}: {_thread(stepper)} has set inputs and not run yet; {_thread()} cannot {what} "
            f"until it has. Step-by-step calls (set_inputs, run, get_outputs) from several threads cannot be "
            f"mixed: use execute(), which is atomic, or one method per thread "
            f"(program.load_method(name, cached=False))"
        )

    def _not_yours(self) -> InvalidState:
        ran_by = next((t for t in threading.enumerate() if t.ident == self._ran_by), None)
        who = _thread(ran_by) if ran_by is not None else f"a thread that has ended (id {self._ran_by})"
        return InvalidState(
            f"{self._where}: its outputs are from a call by {who}; {_thread()} has not run it since "
            f"(another thread's call came between this thread's run and get_outputs, or it never ran). "
            f"Use execute(), which is atomic, or one method per thread (program.load_method(name, cached=False))"
        )

    def _reentered(self, what: str) -> InvalidState:
        return InvalidState(
            f"{self._where}: cannot {what} from inside its own execution (a kernel or delegate calling back "
            f"into the method would overwrite the memory the running call uses)"
        )

    def _translate(self, exc: Exception) -> PteError:
        step = failing_step(self._compiled, exc.__traceback__)
        if step is None:
            where = self._where
        else:
            ins = self._plan.instructions[step]
            if isinstance(ins, KernelCall):
                op, overload = self._plan.operators[ins.op_index]
                what = f"{op}.{overload}" if overload else op
            elif isinstance(ins, DelegateCall):
                what = f"delegate {self._plan.delegates[ins.delegate_index].backend_id}"
            else:
                what = type(ins).__name__
            where = f"{self._where} instruction {step} ({what})"
        if isinstance(exc, PteError):
            return type(exc)(f"{where}: {exc.message}")
        if isinstance(exc, (RuntimeError, ValueError, TypeError, IndexError)):
            message = str(exc).split("\n")[0]
            if "not resizable" in message:
                message = "a result needs more memory than its planned upper bound"
            return InvalidArgument(f"{where}: {message}")
        return Internal(f"{where}: {type(exc).__name__}: {exc}")

    # -- introspection -----------------------------------------------------------

    @property
    def compile_status(self) -> str:
        """With ``compile=True``: "compiled", or "not compiled: <why>" (it then runs as plain Python)."""
        if self._compiled_function is not None:
            return self._compiled_function.status
        return self._compile_status

    @property
    def metadata(self) -> MethodMeta:
        return self._meta

    def method_meta(self) -> MethodMeta:
        return self._meta

    @property
    def source(self) -> str:
        """The Python the method was compiled into."""
        return self._compiled.source

    def get_attribute(self, name: str) -> torch.Tensor:
        for i, value in enumerate(self._plan.values):
            if isinstance(value, TensorSpec) and value.fqn == name:
                obj = self._objects[i]
                if obj is None:
                    break
                return obj
        raise NotFound(f"{self._where}: has no attribute named {name!r}")

    def __del__(self) -> None:
        handles = getattr(self, "_handles", None)
        if handles:
            self._destroy_delegates(handles)

    def __repr__(self) -> str:
        return f"Method({self.name!r})"


def _close(a: float, b: float) -> bool:
    import math

    if math.isnan(a) and math.isnan(b):
        return True
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-4 + abs(1e-5 * b)


def _plain(value):
    return list(value) if isinstance(value, list) else value



_STRIDED = torch.strided
_get_ident = threading.get_ident

def _thread(thread: threading.Thread | None = None) -> str:
    thread = thread or threading.current_thread()
    return f"thread {thread.name!r} (id {thread.ident})"
