"""Random valid programs: a seed becomes a :class:`Spec`, grown one node at a time (NNSmith-style).

Each step picks an operator (weighted), lets it propose operands from the values
made so far (or new graph inputs shaped to fit) and attributes, and keeps the node
only if the checker (``check.State``, PyTorch on meta tensors) accepts it, so every
spec is valid by construction; the rare program that still fails to export is
discarded by the runner and counted.

NNSmith itself (PyPI ``nnsmith`` 0.1.0, 2023) is not used: it solves shapes with
z3 and drives Hydra configs, and its graphs have none of what pterun must get
right beyond plain operators (bounded dynamic dims, mutable buffers written
across calls, in-place writes through views, several outputs), nor ExecuTorch's
edge operators; its PyTorch side predates ``torch.export``. Typing each node by
running it on meta tensors does the solver's job for graphs this small.
"""

from __future__ import annotations

import random

from tests.fuzz.check import State, Value
from tests.fuzz.ops import OPS, Invalid
from tests.fuzz.spec import ALL, INTS, Node, Spec, Symbol, TensorDecl

MAX_INPUTS = 5
MAX_OUTPUTS = 6
INPUT_DTYPES = (("float32", 75), ("float16", 6), ("bfloat16", 5), ("int64", 6), ("int32", 4), ("bool", 4))
SHAPE_KINDS = (("image", 25), ("sequence", 30), ("matrix", 25), ("vector", 15), ("scalar", 5))


