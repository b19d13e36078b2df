"""Types and aliasing of a spec's values, checked node by node.

Each node is run on meta tensors once per assignment of the dynamic dims (their
examples, all at min, all at max, alternating), so PyTorch itself says whether the
node is valid and what it makes; an output dim that follows one dynamic dim in
every assignment is that dim, one that varies otherwise (``2*s``, ``min(s, 3)``)
is refused, since export would need a derived dim or a guard. Aliasing is tracked
so that nothing writes a graph input (a user-input mutation), an expanded view,
or a tensor from a view of itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tests.fuzz.ops import OPS, Ctx, Invalid, Param
from tests.fuzz.spec import DTYPE_NAMES, DTYPES, Node, Spec, Symbol, TensorDecl

MAX_NUMEL = 4096
MAX_RANK = 5


@dataclass
class Value:
    name: str
    shape: tuple
    dtype: str
    root: str  # the value whose memory this one views (itself unless made by a view)
    writable: bool
    kind: str  # input | buffer | node
    uses: int = 0

    @property
    def rank(self) -> int:
        return len(self.shape)

    def decl(self) -> TensorDecl:
        return TensorDecl(self.name, list(self.shape), self.dtype)


def assignments(symbols: list[Symbol]) -> list[dict[str, int]]:
    out = [{s.name: s.example for s in symbols}]
    if symbols:
        out.append({s.name: s.min for s in symbols})
        out.append({s.name: s.max for s in symbols})
        out.append({s.name: (s.min if i % 2 == 0 else s.max) for i, s in enumerate(symbols)})
    return out


def concrete(shape, assignment: dict[str, int]) -> list[int]:
    return [d if isinstance(d, int) else assignment[d] for d in shape]


def meta_params(params: dict[str, Param]) -> dict[str, torch.Tensor]:
    return {k: torch.empty(p.shape, dtype=DTYPES[p.dtype], device="meta") for k, p in params.items()}


class State:
    def __init__(self, symbols: list[Symbol]):
        self.symbols = list(symbols)
        self.assignments = assignments(self.symbols)
        self.values: dict[str, Value] = {}

    def add(self, decl: TensorDecl, kind: str) -> Value:
        for d in decl.shape:
            if isinstance(d, str) and d not in {s.name for s in self.symbols}:
                raise Invalid(f"{decl.name}: unknown dynamic dim {d}")
        value = Value(decl.name, tuple(decl.shape), decl.dtype, decl.name, kind != "input", kind)
        self.values[decl.name] = value
        return value

    def types(self, names: list[str]) -> list[Value]:
        missing = [n for n in names if n not in self.values]
        if missing:
            raise Invalid(f"undefined values {missing}")
        return [self.values[n] for n in names]

    def apply(self, op_name: str, args: list[str], attrs: dict, out_names) -> list[Value]:
        """Checks one node, records its outputs (named by ``out_names(count)``) and returns them."""
        op = OPS.get(op_name)
        if op is None:
            raise Invalid(f"unknown operator {op_name}")
        values = self.types(args)
        if op.kind == "inplace":
            target = values[0]
            if not target.writable:
                raise Invalid(f"{target.name} may not be written in place")
            if any(v.root == target.root for v in values[1:]):
                raise Invalid("an in-place source views its target")
        params = op.params(values, attrs) if op.params else {}
        results = None
        for assignment in self.assignments:
            try:
                tensors = [
                    torch.empty(concrete(v.shape, assignment), dtype=DTYPES[v.dtype], device="meta")
                    for v in values
                ]
                out = op.run(Ctx(assignment, meta_params(params)), *tensors, **attrs)
            except Invalid:
                raise
            except Exception as exc:  # noqa: BLE001 - PyTorch refusing the node is what we ask for
                raise Invalid(
                    f"{op_name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                ) from exc
            outs = [] if op.kind == "inplace" else list(out) if isinstance(out, (tuple, list)) else [out]
            if results is None:
                results = [[] for _ in outs]
            for slot, tensor in zip(results, outs):
                if not isinstance(tensor, torch.Tensor) or tensor.dtype not in DTYPE_NAMES:
                    raise Invalid(f"{op_name} made a {type(tensor).__name__} {getattr(tensor, 'dtype', '')}")
                if tensor.dim() > MAX_RANK or tensor.numel() > MAX_NUMEL:
                    raise Invalid(f"{op_name} made a tensor too large: {tuple(tensor.shape)}")
                slot.append(tensor)
        made = []
        names = out_names(len(results))
        for name, per_assignment in zip(names, results):
            shape = self._symbolic(op_name, [tuple(t.shape) for t in per_assignment])
            dtype = DTYPE_NAMES[per_assignment[0].dtype]
            if op.kind == "view":
                src = values[0]
                value = Value(name, shape, dtype, src.root, src.writable and not op.broadcasts, "node")
            else:
                value = Value(name, shape, dtype, name, True, "node")
            made.append(value)
        for v in values:
            v.uses += 1
        for v in made:
            self.values[v.name] = v
        return made

    def _symbolic(self, op_name: str, shapes: list[tuple]) -> tuple:
        dims = []
        for i, sizes in enumerate(zip(*shapes)):
            if len(set(sizes)) == 1:
                dims.append(sizes[0])
                continue
            match = [s.name for s in self.symbols if [a[s.name] for a in self.assignments] == list(sizes)]
            if not match:
                raise Invalid(f"{op_name}: output dim {i} is derived from dynamic dims ({sizes})")
            dims.append(match[0])
        return tuple(dims)


def check(spec: Spec, *, retype: bool = False) -> State:
    """Validates ``spec`` (every node valid where it is, outputs defined). With ``retype`` the recorded output
    types are rewritten (after the shrinker changed a shape); otherwise they must match."""
    if not spec.outputs:
        raise Invalid("no outputs")
    for s in spec.symbols:
        if not 2 <= s.min <= s.example <= s.max or s.min == s.max:
            raise Invalid(f"dynamic dim {s.name} has bounds {s.min}..{s.max} (example {s.example})")
    state = State(spec.symbols)
    names = [t.name for t in spec.inputs + spec.buffers] + [o.name for n in spec.nodes for o in n.outs]
    if len(set(names)) != len(names):
        raise Invalid("a value is defined twice")
    for decl in spec.inputs:
        state.add(decl, "input")
    for decl in spec.buffers:
        if any(isinstance(d, str) for d in decl.shape):
            raise Invalid(f"buffer {decl.name} has a dynamic dim")
        state.add(decl, "buffer")
    for node in spec.nodes:
        made = state.apply(node.op, node.args, node.attrs, lambda count, node=node: _names(node, count))
        decls = [v.decl() for v in made]
        if retype:
            node.outs = decls
        elif [(d.name, list(d.shape), d.dtype) for d in decls] != [
            (o.name, list(o.shape), o.dtype) for o in node.outs
        ]:
            raise Invalid(f"{node.id}: recorded output types differ from what {node.op} makes")
    state.types(spec.outputs)
    bound = {d for t in spec.inputs for d in t.shape if isinstance(d, str)}
    if bound != {s.name for s in spec.symbols}:
        raise Invalid("a dynamic dim appears in no input")
    return state


def _names(node: Node, count: int) -> list[str]:
    if len(node.outs) != count:
        raise Invalid(f"{node.id}: {node.op} makes {count} outputs, the spec names {len(node.outs)}")
    return [o.name for o in node.outs]


def numel(shape, assignment: dict[str, int]) -> int:
    return math.prod(concrete(shape, assignment))
