"""A fuzz program as data: the JSON-serialisable graph spec the generator makes and the builder runs.

A spec names its values: graph inputs ``x<i>``, mutable buffers ``b<i>`` and node
outputs ``v<i>``. A dimension is an int or the name of a bounded dynamic
dimension (a ``Symbol``, exported as ``torch.export.Dim``). Node ids (``n<i>``)
and the spec's seed fix every weight and input value, so removing one node while
shrinking leaves the others' numbers unchanged.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

FORMAT = 1

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
FLOATS = ("float32", "float16", "bfloat16")
INTS = ("int64", "int32")
REALS = FLOATS + INTS
ALL = REALS + ("bool",)

Dim = int | str


@dataclass
class Symbol:
    name: str
    min: int
    max: int
    example: int


@dataclass
class TensorDecl:
    name: str
    shape: list[Dim]
    dtype: str
    init: str = ""  # buffers only: "zeros" (the runtime's zeroed arena) or "values" (stored in the program)


@dataclass
class Node:
    id: str
    op: str
    args: list[str]
    attrs: dict
    outs: list[TensorDecl] = field(default_factory=list)


@dataclass
class Spec:
    seed: int
    inputs: list[TensorDecl]
    nodes: list[Node]
    outputs: list[str]
    symbols: list[Symbol] = field(default_factory=list)
    buffers: list[TensorDecl] = field(default_factory=list)
    calls: int = 2  # calls made in order on one loaded method (state and new shapes between them)

    def to_json(self) -> dict:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> Spec:
        data = dict(data)
        if data.pop("format", FORMAT) != FORMAT:
            raise ValueError("unknown fuzz spec format")
        return cls(
            seed=data["seed"],
            inputs=[TensorDecl(**t) for t in data["inputs"]],
            nodes=[
                Node(
                    n["id"], n["op"], list(n["args"]), dict(n["attrs"]), [TensorDecl(**t) for t in n["outs"]]
                )
                for n in data["nodes"]
            ],
            outputs=list(data["outputs"]),
            symbols=[Symbol(**s) for s in data.get("symbols", [])],
            buffers=[TensorDecl(**t) for t in data.get("buffers", [])],
            calls=data.get("calls", 2),
        )

    def copy(self) -> Spec:
        return Spec.from_json(json.loads(json.dumps(self.to_json())))

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    def symbol(self, name: str) -> Symbol:
        return next(s for s in self.symbols if s.name == name)

    def describe(self) -> str:
        """One line per node, for reports."""
        lines = [f"inputs: {', '.join(_decl(t) for t in self.inputs)}"]
        if self.symbols:
            lines.append("symbols: " + ", ".join(f"{s.name} in [{s.min}, {s.max}]" for s in self.symbols))
        if self.buffers:
            lines.append(f"buffers: {', '.join(_decl(t) + ' ' + t.init for t in self.buffers)}")
        for n in self.nodes:
            outs = ", ".join(_decl(t) for t in n.outs) or "(in place)"
            attrs = ", ".join(f"{k}={v}" for k, v in n.attrs.items())
            lines.append(f"{n.id}: {outs} = {n.op}({', '.join(n.args)}{'; ' + attrs if attrs else ''})")
        lines.append(f"outputs: {', '.join(self.outputs)} (x{self.calls} calls)")
        return "\n".join(lines)


def _decl(t: TensorDecl) -> str:
    return f"{t.name}:{t.dtype}{list(t.shape)}"


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())
