"""Translates a decoded XNNGraph into one generated Python function for given input shapes.

Each node type has a translator (``nodes/``) that works out its outputs'
shapes, allocates their buffers and writes the lines that compute them: torch
calls writing into those buffers with ``out=``, or in place. The lines of all
nodes become the body of ``run(args)``: no interpretation loop, no lookups and
no allocation of tensor data per call (but by the ops that have no variant
writing into a given buffer: convolutions, oneDNN's prepacked products, whose
results are released after their last reader).

Numbers reach the generated code as values, never as text: ints (and
tuples of them) are written as their digits, which are always a literal,
and every other number is a name bound to it (a float's repr is no literal
for nan or inf). See :meth:`Builder.number`.

Values are named in the generated code as

* ``a<k>``: delegate argument ``k`` (an external input or output), read from
  ``args`` on entry;
* ``v<id>``: a value's tensor fixed at translation (a buffer, a constant, or a
  view of one), a global of the generated function;
* ``t<id>``: a view of an argument, made on entry (views of arguments cannot
  be made ahead: the caller hands new tensors each call);
* ``c<id>``, ``h<id>``: a value a torch op returns on each call rather than
  writing into a buffer (oneDNN's prepacked convolutions and matrix products,
  ``nodes/packed.py``, and max pooling): ``c`` its NCHW channels-last tensor, ``h`` its NHWC
  view, each made only when a node reads it in that layout.

Translation is per set of input shapes. The shapes the graph was serialized
with are translated at load; a call with other shapes (a dynamic dimension)
translates again, and the result is kept for the next call with those shapes.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from pterun.backends.xnnpack.graph import Datatype, Graph, Node, Value
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument, InvalidProgram
from pterun.sourcecode import CompileCode, define, keep_lines, raising_line

Shape = tuple[int, ...]

class Translation:
    """What translating a graph for one set of input shapes produced."""

    def __init__(self, run: Callable[[list], None], source: str, filename: str, shapes: dict[int, Shape],
                 line_nodes: list[str], routes: list[tuple[str, str]]) -> None:
        self.run = run
        self.source = source
        self.filename = filename  # its own (pterun.sourcecode): tracebacks show its lines
        self.shapes = shapes
        self.line_nodes = line_nodes  # by source line (1-based): the node that line computes
        self.routes = routes  # (node, how it computes) for nodes whose way depends on the CPU or the sizes
        # Whether a call with contiguous arguments makes native calls alone, which a recording keeps (the backend
        # says: nodes/native.py, native_only).
        self.native_only = False
        # The storages of the buffers it writes (Builder.allocate), which a traced form makes anew: storage -> filled
        self.buffers: dict[int, bool] = {}
        self._traced: Callable[[list], None] | None | bool = False  # not asked yet

    def traced(self) -> Callable[[list], None] | None:
        """``run`` as tracing (``compile=True``) can follow it, where it calls PyTorch alone: the same code over
        buffers made at each call, views of new memory laid out as the translation's, so that a traced call
        writes no memory but its arguments' outputs. None where it calls anything else (native kernels, Triton
        launches, which tracing cannot see into) or reads a pre-filled buffer."""
        if self._traced is False:
            self._traced = _traced(self.run, self.buffers)
        return self._traced  # type: ignore[return-value]

    def where(self, traceback) -> str | None:
        """The node whose line raised, from a traceback through ``run``."""
        line = raising_line(traceback, self.filename)
        if line is None or not 0 < line <= len(self.line_nodes):
            return None
        return self.line_nodes[line - 1]


class Builder:
    """The state one translation threads through the node translators."""

    def __init__(self, graph: Graph, device: torch.device, cache: dict, input_shapes: dict[int, Shape],
                 options: dict | None = None) -> None:
        self.graph = graph
        self.device = device
        self.options = options or {}  # the backend's load options (XnnpackDelegate)
        self.cache = cache  # survives translations: derived constants, keyed by the translator
        self.env: dict[str, Any] = {"torch": torch}
        self.prologue: list[str] = []
        self.lines: list[str] = []
        self.line_nodes: list[str] = []
        self.routes: list[tuple[str, str]] = []
        self.shapes: dict[int, Shape] = {}
        self.names: dict[int, str] = {}
        self.dynamic: dict[int, Any] = {}  # qdint8 values: nodes.convert.DynamicQuant
        self.node: Node | None = None
        self._scratch: dict[int, int] = {}
        self.buffers: dict[int, bool] = {}  # the storages allocate() handed out -> pre-filled (private)
        self._nchw: dict[int, str] = {}  # returned values: the name of their NCHW tensor
        self._pending: dict[int, str] = {}  # returned values: the line making their NHWC view, once read
        self._n = 0
        for value in graph.values.values():
            if value.data is not None:
                self.shapes[value.id] = value.dims
                self.names[value.id] = self.bind(self.constant(value), f"v{value.id}")
        # Arguments the caller hands in, which may be views of anything: read through reshape, which copies
        # only what is not contiguous. Outputs are written through views, so they must be viewable.
        self.input_names = set()
        for value in graph.inputs:
            shape = input_shapes[value.id]
            self.shapes[value.id] = shape
            self.names[value.id] = f"a{value.external_id}"
            self.input_names.add(self.names[value.id])
        for value in graph.outputs:
            self.names[value.id] = f"a{value.external_id}"

    # -- values ------------------------------------------------------------------

    def value(self, vid: int) -> Value:
        value = self.graph.values.get(vid)
        if value is None:
            raise InvalidProgram(f"XNNPACK {self.where}: refers to value {vid}, which the graph does not define")
        return value

    def shape(self, vid: int) -> Shape:
        if vid not in self.shapes:
            raise InvalidProgram(f"XNNPACK {self.where}: reads value {vid} before any node writes it")
        return self.shapes[vid]

    def ref(self, vid: int) -> str:
        """The name of the tensor holding value ``vid`` (which must already be computed)."""
        self.shape(vid)
        line = self._pending.pop(vid, None)
        if line is not None:
            self.emit(line)
        return self.names[vid]

    def nchw(self, vid: int) -> str:
        """Value ``vid`` (NHWC, 4-d) as an NCHW tensor: its channels-last tensor where an op returned one,
        else a permuted view of its NHWC tensor."""
        if vid in self._nchw:
            return self._nchw[vid]
        return self.permuted(self.ref(vid), (0, 3, 1, 2))

    def returned(self, vid: int, shape: Shape, expr: str, *, nchw: bool = False) -> None:
        """Defines output ``vid`` of the current node as the tensor ``expr`` returns on each call (of
        ``shape``; with ``nchw``, the NCHW channels-last tensor of the NHWC ``shape``). An external
        output is copied into the caller's argument."""
        name = self.define(vid, shape, buffer=False)
        if name:  # an external output
            self.emit(f"{self.permuted(name, (0, 3, 1, 2)) if nchw else name}.copy_({expr})")
            return
        h = f"h{vid}"
        self.names[vid] = h
        self.input_names.add(h)  # read through reshape: whether it is viewable is torch's choice
        if nchw:
            c = f"c{vid}"
            self.emit(f"{c} = {expr}")
            self._nchw[vid] = c
            self._pending[vid] = f"{h} = {c}.permute(0, 2, 3, 1)"
        else:
            self.emit(f"{h} = {expr}")

    def constant(self, value: Value) -> torch.Tensor:
        key = ("constant", value.id)
        if key not in self.cache:
            assert value.data is not None  # a constant value carries its data
            self.cache[key] = value.data.to(self.device)
        return self.cache[key]

    def cached(self, key, make: Callable[[], Any]) -> Any:
        """A derived constant (a transposed weight, a scale vector), made once per delegate."""
        key = (self.node.index if self.node else -1, key)
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]

    def define(self, vid: int, shape: Shape, *, buffer: bool = True, private: bool = False) -> str:
        """Declares the output ``vid`` of the current node with ``shape``; returns its tensor's name.

        Internal values get a buffer of their own (unless ``buffer`` is False: the translator
        will alias them with :meth:`alias`); an external output is the caller's argument, resized
        on entry when its shape is not the one the caller allocated. A ``private`` buffer is not
        shared with other translations (its contents must outlive a call: a pre-filled border).
        """
        value = self.value(vid)
        if vid in self.shapes:
            raise InvalidProgram(f"XNNPACK {self.where}: value {vid} is written twice")
        if value.data is not None or value.is_input:
            raise InvalidProgram(f"XNNPACK {self.where}: writes value {vid}, which is a constant or an input")
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise InvalidProgram(f"XNNPACK {self.where}: value {vid} would have shape {list(shape)}")
        self.shapes[vid] = shape
        if value.is_output:
            name = self.names[vid]
            self.prologue.append(f"if {name}.shape != {self.number(shape)}: {name}.resize_({self.number(shape)})")
            return name
        if buffer:
            tensor = self.allocate(("v", vid), shape, self.storage_dtype(value), private)
            self.names[vid] = self.bind(tensor, f"v{vid}")
        return self.names.get(vid, "")

    def alias(self, vid: int, source: int, make: Callable[[torch.Tensor], torch.Tensor], text: str) -> None:
        """Makes internal value ``vid`` a view of ``source``: ``make`` builds it ahead when ``source`` is
        fixed, ``text`` (with ``{x}`` for the source) on entry when it is an argument."""
        src = self.ref(source)
        if src in self.env:
            self.names[vid] = self.bind(make(self.env[src]), f"v{vid}")
        else:
            name = f"t{vid}"
            self.emit(f"{name} = {text.format(x=src)}")
            self.names[vid] = name

    def view(self, vid: int, shape: Shape) -> str:
        """A name for value ``vid`` viewed with ``shape`` (same elements, contiguous)."""
        shape = tuple(shape)
        name = self.ref(vid)
        if self.shape(vid) == shape:
            return name
        if name in self.env:
            return self.bind(self.env[name].view(shape), f"{name}_v")
        local = f"{name}_v{self.next_id()}"
        self.emit(f"{local} = {name}.{'reshape' if name in self.input_names else 'view'}({self.number(shape)})")
        return local

    def reshaped(self, name: str, shape: Shape) -> str:
        """``name`` (a contiguous tensor) viewed with ``shape``: bound ahead when fixed, else made on entry."""
        if name in self.env:
            return self.bind(self.env[name].view(shape), f"{name}_v")
        return f"{name}.{'reshape' if name in self.input_names else 'view'}({self.number(tuple(shape))})"

    def permuted(self, name: str, dims: tuple[int, ...]) -> str:
        if name in self.env:
            return self.bind(self.env[name].permute(dims), f"{name}_p")
        return f"{name}.permute({self.number(tuple(dims))})"

    def storage_dtype(self, value: Value) -> torch.dtype:
        dtype = Datatype.STORAGE.get(value.datatype)
        if dtype is None:
            raise DelegateInvalidCompatibility(
                f"XNNPACK {self.where}: value {value.id} has datatype {value.type_name}, which is not supported"
            )
        return dtype

    def scratch(self, shape: Shape, dtype: torch.dtype = torch.float32, fill: float | None = None) -> str:
        """A buffer for the current node's intermediate results; ``fill`` makes it private and pre-filled."""
        index = self.node.index if self.node is not None else -1
        self._scratch[index] = n = self._scratch.get(index, 0) + 1
        t = self.allocate(("s", index, n), tuple(shape), dtype, private=fill is not None)
        if fill is not None:
            t.fill_(fill)
        return self.bind(t, f"s{self.next_id()}")

    def allocate(self, key, shape: Shape, dtype: torch.dtype, private: bool = False) -> torch.Tensor:
        """A buffer of ``shape``. Translations for different shapes run one at a time, so they share
        memory: each buffer is a view of the largest one any translation needed under ``key``."""
        n = numel(shape)
        if private:
            t = torch.empty(shape, dtype=dtype, device=self.device)
        else:
            pool = self.cache.setdefault("pool", {})
            flat = pool.get((key, dtype))
            if flat is None or flat.numel() < n:
                flat = pool[(key, dtype)] = torch.empty(max(n, 1), dtype=dtype, device=self.device)
            t = flat[:n].view(shape)
        self.buffers.setdefault(t.untyped_storage().data_ptr(), private)
        return t

    # -- code --------------------------------------------------------------------

    def number(self, value) -> str:
        """``value`` (worked out from the blob) as the generated code reads it: a Python int, or a tuple or
        list of them, as its digits; anything else as a name bound to the value itself."""
        if _is_int(value) or (isinstance(value, (tuple, list)) and all(_is_int(v) for v in value)):
            return repr(value)
        return self.bind(value, "k")

    def bind(self, obj: Any, hint: str) -> str:
        name = hint
        while name in self.env:
            name = f"{hint}_{self.next_id()}"
        self.env[name] = obj
        return name

    def emit(self, line: str) -> None:
        self.lines.append(line)

    def route(self, how: str) -> None:
        """Says how the current node computes, where that is a choice (``XnnpackDelegate.routes``)."""
        self.routes.append((self.where, how))

    def next_id(self) -> int:
        """A number no other name of this translation has (for locals of generated code)."""
        self._n += 1
        return self._n

    @property
    def where(self) -> str:
        return self.node.where if self.node is not None else "graph"