class Gen:
    """What an operator's ``propose`` sees: a random source, the values so far, and ways to make operands."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.symbols: list[Symbol] = []
        self.inputs: list[TensorDecl] = []
        self.buffers: list[TensorDecl] = []
        self.nodes: list[Node] = []
        self.state = State([])
        self.pending: list[TensorDecl] = []
        self.written: set[str] = set()  # roots written in place
        self.forced: str | None = None  # the only value pick(writable=True) may return

    # -- randomness --------------------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def randint(self, a: int, b: int) -> int:
        return self.rng.randint(a, b)

    def choice(self, seq):
        return self.rng.choice(list(seq))

    def weighted(self, pairs):
        items, weights = zip(*pairs)
        return self.rng.choices(items, weights)[0]

    def scalar(self, dtype: str, low: int = -2, high: int = 2, nonzero: bool = False):
        if dtype == "bool":
            return self.chance(0.5)
        if dtype in INTS:
            v = self.randint(low, high)
            return v or 1 if nonzero else v
        v = self.randint(4 * low, 4 * high) / 4
        return v or 0.5 if nonzero else v

    # -- values ----------------------------------------------------------------------------------------
    def pick(self, *, dtypes=ALL, min_rank=0, max_rank=5, where=None, writable=False) -> Value | None:
        values = list(self.state.values.values())
        if writable and self.forced:
            values = [self.state.values[self.forced]]
        cands = [
            v
            for v in values
            if v.dtype in dtypes
            and min_rank <= v.rank <= max_rank
            and (not writable or v.writable)
            and (where is None or where(v))
        ]
        if not cands:
            return None
        order = {v.name: i for i, v in enumerate(values)}
        weights = [
            (4.0 if v.uses == 0 and v.kind == "node" else 1.0) * (1 + 2 * order[v.name] / len(values))
            for v in cands
        ]
        return self.rng.choices(cands, weights)[0]

    def operand(self, shape: tuple, dtype: str, *, exact=False, into=False, avoid=None) -> str | None:
        """A value to combine with one of ``shape``: the same shape (``exact``), one broadcasting into it
        (``into``), or one broadcasting with it; an existing value, or a new graph input."""
        fits = (
            (lambda s: tuple(s) == tuple(shape))
            if exact
            else (lambda s: _into(s, shape))
            if into
            else (lambda s: _into(s, shape) or _into(shape, s))
        )
        found = self.pick(dtypes=(dtype,), where=lambda v: fits(v.shape) and v.root != avoid)
        if found is not None and (self.chance(0.6) or len(self.inputs) + len(self.pending) >= MAX_INPUTS):
            return found.name
        if len(self.inputs) + len(self.pending) >= MAX_INPUTS:
            return None
        new = list(shape)
        if not exact:
            if new and self.chance(0.3):
                new = new[self.randint(1, len(new)) :]
            new = [1 if self.chance(0.25) else d for d in new]
            if not into and len(new) < 4 and self.chance(0.1):
                new = [self.randint(2, 3)] + new
        return self.new_input(new, dtype)

    def new_input(self, shape, dtype: str) -> str:
        decl = TensorDecl(f"x{len(self.inputs) + len(self.pending)}", list(shape), dtype)
        self.pending.append(decl)
        return decl.name

    # -- growing the graph -----------------------------------------------------------------------------
    def add_node(self, op_name: str) -> bool:
        self.pending = []
        proposal = OPS[op_name].propose(self)
        if proposal is None:
            return False
        args, attrs = proposal
        for decl in self.pending:
            self.state.add(decl, "input")
        node_id = f"n{len(self.nodes)}"
        counter = sum(len(n.outs) for n in self.nodes)
        try:
            made = self.state.apply(op_name, args, attrs, lambda k: [f"v{counter + i}" for i in range(k)])
        except Invalid:
            for decl in self.pending:
                del self.state.values[decl.name]
            self.pending = []
            return False
        self.inputs += self.pending
        self.pending = []
        self.nodes.append(Node(node_id, op_name, list(args), dict(attrs), [v.decl() for v in made]))
        if OPS[op_name].kind == "inplace":
            written = self.state.values[args[0]]
            self.written.add(written.root)
            written.uses = 0  # its new contents are worth reading
            self.state.values[written.root].uses = 0
        return True


def _into(small, big) -> bool:
    """``small`` broadcasts to exactly ``big``."""
    if len(small) > len(big):
        return False
    return all(s == b or s == 1 for s, b in zip(reversed(small), reversed(big)))


def _shape(g: Gen, kind: str) -> list:
    if kind == "image":
        return [g.randint(1, 2), g.randint(1, 4), g.randint(3, 8), g.randint(3, 8)]
    if kind == "sequence":
        return [g.randint(1, 3), g.randint(1, 6), g.randint(2, 8)]
    if kind == "matrix":
        return [g.randint(1, 6), g.randint(1, 8)]
    if kind == "vector":
        return [g.randint(1, 8)]
    return []


def generate(seed: int) -> Spec:
    g = Gen(seed)
    first = _shape(g, g.weighted(SHAPE_KINDS))
    if first and g.chance(0.25):
        count = 2 if len(first) >= 2 and g.chance(0.3) else 1
        for i, dim in enumerate(g.rng.sample(range(len(first)), count)):
            high = g.randint(4, 8)
            g.symbols.append(Symbol(f"s{i}", 2, high, g.randint(2, high)))
            first[dim] = f"s{i}"
    g.state = State(g.symbols)
    dtypes = list(INPUT_DTYPES)
    g.inputs.append(TensorDecl("x0", first, g.weighted(dtypes)))
    if g.chance(0.35):
        shape = _shape(g, g.weighted(SHAPE_KINDS))
        g.inputs.append(TensorDecl("x1", shape, g.weighted(dtypes)))
    for decl in g.inputs:
        g.state.add(decl, "input")
    if g.chance(0.25):
        for i in range(g.randint(1, 2)):
            base = g.choice(g.inputs).shape
            shape = [1 if isinstance(d, str) else d for d in base] if g.chance(0.7) else _shape(g, "matrix")
            dtype = g.weighted((("float32", 8), ("int64", 1), ("float16", 1)))
            decl = TensorDecl(f"b{i}", shape, dtype, g.choice(["zeros", "values"]))
            g.buffers.append(decl)
            g.state.add(decl, "buffer")

    names = list(OPS)
    weights = [OPS[n].weight for n in names]
    target = g.randint(3, 16)
    attempts = 0
    while len(g.nodes) < target and attempts < 30 * target:
        attempts += 1
        g.add_node(g.rng.choices(names, weights)[0])
    inplace = [n for n in names if OPS[n].kind == "inplace"]
    for buffer in g.buffers:
        g.forced = buffer.name
        for _ in range(40):
            if buffer.name in g.written or g.add_node(g.choice(inplace)):
                break
        g.forced = None

    return Spec(
        seed=seed,
        inputs=g.inputs,
        nodes=g.nodes,
        outputs=_outputs(g),
        symbols=g.symbols,
        buffers=g.buffers,
        calls=3 if g.buffers or g.symbols else 2,
    )


def _outputs(g: Gen) -> list[str]:
    values = list(g.state.values.values())
    leaves = [v.name for v in values if v.kind == "node" and v.uses == 0]
    # Values written in place (or a view of them was) are read back through their root.
    leaves += [v.name for v in values if v.kind == "buffer" and v.name in g.written and g.chance(0.5)]
    outputs = leaves[-MAX_OUTPUTS:]
    if not outputs:
        made = [v.name for v in values if v.kind == "node"]
        outputs = made[-1:] or [g.inputs[0].name]
    if g.chance(0.05):
        outputs.append(g.choice(g.inputs).name)  # an input handed straight back
    if g.chance(0.05):
        outputs.append(g.choice(outputs))  # one value returned twice
    return outputs
