"""A VkGraph compiled for one WebGPU device: nodes, memory, bind groups, resizing and execution.

Compiling walks the operator chain once; each operator's builder (``ops/``,
through builder.py) declares the node's outputs, dependencies and dispatches.
Then memory is planned (memory.py: tensors with disjoint lifetimes share a
buffer; views share their source's storage), and every pipeline and bind group
is made. Nothing is compiled or allocated after that.

Execution: inputs are written straight from the caller's tensors into their
buffers (inputs.py), the nodes hooked on inputs whose shape changed are
resized, all dispatches go into one compute pass, and outputs come back
through one mappable buffer (outputs.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping

from pterun.backends.webgpu import constants, memory
from pterun.backends.webgpu.binding import ParamBlocks, bind
from pterun.backends.webgpu.builder import Builder, NodeBuilder
from pterun.backends.webgpu.device import Gpu
from pterun.backends.webgpu.graph import Graph, Op, SymInt, TensorValue
from pterun.backends.webgpu.inputs import SymIntInput, TensorInput
from pterun.backends.webgpu.node import Dispatch, Node
from pterun.backends.webgpu.outputs import read_into, readback
from pterun.backends.webgpu.slots import INPUT, Slots, SSlot, TSlot, check_dtype, new_tensor
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument, InvalidProgram

# What a builder raises on a graph whose arguments do not fit its operators' schemas (a damaged or
# foreign blob).
_MALFORMED = (ArithmeticError, AttributeError, IndexError, KeyError, TypeError, ValueError)


class GpuProgram:
    def __init__(
        self, gpu: Gpu, graph: Graph, constant: Callable[[int], memoryview], builders: Mapping[str, Builder]
    ) -> None:
        self.gpu = gpu
        self.graph = graph
        self.slots = Slots(
            graph,
            lambda tv, vid: constants.upload(gpu, constant(tv.constant_id), tv, vid),
            lambda tv, vid: constants.upload_bytes(gpu, constant(tv.constant_id), tv, vid),
        )
        self.nodes: list[Node] = []
        self.hooks: dict[int, list[Node]] = defaultdict(list)
        self._stale = False
        self.dispatch_count = 0  # dispatches recorded by the last execute

        _check_supported(graph, builders, gpu.max_binding)
        self.inputs = [self._define_input(vid) for vid in graph.inputs]
        # SymInt inputs have no value until the first call; nodes whose shapes follow from one keep
        # their serialized (upper-bound) shapes until then, and the first call resizes everything.
        unknown = {slot.vid for slot in self.inputs if isinstance(slot, SSlot)}
        for index, op in enumerate(graph.chain):
            self._build(index, op, builders, unknown)
        self.outputs = [self._output(vid) for vid in graph.outputs]
        self._allocate()
        self._bind()

    # -- compiling -------------------------------------------------------------------

    def _define_input(self, vid: int) -> TSlot | SSlot:
        v = self.graph.values[vid]
        if isinstance(v, SymInt):
            slot = SSlot(vid)
        elif isinstance(v, TensorValue):
            slot = new_tensor(vid, v, INPUT)
        else:
            raise DelegateInvalidCompatibility(f"graph input {vid} is a {type(v).__name__}")
        self.slots.define(vid, slot)
        return slot

    def _build(self, index: int, op: Op, builders: Mapping[str, Builder], unknown: set[int]) -> None:
        b = NodeBuilder(self.graph, self.slots, op, index)
        try:
            builders[op.name](b, op)
            node = b.finish()
            self.nodes.append(node)
            for vid in node.deps:
                self.hooks[vid].append(node)
            if node.deps & unknown:
                unknown.update(slot.vid for slot, _ in node.outputs)
                self._stale = True
            else:
                node.refresh(initial=True)
        except _MALFORMED as exc:
            raise InvalidProgram(
                f"operator {index} ({op.name}): malformed arguments ({type(exc).__name__}: {exc})"
            ) from None

    def _output(self, vid: int) -> TSlot | SSlot:
        slot = self.slots.by_vid.get(vid)
        if slot is None and isinstance(self.graph.values[vid], TensorValue):
            slot = self.slots.tensor(vid)
        if slot is None:
            raise InvalidProgram(f"graph output {vid} is never computed")
        return slot

    def _allocate(self) -> None:
        lives = memory.lifetimes(self.nodes, self.outputs)
        plan = memory.plan(list(lives.values()))
        buffers = [self.gpu.buffer(size, self.gpu.STORAGE, f"t{i}") for i, size in enumerate(plan.sizes)]
        for storage, p in zip(lives, plan.buffer_of, strict=True):
            storage.buffer = buffers[p]
        self.planned_bytes = sum(max(16, size) for size in plan.sizes)
        # Inputs have buffers of their own (the caller writes them while the graph's memory is reused).
        self._input_handlers = []
        self._tensor_inputs = []
        for k, slot in enumerate(self.inputs):
            if isinstance(slot, TSlot):
                handler = TensorInput(self.gpu, slot, self.slots.host_values.get(slot.vid))
                self._tensor_inputs.append((k, handler))
            else:
                handler = SymIntInput(slot)
            self._input_handlers.append(handler)

    def _bind(self) -> None:
        gpu = self.gpu
        self.dispatches = [d for node in self.nodes for d in node.dispatches]
        self._params = ParamBlocks(gpu, len(self.dispatches))
        for i, d in enumerate(self.dispatches):
            d.block = self._params.block(i)
            d.block[: len(d.words)] = d.words
            bind(gpu, d, self._params, i)
        self._params.upload()
        self._outputs, self._readback = readback(gpu, self.outputs)

    # -- resizing --------------------------------------------------------------------

    def _propagate(self, dirty: set[int]) -> None:
        pending: set[int] = set()
        for vid in dirty:
            pending.update(id(n) for n in self.hooks.get(vid, ()))
        if not pending:
            return
        try:
            for node in self.nodes:
                if id(node) in pending:
                    for vid in node.refresh():
                        pending.update(id(n) for n in self.hooks.get(vid, ()))
        except BaseException:
            self._stale = True
            raise
        self._params.upload()

    def _refresh_all(self) -> None:
        for node in self.nodes:
            node.refresh()
        self._params.upload()
        self._stale = False

    # -- execution -------------------------------------------------------------------

    def written_arguments(self, count: int) -> range:
        """The arguments execute writes: the outputs, which follow the inputs (inputs are only read)."""
        n_in, n_out = len(self.inputs), len(self.outputs)
        if count != n_in + n_out:
            raise InvalidProgram(
                f"VulkanBackend: the delegate takes {n_in} inputs and {n_out} outputs; the call passes {count} values"
            )
        return range(n_in, n_in + n_out)

    def execute(self, args: list) -> None:
        conversions = self.write_inputs(args)
        self._submit(conversions)
        self.read_outputs(args)

    def write_inputs(self, args: list) -> list[Dispatch]:
        """Takes the inputs' shapes (resizing the graph) and writes their values; returns the dispatches
        that convert inputs the GPU holds in another type, to run before the graph's."""
        n_in = len(self.inputs)
        if len(args) != n_in + len(self.outputs):
            raise InvalidArgument(
                f"VulkanBackend: the delegate takes {n_in} inputs and {len(self.outputs)} outputs, "
                f"got {len(args)} values"
            )
        dirty: set[int] = set()
        for handler, x in zip(self._input_handlers, args, strict=False):
            handler.bind(x, dirty)
        if self._stale:
            self._refresh_all()
        elif dirty:
            self._propagate(dirty)
        conversions = []
        for k, handler in self._tensor_inputs:
            d = handler.write(args[k])
            if d is not None:
                conversions.append(d)
        return conversions

    def _submit(self, conversions: list) -> None:
        """Records the input conversions and every dispatch in one compute pass, then the output copies."""
        encoder = self.gpu.device.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        count = record(cpass, conversions) + record(cpass, self.dispatches)
        cpass.end()
        self.record_outputs(encoder)
        self.gpu.queue.submit([encoder.finish()])
        self.dispatch_count = count

    def record_outputs(self, encoder) -> None:
        """Records the copies of the graph's outputs into the readback buffer (after every dispatch)."""
        for out in self._outputs:
            out.record(encoder, self._readback)

    def read_outputs(self, args: list) -> None:
        """Reads the outputs into ``args`` (waiting for the submission that recorded their copies)."""
        read_into(self.gpu, self._readback, self._outputs, args, len(self.inputs))

    # -- introspection ---------------------------------------------------------------

    @property
    def op_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def release(self) -> None:
        """Frees the GPU memory now rather than when the garbage collector gets to it."""
        buffers = {
            id(b): b
            for b in (
                *(s.storage.buffer for s in self.slots.tensors()),
                *(b for _, h in self._tensor_inputs for b in h.buffers()),
                self._params.buffer,
                self._readback,
            )
            if b is not None
        }
        for b in buffers.values():
            b.destroy()
        self.slots.by_vid.clear()
        self.slots.scratch.clear()
        self.slots.packed.clear()
        self.nodes.clear()
        self.dispatches = []
        self._tensor_inputs.clear()


