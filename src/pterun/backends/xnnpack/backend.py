"""XnnpackBackend: runs the XNNGraph of an XNNPACK delegate blob with torch ops, on any device.

At init the blob is parsed and verified, its graph decoded, constants moved
to the method's device, and the graph translated for the shapes it was
serialized with. Execute checks the arguments' input shapes: the usual case
runs the translation made at init; other shapes (a dynamic dimension) are
translated once and kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import nullcontext

import torch

from pterun.backends.interface import BackendInitContext, BackendInterface, CompileSpec
from pterun.backends.xnnpack.blob import split_blob
from pterun.backends.xnnpack.compiler import Translation, translate
from pterun.backends.xnnpack.graph import NODE_NAMES, Graph, read_graph
from pterun.backends.xnnpack.nodes import TRANSLATORS
from pterun.backends.xnnpack.optimize import optimize
from pterun.errors import (
    DelegateInvalidCompatibility, DelegateInvalidHandle, Internal, InvalidArgument, InvalidProgram, PteError,
)

NAME = "XnnpackBackend"

# Translations kept per delegate for input shapes other than the serialized ones.
MAX_TRANSLATIONS = 16


class XnnpackDelegate:
    """One initialized blob: its graph and its translations by input shapes."""

    def __init__(self, graph: Graph, device: torch.device) -> None:
        unknown = sorted({n.kind for n in graph.nodes if n.kind not in TRANSLATORS})
        if unknown:
            raise DelegateInvalidCompatibility(
                f"{NAME}: node type{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                f"{'are' if len(unknown) > 1 else 'is'} not supported"
            )
        self.graph = graph
        self.device = device
        self._cache: dict = {}
        self._inputs = [(v.external_id, v.id) for v in graph.inputs]
        self._num_args = graph.num_externs
        shapes = {v.id: v.dims for v in graph.inputs}
        self._translations: OrderedDict[tuple, Translation] = OrderedDict()
        first = self._translate(shapes)
        self._key = tuple(shapes[vid] for _, vid in self._inputs)
        self._first = first
        self._translations[self._key] = first
        # cuDNN and cuBLAS may use TF32 for float32 by default, which is not float32 arithmetic.
        self._precision = _ieee_float32 if device.type == "cuda" else nullcontext

    def _translate(self, shapes: dict) -> Translation:
        try:
            return translate(self.graph, self.device, self._cache, shapes, TRANSLATORS)
        except PteError:
            raise
        except (RuntimeError, ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
            # A graph whose parameters torch rejects (a view that cannot be made, ...).
            raise InvalidProgram(f"{NAME}: cannot translate the graph ({type(exc).__name__}: {exc})") from None

    def __call__(self, args: list) -> None:
        if len(args) != self._num_args:
            raise InvalidArgument(f"{NAME}: the delegate takes {self._num_args} arguments, got {len(args)}")
        try:
            key = tuple(args[k].shape for k, _ in self._inputs)
        except AttributeError:
            raise InvalidArgument(f"{NAME}: the delegate's inputs must be tensors") from None
        translation = self._first if key == self._key else self._for_shapes(key)
        try:
            with self._precision():
                translation.run(args)
        except PteError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as a PteError naming the node
            where = translation.where(exc.__traceback__) or "graph"
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
        return translation

    @property
    def source(self) -> str:
        """The generated code for the serialized shapes (for debugging)."""
        return self._translations[self._key].source if self._key in self._translations else ""


class _ieee_float32:
    """TF32 off while inside. The flags are the process's: with delegates running on several threads,
    the first to enter saves them and the last to leave restores them."""

    _lock = threading.Lock()
    _inside = 0
    _saved: tuple[bool, bool] = (False, False)

    def __enter__(self):
        cls = _ieee_float32
        with cls._lock:
            if cls._inside == 0:
                cls._saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
            cls._inside += 1

    def __exit__(self, *exc):
        cls = _ieee_float32
        with cls._lock:
            cls._inside -= 1
            if cls._inside == 0:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = cls._saved
        return False


class XnnpackBackend(BackendInterface):
    def is_available(self) -> bool:
        return True

    def init(self, context: BackendInitContext, processed: memoryview,
             compile_specs: tuple[CompileSpec, ...]) -> XnnpackDelegate:
        blob = split_blob(processed)
        graph = optimize(read_graph(blob, context.named_data))
        return XnnpackDelegate(graph, torch.device(context.device))

    def execute(self, handle, args: list) -> None:
        if not isinstance(handle, XnnpackDelegate):
            raise DelegateInvalidHandle(f"{NAME}: execute got a handle it did not make")
        handle(args)

    def destroy(self, handle) -> None:
        if isinstance(handle, XnnpackDelegate):
            handle._translations.clear()
            handle._cache.clear()


__all__ = ["NAME", "NODE_NAMES", "XnnpackBackend", "XnnpackDelegate"]
