"""ETDump: what a program loaded with ``enable_etdump=True`` records, as ExecuTorch's runtime records it.

A program's :class:`ProgramTrace` holds its blocks of events and the debug
buffer; each method has a :class:`MethodTrace`, which its traced function
(codegen/generate.py, generated only for such programs) calls around every instruction.
The events and their order are ExecuTorch's:

* loading a method: ``Method::init`` inside ``Program::load_method``, in the
  "Default" block (or the block last written, as ExecuTorch does);
* each execution: an "Execute" block; per instruction, the values it wrote
  (debug events, with a debug buffer), then the kernel's own event
  (``native_call_<op>.<overload>``; ``<ns>::<op>.<overload>`` for kernels
  ExecuTorch registers by hand in a library, none for its prim ops), then
  ``OPERATOR_CALL``; a delegate's own events (pterun's XNNPACK and WebGPU
  backends report one per node), its arguments, then ``DELEGATE_CALL``;
  ``MOVE_CALL``, ``JF_CALL`` and ``FREE_CALL`` for the format's instructions;
  then ``Method::execute`` and the method's outputs.

Times are nanoseconds of the host's monotonic clock; on a CUDA device they come
from CUDA events recorded on the stream, placed on the host clock at the run's
start, so a span is the GPU's time for the instruction.

A debug buffer that fills up does not stop the run: the values that do not fit
are left out of the dump and the call raises ``MemoryAllocationFailed`` once its
outputs are computed (ExecuTorch's runtime aborts the process instead).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import torch

from pterun.core.device import Device, DeviceType
from pterun.core.dtype import code_of
from pterun.core.layout import CHANNELS_LAST_4D, strides_for
from pterun.errors import InvalidArgument, InvalidState, MemoryAllocationFailed
from pterun.executor.load.steps import DelegateStep, KernelStep, Step
from pterun.format.etdump import DebugEvent, LoggedValue, ProfileEvent, RunBlock, TensorEntry, write_etdump
from pterun.kernels import prim

# Namespaces whose kernels ExecuTorch registers through EXECUTORCH_LIBRARY, which names their event in full.
LIBRARY_NAMESPACES = ("llama::",)
ALIGNMENT = 64  # where each logged tensor starts in the debug buffer, as ExecuTorch aligns it

def kernel_event_name(op: str) -> str | None:
    """The event ExecuTorch's kernel for ``op`` records inside ``OPERATOR_CALL``, or None."""
    if op in prim.NAMES:  # registered by hand in ExecuTorch (kernels/prim_ops): no event of their own
        return None
    if op.startswith(LIBRARY_NAMESPACES):
        return op
    return "native_call_" + op.split("::", 1)[-1]


def logged_positions(step: KernelStep) -> tuple[int, ...]:
    """The argument positions whose values ExecuTorch's kernel logs: its out arguments, else its result."""
    if kernel_event_name(step.name) is None:
        return ()
    b = step.binding
    if b.writes:
        return tuple(b.writes)
    if b.result is not None:
        return (b.result,)
    return tuple(b.mutates)


class _HostClock:
    def now(self) -> int:
        return time.perf_counter_ns()

    def start(self) -> None:
        pass

    def resolve(self, stamp) -> int:
        return stamp