class Hooks(Protocol):
    """Lines a translation puts around each node's own (profiling, ``profile.py``)."""

    def before(self, node: Node, b: Builder) -> None: ...

    def after(self, node: Node, b: Builder) -> None: ...


def translate(graph: Graph, device: torch.device, cache: dict, input_shapes: dict[int, Shape],
              translators: Mapping[str, Callable[[Node, Builder], None]], options: dict | None = None,
              compile_code: CompileCode | None = None, hooks: Hooks | None = None) -> Translation:
    b = Builder(graph, device, cache, input_shapes, options)
    for node in graph.nodes:
        b.node = node
        translator = translators.get(node.kind)
        if translator is None:
            raise DelegateInvalidCompatibility(f"XNNPACK {node.where}: node type {node.kind} is not supported")
        b.emit(f"# {node.where}")
        if hooks is not None:
            hooks.before(node, b)
        translator(node, b)
        if hooks is not None:
            hooks.after(node, b)
        b.line_nodes.extend([node.where] * (len(b.lines) - len(b.line_nodes)))
    b.node = None
    missing = [v.id for v in graph.outputs if v.id not in b.shapes]
    if missing:
        raise InvalidProgram(f"XNNPACK graph never computes its outputs {missing}")
    n_args = graph.num_externs
    head = ["def run(args):"]
    if n_args:
        names = ", ".join(f"a{k}" for k in range(n_args))
        head.append(f"    {names}{',' if n_args == 1 else ''} = args")
    lines, b.line_nodes = _release_locals(b.lines, b.line_nodes)
    body = head + ["    " + line for line in b.prologue + lines] + ["    return None"]
    source = "\n".join(body) + "\n"
    run, filename = define("xnnpack graph", _shapes_name(input_shapes), source, dict(b.env), "run", compile_code)
    keep_lines(filename, source, run)
    line_nodes = ["entry"] * (len(head) + len(b.prologue)) + b.line_nodes + ["exit"]
    translation = Translation(run, source, filename, b.shapes, line_nodes, b.routes)
    translation.buffers = b.buffers
    return translation


