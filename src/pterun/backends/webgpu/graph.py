"""The VkGraph of a verified blob, decoded into plain Python.

Values keep their ids (operators refer to them by index). Tensors become
:class:`TensorValue`; scalars become Python ``None``/``bool``/``int``/
``float``/``str``; lists and run-time integers get small wrappers so a list
of ints is never mistaken for a list of value ids. Nothing here touches a GPU.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from pterun.backends.webgpu._generated import vkgraph_generated as fb
from pterun.backends.webgpu.blob import Blob
from pterun.errors import InvalidProgram, NotFound

NAMED = 0xFFFFFFFFFFFFFFFF  # VkBytes.offset of a constant kept in the program's named data


# VkDataType as an enum: the generated class is a plain namespace of ints.
DType = enum.IntEnum("DType", {k: v for k, v in vars(fb.VkDataType).items() if not k.startswith("_")})  # type: ignore[misc]


@dataclass
class TensorValue:
    dtype: DType
    dims: tuple[int, ...]
    constant_id: int = -1
    mem_obj_id: int = -1
    staging: DType = DType.UNSET

    @property
    def is_constant(self) -> bool:
        return self.constant_id >= 0


@dataclass(frozen=True)
class SymInt:
    """An integer computed at run time (a dynamic size)."""


@dataclass(frozen=True)
class IntList:
    items: tuple[int, ...]


@dataclass(frozen=True)
class DoubleList:
    items: tuple[float, ...]


@dataclass(frozen=True)
class BoolList:
    items: tuple[bool, ...]


@dataclass(frozen=True)
class ValueList:
    """Value ids: tensors (cat's inputs), or ints and SymInts (a dynamic shape)."""

    items: tuple[int, ...]


@dataclass
class Op:
    name: str
    args: list[int]
    node_id: int = 0  # the exporter's delegate debug identifier (ETRecord maps it to the graph's nodes)
    replaces: tuple[str, ...] = ()  # a fused operator: the exported operators it stands for, in order


@dataclass(frozen=True)
class Constant:
    offset: int
    length: int
    named_key: str | None


@dataclass
class Graph:
    values: list
    chain: list[Op]
    inputs: list[int]
    outputs: list[int]
    constants: list[Constant] = field(default_factory=list)

    def tensor(self, vid: int) -> TensorValue:
        value = self.values[vid]
        if not isinstance(value, TensorValue):
            raise InvalidProgram(f"Vulkan graph value {vid} is {type(value).__name__}, expected a tensor")
        return value


# Scalar values: the table's reader and its value as Python's.
_SCALARS = {
    fb.GraphTypes.Int: (fb.Int, lambda x: int(x.IntVal())),
    fb.GraphTypes.Double: (fb.Double, lambda x: float(x.DoubleVal())),
    fb.GraphTypes.Bool: (fb.Bool, lambda x: bool(x.BoolVal())),
    fb.GraphTypes.String: (fb.String, lambda x: (x.StringVal() or b"").decode()),
}
# Lists: the table's reader, the wrapper that keeps them apart, and each item as Python's.
_LISTS = {
    fb.GraphTypes.IntList: (fb.IntList, IntList, int),
    fb.GraphTypes.DoubleList: (fb.DoubleList, DoubleList, float),
    fb.GraphTypes.BoolList: (fb.BoolList, BoolList, bool),
    fb.GraphTypes.ValueList: (fb.ValueList, ValueList, int),
}


def _decode_value(v: fb.VkValue):
    kind = v.ValueType()
    table = v.Value()
    if kind == fb.GraphTypes.NONE or kind == fb.GraphTypes.Null or table is None:
        return None
    if kind == fb.GraphTypes.SymInt:
        return SymInt()
    if kind == fb.GraphTypes.VkTensor:
        x = fb.VkTensor()
        x.Init(table.Bytes, table.Pos)
        try:
            dtype, staging = DType(x.Datatype()), DType(x.StagingDatatype())
        except ValueError:
            raise InvalidProgram(f"Vulkan tensor has unknown datatype {x.Datatype()}") from None
        return TensorValue(
            dtype=dtype,
            dims=tuple(int(d) for d in x.DimsAsNumpy()) if x.DimsLength() else (),
            constant_id=x.ConstantId(),
            mem_obj_id=x.MemObjId(),
            staging=staging,
        )
    if kind in _SCALARS:
        reader, value = _SCALARS[kind]
        x = reader()
        x.Init(table.Bytes, table.Pos)
        return value(x)
    if kind in _LISTS:
        reader, wrapper, conv = _LISTS[kind]
        x = reader()
        x.Init(table.Bytes, table.Pos)
        n = x.ItemsLength()
        return wrapper(tuple(conv(i) for i in x.ItemsAsNumpy()) if n else ())
    raise InvalidProgram(f"Vulkan graph value has unknown type {kind}")


def read_graph(blob: Blob) -> Graph:
    """Decodes a verified blob's flatbuffer (split_blob has verified it)."""
    try:
        return _read_graph(bytes(blob.flatbuffer))
    except UnicodeDecodeError as exc:
        raise InvalidProgram(f"Vulkan graph holds a string that is not UTF-8 ({exc.reason})") from None


def _read_graph(buf: bytes) -> Graph:
    g = fb.VkGraph.GetRootAs(buf, 0)
    values = [_decode_value(g.Values(i)) for i in range(g.ValuesLength())]
    n = len(values)
    chain = []
    for i in range(g.ChainLength()):
        call = g.Chain(i)
        name = call.Name()
        args = [int(a) for a in call.ArgsAsNumpy()] if call.ArgsLength() else []
        bad = [a for a in args if not 0 <= a < n]
        if bad:
            raise InvalidProgram(f"Vulkan operator {i} refers to value {bad[0]}; the graph has {n} values")
        chain.append(Op(name.decode() if name else "", args, call.NodeId()))
    inputs = [int(i) for i in g.InputIdsAsNumpy()] if g.InputIdsLength() else []
    outputs = [int(i) for i in g.OutputIdsAsNumpy()] if g.OutputIdsLength() else []
    for what, ids in (("input", inputs), ("output", outputs)):
        for vid in ids:
            if not 0 <= vid < n:
                raise InvalidProgram(f"Vulkan graph {what} {vid} is not one of its {n} values")
    for i, value in enumerate(values):
        if isinstance(value, ValueList) and any(not 0 <= j < n for j in value.items):
            raise InvalidProgram(f"Vulkan value list {i} refers to a value outside the graph")
    constants = []
    for i in range(g.ConstantsLength()):
        c = g.Constants(i)
        key = c.NamedKey()
        constants.append(
            Constant(int(c.Offset()), int(c.Length()), key.decode() if key is not None else None)
        )
    for value in values:
        if isinstance(value, TensorValue) and value.constant_id >= len(constants):
            raise InvalidProgram(
                f"Vulkan tensor refers to constant {value.constant_id}; the graph has {len(constants)}"
            )
    return Graph(values, chain, inputs, outputs, constants)


def constant_bytes(
    graph: Graph, index: int, blob_constants: memoryview, named_data: Mapping[str, memoryview]
) -> memoryview:
    """The bytes of constant ``index``: from the blob's constant region or the program's named data."""
    c = graph.constants[index]
    if c.offset == NAMED:
        if c.named_key is None:
            raise InvalidProgram(f"Vulkan constant {index} is marked as named data but has no key")
        data = named_data.get(c.named_key)
        if data is None:
            raise NotFound(
                f"Vulkan constant {index}: named data {c.named_key!r} is not in the program or its data files"
            )
        data = memoryview(data).cast("B")
        if len(data) < c.length:
            raise InvalidProgram(
                f"Vulkan constant {index}: named data {c.named_key!r} has {len(data)} bytes, "
                f"expected {c.length}"
            )
        return data[: c.length]
    if c.offset > len(blob_constants) or c.length > len(blob_constants) - c.offset:
        raise InvalidProgram(
            f"Vulkan constant {index} ({c.length} bytes at {c.offset}) runs past the "
            f"{len(blob_constants)}-byte constant region"
        )
    return blob_constants[c.offset : c.offset + c.length]
