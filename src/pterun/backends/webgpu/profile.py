"""A compiled program run node by node for a :class:`DelegateTracer`: one report per node, in order.

Made only when a method is loaded with profiling on (``WebGPUBackend.profiled``); ``execute`` is not
touched by it. It runs the same compiled program: same inputs, resizing, dispatches and outputs.

Timing. Where the device has WebGPU timestamp queries (Mesa's lavapipe has), each node is a compute
pass of its own whose beginning and end the GPU stamps, all recorded in one submission in execute's
order; the only difference from execute's single pass is that a pass ends between nodes. The stamps
(nanoseconds, by the queue's timestamp period) are put on the tracer's clock with two host readings,
taken just before the submission and once it is seen complete: the tracer's units per nanosecond are
measured over that window against ``time.perf_counter_ns``, and the last node's end is placed where
completion was seen. Stamps are made non-decreasing (WebGPU allows the odd out-of-order value).
Otherwise (no timestamp queries, the load option ``gpu_timestamps=False``, or a tracer whose ``now()``
is not a number, like CUDA events), each node is submitted alone and waited for, and timed with
``tracer.now()`` around its submission and completion: nodes then cannot overlap, and each time
includes a submission's host cost, so they add up to more than one execute.

Values (only when ``tracer.logs_values``): each node's tensor outputs are copied right after its pass,
before a later node can reuse their buffer, into a mappable buffer of the node's own, and read back
by outputs.py into tensors of the value's current sizes and its dtype as the blob declares it (the
exporter writes 64-bit values as 32-bit ones, and so they come back). SymInt outputs are not logged.

Names. ``debug_handle`` is the operator's ``node_id``: the delegate debug identifier ExecuTorch's Vulkan
preprocess generates and returns as the delegate's debug handle map (ETRecord's delegate map), or -1
when the blob's ids do not identify its operators (repeated: serialized without that map). ExecuTorch's
own Vulkan runtime passes no identifier (-1) and names its query pool's dispatches instead. ``name`` is
the operator; a fused node reports once, as e.g. ``silu_mul_fused(aten.sigmoid.default,
aten.mul.Tensor, aten.mul.Tensor)``, with the identifier of the operator whose output it computes.
"""

from __future__ import annotations

import numbers
import time

import numpy as np
import torch

from pterun.backends.interface import DelegateTracer
from pterun.backends.webgpu.graph import Graph
from pterun.backends.webgpu.outputs import TORCH_DTYPE, read_into, readback
from pterun.backends.webgpu.program import GpuProgram, record
from pterun.backends.webgpu.slots import TSlot

_QUERIES = 4096  # timestamp queries in one query set (wgpu allows no more)


def labels(graph: Graph) -> list[tuple[int, str]]:
    """(debug handle, name) of each operator of ``graph.chain``, as the tracer gets them."""
    ids = [op.node_id for op in graph.chain]
    identified = len(set(ids)) == len(ids)
    return [
        (op.node_id if identified else -1, f"{op.name}({', '.join(op.replaces)})" if op.replaces else op.name)
        for op in graph.chain
    ]