# Functions of pterun's own that translations call and that are PyTorch operators alone.
TRACEABLE_HELPERS: set[Callable] = set()


def _traceable(fn) -> bool:
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) or fn in TRACEABLE_HELPERS:
        return True
    return isinstance(fn, types.BuiltinFunctionType) and getattr(fn, "__module__", None) == "torch"


def _traced(run: Callable[[list], None], storages: dict[int, bool]) -> Callable[[list], None] | None:
    names = run.__globals__
    buffers: dict[int, list[tuple[str, torch.Tensor]]] = {}
    for name, value in names.items():
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage().data_ptr()
            if storage in storages:
                if storages[storage]:
                    return None
                buffers.setdefault(storage, []).append((name, value))
        elif callable(value) and value is not run and not isinstance(value, type) and not _traceable(value):
            return None
    # Each buffer's views are made again over new memory by views tracing can follow through a write (a slice of
    # the memory, viewed at a dense shape, permuted): not as_strided, whose writes compile refuses. A buffer's
    # memory of more than one dtype, or a view with gaps, has no such form.
    layouts = []
    for members in buffers.values():
        if len({t.dtype for _, t in members}) != 1:
            return None
        views = []
        for name, t in members:
            view = _dense_view(t)
            if view is None:
                return None
            views.append((name, *view))
        layouts.append((members[0][1].dtype, max(v[1] + v[2] for v in views), views))
    code, device = run.__code__, next((t.device for ms in buffers.values() for _, t in ms), None)

    def traced(args: list) -> None:
        fresh = dict(names)
        for dtype, numel_, views in layouts:
            base = torch.empty(numel_, dtype=dtype, device=device)
            for name, offset, count, shape, order in views:
                fresh[name] = base[offset:offset + count].view(shape).permute(order)
        types.FunctionType(code, fresh)(args)

    return traced