def record(cpass, dispatches) -> int:
    """Records ``dispatches`` into a compute pass (those with nothing to do this call are left out);
    returns how many were recorded.

    WebGPU has no reusable compute command buffers (render bundles are for render passes alone), so a
    call records its pass anew; every pipeline, bind group and grid is made before, and the commands go
    straight to wgpu-native (a pipeline set again only when it changes), past wgpu-py's per-call wrappers
    that cost ten times the command itself. A command the pass rejects fails when the pass ends, which
    goes through wgpu-py and raises."""
    native = _native_pass(cpass)
    if native is None:
        return _record_checked(cpass, dispatches)
    handle, (set_pipeline, set_bind_group, dispatch, null) = native
    count = 0
    last = None
    for d in dispatches:
        x, y, z = d.current
        if x:
            pipeline = d.pipeline._internal
            if pipeline != last:
                set_pipeline(handle, pipeline)
                last = pipeline
            set_bind_group(handle, 0, d.bind_group._internal, 0, null)
            dispatch(handle, x, y, z)
            count += 1
    return count


def _record_checked(cpass, dispatches) -> int:
    count = 0
    for d in dispatches:
        x, y, z = d.current
        if x:
            cpass.set_pipeline(d.pipeline)
            cpass.set_bind_group(0, d.bind_group)
            cpass.dispatch_workgroups(x, y, z)
            count += 1
    return count


