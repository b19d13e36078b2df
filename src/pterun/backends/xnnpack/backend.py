"""XnnpackBackend: runs the XNNGraph of an XNNPACK delegate blob with torch ops, on any device.

At init the blob is parsed and verified, its graph decoded, constants moved
to the method's device, and the graph translated for the shapes it was
serialized with. Execute checks the arguments' input shapes: the usual case
runs the translation made at init; other shapes (a dynamic dimension) are
translated once and kept.

An argument laid out channels-last (dim order 0, 2, 3, 1) is an NHWC buffer,
and the graph sees it as one: ExecuTorch's XNNPACK executor hands XNNPACK its
bytes with the dimensions N, H, W, C, and sizes a channels-last output from the
NHWC shape XNNPACK computed. The translation is given the argument permuted to
NHWC, a contiguous view of the same bytes.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Callable

import torch

from pterun.backends.interface import BackendInitContext, BackendInterface, CompileSpec, DelegateTracer
from pterun.backends.xnnpack.blob import split_blob
from pterun.backends.xnnpack.compiler import Translation, translate
from pterun.backends.xnnpack.graph import NODE_NAMES, Datatype, Graph, read_graph
from pterun.backends.xnnpack.nodes import TRANSLATORS, isa, native
from pterun.backends.xnnpack.optimize import optimize
from pterun.backends.xnnpack.profile import NodeHooks
from pterun.core.layout import CHANNELS_LAST_4D, strides_for
from pterun.errors import (
    DelegateInvalidCompatibility,
    DelegateInvalidHandle,
    Internal,
    InvalidArgument,
    InvalidProgram,
    PteError,
)
from pterun.sourcecode import CompileCode

NAME = "XnnpackBackend"

# Translations kept per delegate for input shapes other than the serialized ones.
MAX_TRANSLATIONS = 16


class XnnpackDelegate:
    """One initialized blob: its graph and its translations by input shapes."""

    def __init__(self, graph: Graph, device: torch.device, options: dict | None = None,
                 compile_code: CompileCode | None = None) -> None:
        unknown = sorted({n.kind for n in graph.nodes if n.kind not in TRANSLATORS})
        if unknown:
            raise DelegateInvalidCompatibility(
                f"{NAME}: node type{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                f"{'are' if len(unknown) > 1 else 'is'} not supported"
            )
        self.graph = graph
        self.device = device
        self.options = dict(options or {})
        self._compile_code = compile_code
        self._cache: dict = {}
        self._inputs = [(v.argument, v.id) for v in graph.inputs]
        self._input_args = [k for k, _ in self._inputs]
        # Arguments that may come channels-last: those of 4-d values.
        self._four_d_inputs = [v.argument for v in graph.inputs if len(v.dims) == 4]
        self._four_d_outputs = [(v.argument, v.id) for v in graph.outputs if len(v.dims) == 4]
        self._num_args = graph.num_externs
        self._hooks: NodeHooks | None = None
        self._start()

    def _start(self) -> None:
        """Translates the graph for the shapes it was serialized with, the usual call's."""
        shapes = {v.id: v.dims for v in self.graph.inputs}
        self._translations: OrderedDict[tuple, Translation] = OrderedDict()
        first = self._translate(shapes)
        self._key = tuple(shapes[vid] for _, vid in self._inputs)
        self._translations[self._key] = first
        self._last_key, self._last = self._key, first

    def profiled(self, tracer: DelegateTracer) -> XnnpackDelegate:
        """A delegate running the same graph, which reports each node to ``tracer`` (``profile.py``).

        It shares this one's constants, prepacked weights and buffers, and has translations of its own."""
        variant = copy.copy(self)
        variant._hooks = NodeHooks(self.graph, tracer)
        variant._start()
        return variant

    def _translate(self, shapes: dict) -> Translation:
        try:
            translation = translate(self.graph, self.device, self._cache, shapes, TRANSLATORS, self.options,
                                    self._compile_code, self._hooks)
        except PteError:
            raise
        except (RuntimeError, ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
            # A graph whose parameters torch rejects (a view that cannot be made, ...).
            raise InvalidProgram(f"{NAME}: cannot translate the graph ({type(exc).__name__}: {exc})") from None
        translation.native_only = (self.device.type == "cpu" and self._hooks is None
                                   and native.native_only(translation.source, translation.run.__globals__))
        return translation

    def ran_natively(self, args: list) -> Translation | None:
        """Where the last call, made with ``args``, made native calls alone (those a recording keeps, and made
        again in one call: executor/codegen/replay.py), the translation it ran, which a recording of them keeps (its
        buffers are theirs), else None: its translation's whole work where the arguments are contiguous (and so
        none is laid out channels-last)."""
        translation = self._last
        if translation.native_only and all(isinstance(arg, torch.Tensor) and _contiguous(arg) for arg in args):
            return translation
        return None

    def written_arguments(self, args) -> list[int]:
        """The arguments the graph writes: its external outputs (inputs are only read).

        Each argument must be a tensor of the dtype and number of elements of the graph's external
        value (its layout may differ: channels-last arguments are NHWC values)."""
        if len(args) != self._num_args:
            raise InvalidProgram(
                f"{NAME}: the delegate takes {self._num_args} arguments; the call passes {len(args)}"
            )
        for value in (*self.graph.inputs, *self.graph.outputs):
            arg = args[value.argument]
            what = (f"{NAME}: argument {value.argument} "
                    f"(graph value {value.id}, {value.type_name} {list(value.dims)})")
            if not isinstance(arg, torch.Tensor):
                raise InvalidProgram(f"{what} is given {type(arg).__name__}, not a tensor")
            dtype = Datatype.STORAGE.get(value.datatype)
            if arg.dtype != dtype or arg.numel() != math.prod(value.dims):
                raise InvalidProgram(f"{what} is given a {arg.dtype} tensor of sizes {list(arg.shape)}")
        return [v.argument for v in self.graph.outputs]

    def output_sizes(self, args) -> list[tuple[int, ...]]:
        """The sizes the graph gives its external outputs, in their arguments' order, for contiguous inputs of the
        sizes of those in ``args`` (translated for them where no translation is kept)."""
        translation = self._translation_of(args)
        return [tuple(translation.shapes[v.id]) for v in sorted(self.graph.outputs, key=lambda v: v.argument)]

    def traced(self, args) -> Callable[[list], None] | None:
        """The translation for ``args``' input sizes as tracing can follow it (Translation.traced), or None."""
        return None if self._hooks is not None else self._translation_of(args).traced()

    def _translation_of(self, args) -> Translation:
        """The translation for the sizes of ``args``' inputs (``__call__`` looks it up inline: its hot path)."""
        key = tuple([args[k].shape for k in self._input_args])
        return self._last if key == self._last_key else self._for_shapes(key)

    def __call__(self, args: list) -> None:
        if len(args) != self._num_args:
            raise InvalidArgument(f"{NAME}: the delegate takes {self._num_args} arguments, got {len(args)}")
        for k, arg in enumerate(args):
            if not isinstance(arg, torch.Tensor):
                raise InvalidArgument(f"{NAME}: argument {k} must be a tensor, got {type(arg).__name__}")
        if self._four_d_inputs:
            nhwc = [k for k in self._four_d_inputs if _channels_last(args[k])]
            if nhwc:
                args = list(args)
                for k in nhwc:
                    args[k] = args[k].permute(CHANNELS_LAST_4D)
        key = tuple([args[k].shape for k in self._input_args])
        # A decode loop calls with one set of shapes after another: the last translation first.
        translation = self._last if key == self._last_key else self._for_shapes(key)
        try:
            if self._four_d_outputs:
                outputs = [(k, vid) for k, vid in self._four_d_outputs if _channels_last(args[k])]
                if outputs:
                    args = list(args)
                    for k, vid in outputs:
                        args[k] = _nhwc_output(args[k], translation.shapes[vid])
            translation.run(args)
        except PteError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as a PteError naming the node
            where = translation.where(exc.__traceback__) or "graph"
            if isinstance(exc, RuntimeError) and "not resizable" in str(exc):
                # Inputs of new shapes made a result larger than the memory the program planned for it.
                raise InvalidArgument(f"{NAME}: {where}: a result needs more memory than its planned upper bound") \
                    from exc
            raise Internal(f"{NAME}: {where}: {type(exc).__name__}: {exc}") from exc

    def _for_shapes(self, key: tuple) -> Translation:
        translation = self._translations.get(key)
        if translation is None:
            shapes = {vid: tuple(shape) for (_, vid), shape in zip(self._inputs, key)}
            translation = self._translate(shapes)
            self._translations[key] = translation
            if len(self._translations) > MAX_TRANSLATIONS:
                self._translations.popitem(last=False)
        else:
            self._translations.move_to_end(key)
        self._last_key, self._last = key, translation
        return translation

    @property
    def source(self) -> str:
        """The generated code for the serialized shapes (for debugging)."""
        return self._translations[self._key].source if self._key in self._translations else ""

    @property
    def routes(self) -> list[tuple[str, str]]:
        """For the serialized shapes, how each quantized product computes on this CPU: (node, way), e.g.
        ``("node #3 (XNNFullyConnected)", "onednn int8 product")``; ``cpu`` says why."""
        translation = self._translations.get(self._key)
        return list(translation.routes) if translation is not None else []

    @property
    def cpu(self) -> str:
        """What this CPU decides for quantized products (``nodes/isa.py``) and whether pterun's native kernels
        take them (``nodes/native.py``), in a sentence."""
        if self.device.type != "cpu":
            return f"runs on {self.device}"
        runs, which = native.available()
        if runs and self.options.get("native", True) is False:
            which = "pterun's native kernels turned off (native=False)"
        return f"{isa.cpu().summary}; {which}"


def _contiguous(t: torch.Tensor) -> bool:
    """Whether ``t``'s strides are exactly those of its sizes in order: a call with it neither copies it nor reads it
    as channels-last (``_channels_last``), which torch's ``is_contiguous`` alone does not say of a 4-d tensor with a
    dimension of size 1."""
    return t.is_contiguous() and (t.dim() != 4 or t.stride() == strides_for(t.shape, range(4)))


def _channels_last(t) -> bool:
    """Whether a 4-d tensor is laid out with dim order (0, 2, 3, 1) rather than contiguously.

    Strides are those the dim order gives (torch's channels-last strides are the same), compared exactly:
    a size-1 dimension makes torch's ``is_contiguous`` true for both layouts, but not these strides."""
    if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.stride(1) != 1:
        return False
    strides = t.stride()
    return strides == strides_for(t.shape, CHANNELS_LAST_4D) and strides != strides_for(t.shape, range(4))


def _nhwc_output(t: torch.Tensor, shape: tuple) -> torch.Tensor:
    """The NHWC view a channels-last output is written through, once ``t`` has the sizes of ``shape`` (NHWC).

    (Permuted by its dim order, a tensor is its bytes in memory order: contiguous.)"""
    n, h, w, c = shape
    if tuple(t.shape) != (n, c, h, w):
        t.resize_((n, c, h, w), memory_format=torch.channels_last)
    return t.permute(CHANNELS_LAST_4D)


class XnnpackBackend(BackendInterface):
    cpu_kernels_only = True  # on the CPU: PyTorch's CPU operators (oneDNN's among them) and pterun's native kernels

    def is_available(self) -> bool:
        return True

    def init(self, context: BackendInitContext, processed: memoryview,
             compile_specs: tuple[CompileSpec, ...]) -> XnnpackDelegate:
        blob = split_blob(processed, context.marks)
        read: list[memoryview] = []
        graph = optimize(read_graph(blob, context.named_data, read))
        delegate = XnnpackDelegate(graph, torch.device(context.device), dict(context.runtime_specs),
                                   context.compile_code)
        # Packed: the file's bytes are read again only where a translation views them as they are (and then
        # mapped back on its first call), as XNNPACK frees its blob and unpacked weights after packing.
        for view in (processed, *read):
            context.release(view)
        return delegate

    def execute(self, handle, args: list) -> None:
        if not isinstance(handle, XnnpackDelegate):
            raise DelegateInvalidHandle(f"{NAME}: execute got a handle it did not make")
        handle(args)

    def executor(self, handle) -> XnnpackDelegate:
        if not isinstance(handle, XnnpackDelegate):
            raise DelegateInvalidHandle(f"{NAME}: execute got a handle it did not make")
        return handle

    def profiled(self, handle, tracer: DelegateTracer) -> XnnpackDelegate:
        if not isinstance(handle, XnnpackDelegate):
            raise DelegateInvalidHandle(f"{NAME}: got a handle it did not make")
        return handle.profiled(tracer)

    def written_arguments(self, handle, args) -> list[int]:
        if not isinstance(handle, XnnpackDelegate):
            raise DelegateInvalidHandle(f"{NAME}: got a handle it did not make")
        return handle.written_arguments(args)

    def output_sizes(self, handle, args) -> list[tuple[int, ...]]:
        if not isinstance(handle, XnnpackDelegate):
            raise DelegateInvalidHandle(f"{NAME}: got a handle it did not make")
        return handle.output_sizes(args)

    def uncompiled_reason(self, handle) -> str | None:
        if not isinstance(handle, XnnpackDelegate):
            raise DelegateInvalidHandle(f"{NAME}: got a handle it did not make")
        if native.enabled(handle):
            # Measured: the 100M 8da4w decoder made 103-111 tokens/s plain and 82-99 compiled around its delegates
            # (EPYC, 1 thread): the method's own steps, natively, beat Inductor's code between the delegates.
            return "pterun's native kernels run it on this CPU, where the method's own code is the faster"
        return None

    def traced_execute(self, handle, args) -> Callable[[list], None] | None:
        if not isinstance(handle, XnnpackDelegate):
            raise DelegateInvalidHandle(f"{NAME}: got a handle it did not make")
        return handle.traced(args)

    def destroy(self, handle) -> None:
        if isinstance(handle, XnnpackDelegate):
            handle._translations.clear()
            handle._cache.clear()


__all__ = ["NAME", "NODE_NAMES", "XnnpackBackend", "XnnpackDelegate"]