def _dense_view(t: torch.Tensor) -> tuple[int, int, tuple[int, ...], tuple[int, ...]] | None:
    """(offset, elements, dense shape, order) such that ``t`` is its memory's ``offset``-th to ``offset +
    elements``-th elements viewed at the dense shape and permuted by ``order``; None for a view with gaps."""
    strides = t.stride()
    dims = sorted(range(t.dim()), key=lambda d: (-strides[d], d))
    shape = tuple(t.shape[d] for d in dims)
    step = 1
    for d in reversed(dims):
        if t.shape[d] != 1 and strides[d] != step:
            return None
        step *= t.shape[d]
    order = tuple(dims.index(d) for d in range(t.dim()))
    return int(t.storage_offset()), t.numel(), shape, order


def _shapes_name(input_shapes: dict[int, Shape]) -> str:
    """The translation's name in its file name: the input shapes it is for ("0:1x3x8x8 1:8")."""
    return " ".join(f"{k}:{'x'.join(map(str, s))}" for k, s in sorted(input_shapes.items())) or "static"


_ASSIGNED = re.compile(r"^([A-Za-z_]\w*) = ")
_NAME = re.compile(r"[A-Za-z_]\w*")


def _release_locals(lines: list[str], line_nodes: list[str]) -> tuple[list[str], list[str]]:
    """The lines with each name they assign deleted after its last use: tensors torch returned per call
    are freed as soon as read, as buffers would be, so the heap does not grow and shrink by them each call
    (a call would otherwise touch fresh pages)."""
    last: dict[str, int] = {}
    assigned = {m.group(1) for line in lines if (m := _ASSIGNED.match(line))}
    for i, line in enumerate(lines):
        for name in _NAME.findall(line):
            if name in assigned:
                last[name] = i
    after: dict[int, list[str]] = {}
    for name, i in last.items():
        after.setdefault(i, []).append(name)
    out, nodes = [], []
    for i, (line, node) in enumerate(zip(lines, line_nodes)):
        out.append(line)
        nodes.append(node)
        if i in after:
            out.append(f"del {', '.join(sorted(after[i]))}")
            nodes.append(node)
    return out, nodes


def _is_int(value) -> bool:
    return type(value) is int  # not bool, not a numpy integer: their text is not always a literal


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def broadcast(a: Shape, b: Shape, where: str) -> Shape:
    # NumPy's rule, written out: torch.broadcast_shapes imports torch's symbolic-shape machinery on its first
    # call, most of a second added to the first load of a program.
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(x != y and x != 1 and y != 1 for x, y in zip(pa, pb)):
        raise InvalidArgument(f"XNNPACK {where}: shapes {list(a)} and {list(b)} do not broadcast")
    return tuple(y if x == 1 else x for x, y in zip(pa, pb))