class _CudaClock:
    """Timestamps from CUDA events on the current stream, placed on the host clock at the run's start."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.events: list = []
        self.used = 0
        self.origin: torch.cuda.Event | None = None
        self.origin_ns = 0
        self.stream: torch.cuda.Stream | None = None

    def start(self) -> None:
        self.used = 0
        self.stream = torch.cuda.current_stream(self.device)
        self.origin = self.now()
        self.origin_ns = time.perf_counter_ns()

    def now(self):
        if self.used == len(self.events):
            self.events.append(torch.cuda.Event(enable_timing=True))
        event = self.events[self.used]
        self.used += 1
        event.record(self.stream if self.stream is not None else torch.cuda.current_stream(self.device))
        return event

    def resolve(self, stamp) -> int:
        origin = self.origin
        assert origin is not None, "a stamp is resolved once the run that made it has started"
        if stamp is origin:
            return self.origin_ns
        stamp.synchronize()
        return self.origin_ns + round(origin.elapsed_time(stamp) * 1e6)


class ProgramTrace:
    """One program's ETDump: its blocks of events and its debug buffer (``debug_buffer_size`` bytes; 0: no
    values are logged)."""

    def __init__(self, debug_buffer_size: int = 0) -> None:
        if debug_buffer_size < 0:
            raise InvalidArgument(f"debug_buffer_size must be 0 or more bytes, got {debug_buffer_size}")
        self.lock = threading.Lock()
        self.blocks: list[RunBlock] = []
        self.debug = torch.zeros(debug_buffer_size, dtype=torch.uint8) if debug_buffer_size else None
        self.cursor = 0

    @property
    def logs_values(self) -> bool:
        return self.debug is not None

    def loaded(self, start: int, init_start: int, end: int) -> None:
        """A method was loaded: its ``Program::load_method`` and ``Method::init`` spans."""
        with self.lock:
            if not self.blocks:
                self.blocks.append(RunBlock("Default"))
            self.blocks[-1].events += [ProfileEvent("Method::init", init_start, end, instruction=0),
                                       ProfileEvent("Program::load_method", start, end, instruction=0)]

    def log(self, value, *, dense: bool = False) -> LoggedValue | None:
        """``value`` as a debug event logs it, its tensors copied into the debug buffer; None when it is not
        a value ExecuTorch logs or does not fit (``overflow`` then says how many bytes were missing).

        A tensor's bytes keep its memory's order (a channels-last tensor's strides say so), as ExecuTorch's
        runtime logs them; ``dense`` writes them in the order of its sizes instead, which is how ExecuTorch's
        Inspector reads every tensor (it ignores strides)."""
        if isinstance(value, torch.Tensor):
            return self._tensor(value, dense)
        if isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
            entries = [self._tensor(v, dense) for v in value]
            logged = tuple(e for e in entries if e is not None)
            return logged if len(logged) == len(entries) else None
        return None

    def _tensor(self, t: torch.Tensor, dense: bool = False) -> TensorEntry | None:
        code, debug = code_of(t.dtype), self.debug
        if code is None or debug is None:
            return None
        sizes = tuple(t.shape)
        if (not dense and t.dim() == 4 and not t.is_contiguous()
                and t.is_contiguous(memory_format=torch.channels_last)):
            strides = strides_for(sizes, CHANNELS_LAST_4D)
        else:
            strides = strides_for(sizes, range(t.dim()))
        nbytes = t.numel() * t.element_size()
        with self.lock:
            offset = -(-self.cursor // ALIGNMENT) * ALIGNMENT
            if offset + nbytes > len(debug):
                _overflow.needed = getattr(_overflow, "needed", 0) + nbytes
                return None
            self.cursor = offset + nbytes
        if nbytes:
            target = debug[offset: offset + nbytes].view(t.dtype).as_strided(sizes, strides)
            target.copy_(t)
        return TensorEntry(code, sizes, strides, offset)

    def write(self, etdump_path: str, debug_buffer_path: str | None = None) -> bool:
        """Writes the events recorded since the last write (and the debug buffer), then starts afresh.

        Returns False, writing nothing, when nothing was recorded (ExecuTorch's bindings do the same)."""
        with self.lock:
            blocks, self.blocks = self.blocks, []
            debug, self.cursor = self.debug, 0
            if not blocks:
                return False
            data = write_etdump(blocks)
            debug_bytes = bytes(debug.numpy()) if debug is not None and debug_buffer_path is not None else None
        with open(etdump_path, "wb") as f:
            f.write(data)
        if debug_bytes is not None and debug_buffer_path is not None:
            with open(debug_buffer_path, "wb") as f:
                f.write(debug_bytes)
        return True

    def method(self, name: str, device: Device) -> MethodTrace:
        return MethodTrace(self, name, device)


_overflow = threading.local()  # bytes of values that did not fit in the debug buffer, in this thread's run


class MethodTrace:
    """What one method's traced function records into its program's trace."""

    def __init__(self, program: ProgramTrace, name: str, device: Device) -> None:
        self.program = program
        self.name = name
        self.clock = _CudaClock(device.torch) if device.type == DeviceType.CUDA else _HostClock()
        self.now = self.clock.now
        self.current: list | None = None  # the events of the run in progress
        self.missing = 0  # bytes of the last run's values that did not fit in the debug buffer

    @property
    def logs_values(self) -> bool:
        return self.program.logs_values

    def begin(self):
        """Starts a run: its event list and its start time."""
        _overflow.needed = 0
        self.clock.start()
        events = self.current = []
        return events, self.clock.now()

    def end(self, events: list, start, outputs: Sequence) -> None:
        """Ends a run: ``Method::execute``, the outputs logged, the block added to the program's."""
        end = self.clock.now()
        resolve = self.clock.resolve
        block = RunBlock("Execute")
        for e in events:
            if type(e) is tuple:  # an instruction's spans, as its recorder keeps them: (names, n, start, end)
                names, n, first, last = e
                first, last = resolve(first), resolve(last)
                block.events += [ProfileEvent(name, first, last, chain=0, instruction=n) for name in names]
                continue
            if isinstance(e, ProfileEvent):
                e = ProfileEvent(e.name, resolve(e.start), resolve(e.end), e.chain, e.instruction, e.delegate_id,
                                 e.delegate_name, e.metadata)
            block.events.append(e)
        block.events.append(ProfileEvent("Method::execute", resolve(start), resolve(end), instruction=0))
        if self.logs_values:
            for value in outputs:
                logged = self.program.log(value)
                if logged is not None:
                    block.events.append(DebugEvent(logged, chain=-1, instruction=0, output=True))
        self.current = None
        with self.program.lock:
            self.program.blocks.append(block)
        self.missing = getattr(_overflow, "needed", 0)

    def check(self) -> None:
        """Raises when the last run's values did not all fit in the debug buffer (its outputs are kept)."""
        debug = self.program.debug
        if self.missing and debug is not None:
            missing, self.missing = self.missing, 0
            raise MemoryAllocationFailed(
                f"the debug buffer of {len(debug)} bytes is full: {missing} bytes of intermediate "
                f"values were not logged; load the program with a larger debug_buffer_size (the call's outputs "
                f"were computed and get_outputs() returns them; the ETDump keeps the values that fit)")

    # -- what the traced function calls, made once per instruction at load --------------------------------

    def recorder(self, n: int, step: Step, original: Step) -> Callable:
        """The function the traced code calls after instruction ``n``: ``(events, start, end, *values)``.

        ``original`` is the instruction's step before copies were folded into views, which says what its
        kernel logs; ``values`` are those values (with a debug buffer; nothing otherwise)."""
        log = self.program.log if self.logs_values else None
        if isinstance(original, KernelStep):
            inner = kernel_event_name(original.name)
            names = ((inner,) if inner is not None else ()) + (original.event,)
        else:
            names = (original.event,) if original is not None else ()

        def record(events: list, start, end, *values) -> None:
            if log is not None:
                for value in values:
                    logged = log(value)
                    if logged is not None:
                        events.append(DebugEvent(logged, chain=0, instruction=n))
            events.append((names, n, start, end))  # made into events once the run is over

        return record

    def logged_values(self, original: Step) -> tuple[int, ...]:
        """The value indices instruction ``original`` logs (nothing without a debug buffer)."""
        if not self.logs_values:
            return ()
        if isinstance(original, KernelStep):
            return tuple(original.args[p] for p in logged_positions(original))
        if isinstance(original, DelegateStep):
            return tuple(original.args)
        return ()

    def delegate_tracer(self, n: int) -> DelegateEvents:
        return DelegateEvents(self, n)


class DelegateEvents:
    """The :class:`~pterun.backends.DelegateTracer` of one delegate instruction."""

    def __init__(self, method: MethodTrace, instruction: int) -> None:
        self.method = method
        self.instruction = instruction
        self.logs_values = method.logs_values
        self.now = method.now

    def node(self, start, end, *, debug_handle: int = -1, name: str | None = None,
             outputs: Sequence[torch.Tensor] = ()) -> None:
        events = self.method.current
        if events is None:
            raise InvalidState("a delegate reported a node outside a traced run")
        ids = {"delegate_id": debug_handle} if debug_handle >= 0 else {"delegate_name": name or "node"}
        metadata = name.encode() if debug_handle >= 0 and name else None
        events.append(ProfileEvent(None, start, end, chain=0, instruction=self.instruction, metadata=metadata,
                                   **ids))
        if self.logs_values:
            for value in outputs:
                # Dense: the Inspector compares a node's value with the exported graph's reading its bytes in
                # the order of its sizes, and a delegate may hand over views of values it keeps in another layout.
                logged = self.method.program.log(value, dense=True)
                if logged is not None:
                    events.append(DebugEvent(logged, chain=0, instruction=self.instruction, **ids))
