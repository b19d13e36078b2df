"""The delegate interface: what a backend implements to run a program's delegate blobs.

Mirrors ExecuTorch's ``BackendInterface``. At method load the executor calls
``init`` once per delegate with the blob the exporter wrote (a read-only
``memoryview``; copy what must outlive the call) and its compile specs, and
keeps the handle ``init`` returns. ``execute`` gets the handle and the call's
values (through ``executor``'s function, made once per delegate), inputs
first, then outputs: torch tensors (which the backend writes in place,
resizing dynamic ones), ints, floats, bools or None. ``destroy`` runs
when the method is dropped.

``written_arguments`` says which of those values a delegate writes. The
executor refuses at load a program whose delegate would write a constant (a
view of the program's bytes), and leaves what a delegate reads alone when it
turns copies into views. The default, every argument, is always safe; a
backend whose delegates are passed constants (weights the partitioner left
outside the blob) must say which arguments are outputs, or such programs are
refused.

``profiled`` lets a backend report what happens inside a delegate when the
program was loaded with profiling on (ETDump): it returns, once at load, an
execute function that times each node of the blob and hands the tracer its
outputs. The default (None) runs the delegate as one event.

``output_sizes`` lets a method with the backend's delegates compile (``compile=True``): there each delegate
call is one operator that TorchInductor calls as it is, its outputs made new at each call, and tracing must
know their sizes before the delegate runs. The default (None) keeps such a method uncompiled, as
``uncompiled_reason`` may where the backend's own way is the faster one.
``traced_execute`` offers the delegate's work as PyTorch operators that tracing follows, which Inductor
then fuses with the method's own.

``validate`` checks a blob before the method allocates anything, and a backend whose blobs are native
code (``native_code = True``: a shared library it loads) is used only when the caller trusts native
code; the executor refuses such a delegate before anything else is done for its method.

Errors: raise a :class:`pterun.errors.PteError` subclass. By ExecuTorch's
convention a blob the backend cannot run is ``DelegateInvalidCompatibility``
(0x30), an allocation failure ``DelegateMemoryAllocationFailed`` (0x31), and a
bad handle at execute ``DelegateInvalidHandle`` (0x32). Anything else raised
from ``execute`` is reported as ``Internal``.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from pterun.core.device import Device
from pterun.flatbuf.verify import VerificationMarks
from pterun.sourcecode import CompileCode


@dataclass(frozen=True)
class CompileSpec:
    key: str
    value: bytes


@dataclass
class BackendInitContext:
    """What a backend may use while initializing one delegate."""

    method_name: str
    # Named data from the program and any .ptd files the caller gave (the .ptd first).
    named_data: Mapping[str, memoryview]
    # Options the caller passed for this backend at load (ExecuTorch's LoadBackendOptionsMap).
    runtime_specs: Mapping[str, Any] = field(default_factory=dict)
    # The device the method runs on (the default device, the CPU, unless the program was loaded with device=...).
    device: torch.device = field(default_factory=lambda: Device.parse(None).torch)
    # load_program(data, device) -> a program object with load_method(name), for backends whose
    # blobs are programs of their own (run by the same executor, on the given device).
    load_program: Callable[[memoryview | bytes, torch.device], Any] | None = None
    # compile_code(source, filename) -> compile(source, filename, "exec") from the executor's load cache, for
    # backends that generate code (it need not be compiled again on the next load); None: no cache.
    compile_code: CompileCode | None = None
    # Where a backend may remember that a blob's exact bytes passed its verifier, so that the next load of the
    # same blob skips the walk (the executor's load cache, as for the program's own flatbuffer); None: no cache.
    marks: VerificationMarks | None = None
    # release(view) gives back bytes of the file (the blob, named data) the backend has finished reading at
    # init, as ExecuTorch's FreeableBuffer.Free() does: where they are mapped from a file, their pages leave
    # this process's memory, and they are read again from the file if touched. Returns the bytes given back.
    release: Callable[[memoryview], int] = field(default=lambda view: 0)

    def get_runtime_spec(self, key: str, default: Any = None) -> Any:
        return self.runtime_specs.get(key, default)


class DelegateTracer(Protocol):
    """What a delegate's profiled execute reports to, for one delegate call of a method.

    ``now()`` is a timestamp on the tracer's clock (the host's, or CUDA events on a GPU): take one
    before and one after each node. ``node`` records one node: its debug handle where the blob gives
    its nodes one (ExecuTorch's delegate debug identifier, which ETRecord maps to the exported graph's
    nodes), else -1 and a ``name``; ``name`` also says what the node is (an operator) for tables;
    ``outputs`` are the tensors the node computed, logged only when ``logs_values`` (a debug buffer
    was asked for): leave them out otherwise, so that timing costs no copies. Tensors are logged as
    they are when ``node`` is called; a backend that reuses a buffer must call ``node`` before it
    overwrites it.
    """

    logs_values: bool

    def now(self) -> Any: ...

    def node(self, start: Any, end: Any, *, debug_handle: int = -1, name: str | None = None,
             outputs: Sequence[torch.Tensor] = ()) -> None: ...


class BackendInterface(ABC):
    #: Whether the blobs carry native code that the backend loads into the process (a shared library).
    #: The executor loads such a delegate only when the caller trusts native code (docs/trust.md).
    native_code: bool = False
    #: Whether a delegate loaded for a method on the CPU runs nothing but CPU kernels of this process (PyTorch's
    #: CPU operators, native code): its calls then read only the CPU's precision switches and autocast state, so
    #: a call finding them exact pins nothing (executor/call/precision.py), a few microseconds a call.
    cpu_kernels_only: bool = False

    @abstractmethod
    def is_available(self) -> bool:
        """Whether this backend can run here (its libraries and devices exist)."""

    def validate(self, context: BackendInitContext, processed: memoryview,  # noqa: B027 - optional hook
                 compile_specs: tuple[CompileSpec, ...]) -> None:
        """Checks a blob before anything is allocated or loaded for its method, and before ``is_available``.

        Raise a :class:`pterun.errors.PteError` for a blob that ``init`` would refuse whatever the
        machine (a malformed blob, data it names that is missing), so that it fails the same way
        everywhere and before any device memory is taken. The default checks nothing."""

    @abstractmethod
    def init(self, context: BackendInitContext, processed: memoryview, compile_specs: tuple[CompileSpec, ...]) -> Any:
        """Prepares one delegate blob; returns the handle ``execute`` will get."""

    @abstractmethod
    def execute(self, handle: Any, args: list) -> None:
        """Runs the delegate: reads the inputs and writes the outputs in ``args``."""

    def executor(self, handle: Any) -> Callable[[list], None]:
        """What a method calls with each call's ``args`` to run the delegate: ``execute`` bound to ``handle``. A
        backend whose handle runs itself may return it (its check that the handle is its own made here, once)."""
        return functools.partial(self.execute, handle)

    def written_arguments(self, handle: Any, args: Sequence) -> Iterable[int]:
        """Positions in ``execute``'s ``args`` that the delegate writes, for a call passing ``args``.

        Asked once per delegate call at method load, after ``init``, with the call's values as they
        are known then: tensors of the dtype and sizes the call passes (upper bounds where a size is
        dynamic; on the ``meta`` device when the caller binds a new tensor on each call), and scalars.
        Include every argument written in place, inputs too. Raise a :class:`pterun.errors.PteError`
        (``InvalidProgram``) when the call cannot be right for this blob (too many values, a tensor of
        another dtype or size than the blob's), so that it fails at load rather than while running.
        The default, every argument, checks nothing and is conservative: never wrong, but it refuses
        programs that pass constants.
        """
        return range(len(args))

    def output_sizes(self, handle: Any, args: Sequence) -> Sequence[tuple[int, ...]] | None:
        """The sizes of the arguments the delegate writes (``written_arguments``, in the order of their
        positions) after a call with ``args``, where the inputs are tensors of the call's sizes (of the method's
        dtypes, contiguous; perhaps fake ones, read for their sizes alone) and the written arguments None.

        Asked while ``compile=True`` traces a method, for each set of input sizes it compiles, and by each call
        of the compiled code; a backend that answers gets its outputs as new contiguous tensors of these sizes
        and writes them, as ``execute`` writes planned ones, so a delegate that reads what it writes (an update
        in place) must not answer. None (the default): the sizes are not known before the delegate runs, and
        the method is not compiled."""
        return None

    def uncompiled_reason(self, handle: Any) -> str | None:
        """Why a method calling this delegate stays uncompiled with ``compile=True`` (``Method.compile_status``
        says it), or None: the method compiles, the delegate's calls traced or opaque. The default: None where
        the backend gives ``output_sizes``, else that it does not."""
        if type(self).output_sizes is BackendInterface.output_sizes:
            return "its backend does not give the sizes of its outputs ahead (output_sizes)"
        return None

    def traced_execute(self, handle: Any, args: Sequence) -> Callable[[list], None] | None:
        """What ``execute`` computes for a call with ``args``' sizes (``output_sizes``' arguments), as a function
        tracing can follow: PyTorch operators alone, writing no memory but the call's outputs (its scratch
        memory made at each call). Asked while ``compile=True`` traces a method; the function returned is then
        traced with the method, so that TorchInductor fuses the delegate's operators with the steps around it.
        None (the default): the delegate is one call that Inductor makes as it is."""
        return None

    def profiled(self, handle: Any, tracer: DelegateTracer) -> Callable[[list], None] | None:
        """An execute function for ``handle`` that reports each node it runs to ``tracer``.

        Asked once at method load when profiling is on; the function returned is called instead of
        ``execute`` and must compute the same values. None (the default): the delegate is one event.
        """
        return None

    def destroy(self, handle: Any) -> None:  # noqa: B027 - optional hook
        """Releases what ``init`` acquired."""