def _native_pass(cpass):
    """(the pass's wgpu-native handle, the three commands and NULL), or None where wgpu-py's layout is
    another (then the checked methods record)."""
    global _NATIVE
    if _NATIVE is None:
        try:
            from wgpu.backends.wgpu_native._ffi import ffi, lib

            _NATIVE = (lib.wgpuComputePassEncoderSetPipeline, lib.wgpuComputePassEncoderSetBindGroup,
                       lib.wgpuComputePassEncoderDispatchWorkgroups, ffi.NULL)
        except (ImportError, AttributeError):
            _NATIVE = ()
    handle = getattr(cpass, "_internal", None)
    return (handle, _NATIVE) if _NATIVE and handle is not None else None


_NATIVE: tuple | None = None


def _check_supported(graph: Graph, builders: Mapping[str, Builder], max_binding: int) -> None:
    unsupported = sorted({op.name for op in graph.chain if op.name not in builders})
    if unsupported:
        raise DelegateInvalidCompatibility(
            f"unsupported op: {unsupported[0]}"
            + (f" (and {', '.join(unsupported[1:])})" if len(unsupported) > 1 else "")
        )
    for vid, value in enumerate(graph.values):
        if isinstance(value, TensorValue):
            check_dtype(value.dtype, vid)
            nbytes = 4 * math.prod(value.dims)
            if nbytes > max_binding:
                raise DelegateInvalidCompatibility(
                    f"tensor {vid} {list(value.dims)} needs {nbytes} bytes; this device binds at most "
                    f"{max_binding} bytes per tensor"
                )