class _Stamps:
    """Two timestamp queries per node (its pass's beginning and end) and the buffers they resolve into."""

    def __init__(self, gpu, nodes: int) -> None:
        self.gpu = gpu
        count = 2 * nodes
        self.sets = [
            gpu.device.create_query_set(type="timestamp", count=min(_QUERIES, count - base))
            for base in range(0, count, _QUERIES)
        ]
        self.writes = [
            {
                "query_set": self.sets[2 * i // _QUERIES],
                "beginning_of_pass_write_index": 2 * i % _QUERIES,
                "end_of_pass_write_index": 2 * i % _QUERIES + 1,
            }
            for i in range(nodes)
        ]
        self.count = count
        self.resolved = gpu.buffer(8 * count, gpu.QUERY_RESOLVE, "timestamps")
        self.host = gpu.buffer(8 * count, gpu.READBACK, "timestamps-read")

    def record(self, encoder) -> None:
        for k, qs in enumerate(self.sets):
            # Each set resolves at a multiple of 8 * 4096 bytes: the 256-byte alignment WebGPU asks.
            encoder.resolve_query_set(qs, 0, qs.count, self.resolved, 8 * _QUERIES * k)
        encoder.copy_buffer_to_buffer(self.resolved, 0, self.host, 0, 8 * self.count)

    def read(self) -> np.ndarray:
        """The stamps in nanoseconds from the first, non-decreasing (waits for the submission)."""
        self.host.map_sync(self.gpu.wgpu.MapMode.READ)
        try:
            ticks = np.frombuffer(self.host.read_mapped(copy=True), np.uint64, self.count)
        finally:
            self.host.unmap()
        ns = (ticks - ticks[0]).view(np.int64).astype(np.float64) * self.gpu.timestamp_period
        return np.maximum.accumulate(ns)

    def release(self) -> None:
        for qs in self.sets:
            qs.destroy()
        self.resolved.destroy()
        self.host.destroy()


def on_clock(ns: np.ndarray, start, end, host_start: int, host_end: int) -> list:
    """GPU stamps (nanoseconds from the first) as times on the tracer's clock, which read ``start`` and
    ``end`` when ``time.perf_counter_ns`` read ``host_start`` and ``host_end``; the last stamp lands at
    ``end``, none before ``start``."""
    per_ns = (end - start) / (host_end - host_start) if host_end > host_start else 1.0
    last = ns[-1]
    times = [max(start, end - (last - t) * per_ns) for t in ns.tolist()]
    if isinstance(start, int) and isinstance(end, int):
        times = [round(t) for t in times]
    return times


class ProfiledRun:
    """``execute`` for one delegate with one tracer: the program's nodes timed (and logged) one by one."""

    def __init__(self, program: GpuProgram, tracer: DelegateTracer, *, gpu_timestamps: bool = True) -> None:
        gpu = program.gpu
        self.program = program
        self.gpu = gpu
        self.tracer = tracer
        chain = labels(program.graph)
        self.labels = [chain[node.index] for node in program.nodes]
        self.values = [self._values_of(node) for node in program.nodes] if tracer.logs_values else None
        nodes = len(program.nodes)
        numeric = isinstance(tracer.now(), numbers.Real)
        self.stamps = _Stamps(gpu, nodes) if gpu_timestamps and gpu.timestamps and numeric and nodes else None
        # Waiting for a node: a 4-byte copy into a mappable buffer, mapped once the copy is done.
        self._fence: tuple | None = None
        if self.stamps is None:
            self._fence = (gpu.buffer(4, gpu.STORAGE, "fence"), gpu.buffer(4, gpu.READBACK, "fence-read"))

    @property
    def uses_gpu_timestamps(self) -> bool:
        return self.stamps is not None

    def _values_of(self, node):
        """The node's tensor outputs: their readers and the buffer they are copied to; None if it has none."""
        slots = [slot for slot, _ in node.outputs if isinstance(slot, TSlot)]
        if not slots:
            return None
        handlers, buffer = readback(self.gpu, slots)
        return handlers, buffer

    def __call__(self, args: list) -> None:
        conversions = self.program.write_inputs(args)
        if self.stamps is not None:
            self._run_stamped(conversions, self.stamps)
        else:
            self._run_waited(conversions)
        self.program.read_outputs(args)

    def _logged(self, i: int) -> tuple | None:
        """Node ``i``'s logged outputs (their readers and buffer), or None when it logs none."""
        return self.values[i] if self.values is not None else None

    def _copy_values(self, encoder, i: int) -> None:
        logged = self._logged(i)
        if logged is not None:
            handlers, buffer = logged
            for out in handlers:
                out.record(encoder, buffer)

    def _read_values(self, i: int) -> list[torch.Tensor]:
        logged = self._logged(i)
        if logged is None:
            return []
        handlers, buffer = logged
        tensors = [torch.empty(0, dtype=TORCH_DTYPE[out.slot.dtype]) for out in handlers]
        read_into(self.gpu, buffer, handlers, tensors)
        return tensors

    def _report(self, i: int, start, end, outputs) -> None:
        handle, name = self.labels[i]
        self.tracer.node(start, end, debug_handle=handle, name=name, outputs=outputs)

    def _run_stamped(self, conversions: list, stamps: _Stamps) -> None:
        program, tracer = self.program, self.tracer
        encoder = self.gpu.device.create_command_encoder()
        count = 0
        if conversions:
            cpass = encoder.begin_compute_pass()
            count += record(cpass, conversions)
            cpass.end()
        for i, node in enumerate(program.nodes):
            cpass = encoder.begin_compute_pass(timestamp_writes=stamps.writes[i])
            count += record(cpass, node.dispatches)
            cpass.end()
            self._copy_values(encoder, i)
        stamps.record(encoder)
        program.record_outputs(encoder)
        start, host_start = tracer.now(), time.perf_counter_ns()
        self.gpu.queue.submit([encoder.finish()])
        ns = stamps.read()
        host_end, end = time.perf_counter_ns(), tracer.now()
        program.dispatch_count = count
        times = on_clock(ns, start, end, host_start, host_end)
        for i in range(len(program.nodes)):
            self._report(i, times[2 * i], times[2 * i + 1], self._read_values(i))

    def _run_waited(self, conversions: list) -> None:
        program, tracer, device = self.program, self.tracer, self.gpu.device
        count = 0
        if conversions:
            encoder = device.create_command_encoder()
            cpass = encoder.begin_compute_pass()
            count += record(cpass, conversions)
            cpass.end()
            self._submit_and_wait(encoder)
        for i, node in enumerate(program.nodes):
            encoder = device.create_command_encoder()
            cpass = encoder.begin_compute_pass()
            count += record(cpass, node.dispatches)
            cpass.end()
            start = tracer.now()
            self._submit_and_wait(encoder)
            end = tracer.now()
            outputs = []
            if self._logged(i) is not None:
                encoder = device.create_command_encoder()
                self._copy_values(encoder, i)
                self.gpu.queue.submit([encoder.finish()])
                outputs = self._read_values(i)
            self._report(i, start, end, outputs)
        encoder = device.create_command_encoder()
        program.record_outputs(encoder)
        self.gpu.queue.submit([encoder.finish()])
        program.dispatch_count = count

    def _submit_and_wait(self, encoder) -> None:
        assert self._fence is not None, "without GPU timestamps, each node is waited for with the fence"
        source, fence = self._fence
        encoder.copy_buffer_to_buffer(source, 0, fence, 0, 4)
        self.gpu.queue.submit([encoder.finish()])
        fence.map_sync(self.gpu.wgpu.MapMode.READ)
        fence.unmap()

    def release(self) -> None:
        buffers = [entry[1] for entry in self.values or () if entry is not None]
        buffers.extend(self._fence or ())
        for b in buffers:
            b.destroy()
        if self.stamps is not None:
            self.stamps.release()
